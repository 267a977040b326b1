// ls and show: the read-only views of entries.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "env/env.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/object_code.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

// Names sort ascending; times and numbers largest (newest) first.
void sort_entries(std::vector<Entry>& v, const std::string& field, bool reverse) {
  auto by = [&](auto get, bool descending) {
    std::stable_sort(v.begin(), v.end(), [&](const Entry& a, const Entry& b) {
      return (descending != reverse) ? get(b) < get(a) : get(a) < get(b);
    });
  };
  if (field == "key") by([](const Entry& e) { return e.key; }, false);
  else if (field == "site") by([](const Entry& e) { return e.site(); }, false);
  else if (field == "created") by([](const Entry& e) { return e.created(); }, true);
  else if (field == "last_used") by([](const Entry& e) { return e.last_used; }, true);
  else if (field == "hits") by([](const Entry& e) { return e.hits; }, true);
  else if (field == "compile_ms") by([](const Entry& e) { return e.compile_ms(); }, true);
  else if (field == "size") by([](const Entry& e) { return e.file_bytes; }, true);
  else if (field == "ops") by([](const Entry& e) { return e.ops(); }, true);
  else throw ToolError("lazyjit-cache: cannot sort by '" + field + "'");
}

void print_section(const char* title, const std::string& text) {
  std::printf("\n== %s\n%s", title, printable_text(text).c_str());
  if (!text.empty() && text.back() != '\n') std::printf("\n");
}

}  // namespace

int cmd_ls(const Common& c, const LsOptions& o) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache), shown;
  for (Entry& e : all)
    if (o.filter.empty() || e.key.find(o.filter) != std::string::npos || e.site().find(o.filter) != std::string::npos)
      shown.push_back(std::move(e));
  sort_entries(shown, o.sort, o.reverse);
  if (o.limit > 0 && shown.size() > static_cast<size_t>(o.limit)) shown.resize(o.limit);

  if (c.json) {
    json rows = json::array();
    for (const Entry& e : shown) rows.push_back(entry_summary(e));
    json out = {{"schema", "lazyjit-cache/ls/1"}, {"dir", cache.dir}, {"entries", rows}};
    std::printf("%s\n", json_text(out).c_str());
    return 0;
  }
  Table t;
  t.headers = {"KEY", "KIND", "CREATED", "LAST USED", "HITS", "COMPILE MS", "SIZE", "OPS", "SITE", "SHAPES"};
  t.right = {false, false, false, false, true, true, true, true, false, false};
  // Fits the terminal: SITE gives up its head (the file and line stay), SHAPES
  // its last shapes ("+N more", at most 48 columns), then the columns least
  // needed to tell entries apart go.
  t.width = terminal_width();
  t.min_width = {0, 0, 0, 0, 0, 0, 0, 0, 20, 24};
  t.cut_left = {false, false, false, false, false, false, false, false, true, false};
  t.list = {false, false, false, false, false, false, false, false, false, true};
  t.drop = {0, 1, 3, 6, 7, 4, 5, 2, 0, 0};
  for (const Entry& e : shown) {
    if (!e.problem.empty()) {
      t.whole_last.push_back(t.rows.size());
      t.rows.push_back({short_key(e.key), "?", "-", "-", "-", "-", human_bytes(e.file_bytes), "-", "",
                        "unreadable: " + e.problem});
      continue;
    }
    t.rows.push_back({short_key(e.key), e.kind(), format_time(e.created()), format_time(e.last_used),
                      std::to_string(e.hits), format_ms(e.compile_ms()), human_bytes(e.file_bytes),
                      std::to_string(e.ops()), e.site(), shapes_text(e.manifest.value("inputs", json::array()))});
  }
  t.print(stdout);
  if (shown.empty()) std::printf("(no entries in %s)\n", printable(cache.dir).c_str());
  return 0;
}

int cmd_show(const Common& c, const ShowOptions& o) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  const Entry& e = find_entry(all, o.key);
  if (!e.problem.empty()) throw ToolError("lazyjit-cache: " + e.key + " is unreadable: " + e.problem, 1);
  const json& m = e.manifest;

  std::string llvm_text, llvm_note, asm_text, asm_note;
  if (o.llvm) {
    std::string dir = !o.dump_dir.empty() ? o.dump_dir : env::get("LAZYJIT_DUMP");
    std::string path = dir + "/" + e.key + ".ll";
    std::ifstream in(path);
    if (!dir.empty() && in) llvm_text.assign(std::istreambuf_iterator<char>(in), {});
    else llvm_note = "cache entries hold object code, not LLVM IR; run the program with LAZYJIT_DUMP=<dir> and pass "
                     "--dump-dir <dir> (looked for " + (dir.empty() ? std::string("$LAZYJIT_DUMP unset") : path) + ")";
  }
  // A CUDA entry (its kernels' PTX and cubins, targets/cuda/cuda_target.cpp)
  // always shows its kernels' launch shapes; --asm adds their PTX and SASS.
  const bool cuda_entry = m.value("code_fingerprint", std::string()).rfind("target cuda;", 0) == 0;
  ObjectCode obj;
  if (o.asm_ || cuda_entry) obj = object_code(read_whole_file(e.path), e.key, m);
  CudaView cuda;
  std::string cuda_error;
  if (obj.format == ObjectCode::Format::Cuda && obj.error.empty()) cuda = cuda_view(obj, o.asm_);
  else if (cuda_entry && !obj.error.empty()) cuda_error = obj.error;
  if (o.asm_) {
    if (!obj.error.empty()) asm_note = obj.error;
    else if (obj.bytes.empty()) asm_note = "no object code: every step of this program is a library (ATen) call";
    else if (obj.format == ObjectCode::Format::Cuda) asm_text = cuda.listing;
    else
      for (const ObjectCode::Unit& u : obj.units) {
        std::string text = disassemble(u.object, &asm_note);
        if (text.empty()) break;
        asm_text += "== kernel " + u.symbol + (u.generic ? " (shape-generic)" : "") + "\n" + text;
      }
  }

  if (c.json) {
    json out = {{"schema", "lazyjit-cache/show/1"}, {"dir", cache.dir}, {"path", e.path}, {"summary", entry_summary(e)},
                {"manifest", m}};
    if (o.llvm) out["llvm"] = llvm_text.empty() ? json(nullptr) : json(llvm_text);
    if (o.asm_) out["asm"] = asm_text.empty() ? json(nullptr) : json(asm_text);
    if (obj.format == ObjectCode::Format::Cuda && obj.error.empty()) out["cuda"] = cuda.json;
    else if (!cuda_error.empty()) out["cuda"] = {{"error", cuda_error}};
    if (!cuda_error.empty() && asm_note.empty()) cuda.notes.insert(cuda.notes.begin(), cuda_error);
    if (!llvm_note.empty() || !asm_note.empty() || !cuda.notes.empty()) out["notes"] = json::array();
    if (!llvm_note.empty()) out["notes"].push_back(llvm_note);
    if (!asm_note.empty()) out["notes"].push_back(asm_note);
    for (const std::string& n : cuda.notes) out["notes"].push_back(n);
    std::printf("%s\n", json_text(out).c_str());
    return 0;
  }
  // Every string from the entry is printed through printable(): a key (a file
  // name) or a manifest field may hold newlines or terminal escapes.
  std::printf("key         %s\n", printable(e.key).c_str());
  std::printf("path        %s\n", printable(e.path).c_str());
  std::printf("kind        %s\n", printable(e.kind()).c_str());
  std::printf("created     %s\n", format_time(e.created()).c_str());
  std::printf("last used   %s (%lld hits)\n", format_time(e.last_used).c_str(), (long long)e.hits);
  std::printf("compile ms  %s\n", format_ms(e.compile_ms()).c_str());
  std::printf("size        %s (object code %s)\n", human_bytes(e.file_bytes).c_str(),
              human_bytes(m.value("object_bytes", uint64_t{0})).c_str());
  std::printf("site        %s\n", printable(e.site()).c_str());
  std::printf("ops         %lld (kernels %lld, aten steps %lld, scalars %lld)\n", (long long)e.ops(),
              (long long)m.value("kernels", 0), (long long)m.value("aten_steps", 0), (long long)m.value("scalars", 0));
  std::printf("inputs      %s\n", printable(shapes_text(m.value("inputs", json::array()))).c_str());
  std::printf("outputs     %s\n", printable(shapes_text(m.value("outputs", json::array()))).c_str());
  std::printf("libtorch    %s\n", printable(m.value("libtorch_version", std::string("?"))).c_str());
  std::printf("fingerprint %s\n", printable(m.value("code_fingerprint", std::string("?"))).c_str());
  print_section("IR", m.value("ir", std::string()));
  print_section("plan", m.value("plan", std::string()));
  if (cuda_entry || obj.format == ObjectCode::Format::Cuda)
    print_section("CUDA kernels", !cuda_error.empty() ? cuda_error
                                  : obj.bytes.empty() ? "no kernels: every step of this program is a library call"
                                                      : cuda.table);
  if (o.llvm) print_section("LLVM IR", llvm_text.empty() ? llvm_note : llvm_text);
  if (o.asm_) print_section("assembly", asm_text.empty() ? asm_note : asm_text);
  return 0;
}

}  // namespace lazyjit::cache_tool
