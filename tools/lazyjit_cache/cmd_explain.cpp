// explain: why two programs are two entries. A key is structure-shape-target
// (cache/cache_key.h); this names the parts that differ, then the details
// behind each: target fields, input shapes and dtypes, and the first IR line
// that differs with its op (and call site, when the IR line carries one).
#include <set>
#include <sstream>

#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

// The manifest's "target" object, or the same fields parsed from
// code_fingerprint ("llvm X;cpu Y;features ...;O3,...;lazyjit V;passes off:...")
// for entries written before the runtime stored them.
json target_fields(const json& m) {
  if (m.contains("target") && m["target"].is_object()) return m["target"];
  json t = json::object();
  std::string fp = m.value("code_fingerprint", std::string());
  std::stringstream ss(fp);
  std::string part;
  while (std::getline(ss, part, ';')) {
    size_t space = part.find(' ');
    if (part.rfind("passes off:", 0) == 0) t["passes_off"] = part.substr(11);
    else if (space == std::string::npos) t["codegen"] = part;
    else t[part.substr(0, space)] = part.substr(space + 1);
  }
  return t;
}

std::set<std::string> split_set(const std::string& s, char sep) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, sep))
    if (!x.empty()) out.insert(x);
  return out;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x)) out.push_back(x);
  return out;
}

// "  %9 = aten["aten::addmm", ...](...) : f32[7,64]" -> "aten[aten::addmm]";
// "  %10 = gelu[f32](%9) : ..." -> "gelu".
std::string op_of(const std::string& line) {
  size_t eq = line.find(" = ");
  if (eq == std::string::npos) return "";
  size_t start = eq + 3, end = line.find_first_of("[(", start);
  std::string op = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (op == "aten" && end != std::string::npos && line[end] == '[') {
    size_t q1 = line.find('"', end), q2 = q1 == std::string::npos ? q1 : line.find('"', q1 + 1);
    if (q2 != std::string::npos) op += "[" + line.substr(q1 + 1, q2 - q1 - 1) + "]";
  }
  return op;
}

// A call site carried by the IR line ("... # file.py:12" or "loc(file.py:12)"), if any.
std::string site_of(const std::string& line) {
  if (size_t at = line.rfind(" # "); at != std::string::npos) return line.substr(at + 3);
  if (size_t at = line.rfind("loc("); at != std::string::npos) {
    size_t end = line.find(')', at);
    return line.substr(at + 4, end == std::string::npos ? std::string::npos : end - at - 4);
  }
  return "";
}

// "input 0 dim 0: 7 → 8", "input 2: dtype f32 → f16", "input 1: rank 2 → 3", ...
json tensor_differences(const char* what, const json& a, const json& b) {
  json out = json::array();
  auto add = [&](size_t i, const std::string& field, json dim, json va, json vb, std::string text) {
    out.push_back({{"tensor", what}, {"index", i}, {"field", field}, {"dim", dim}, {"a", va}, {"b", vb}, {"text", text}});
  };
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    std::string name = std::string(what) + " " + std::to_string(i);
    if (i >= a.size() || i >= b.size()) {
      add(i, "presence", nullptr, i < a.size(), i < b.size(), name + ": only in " + (i < a.size() ? "the first" : "the second"));
      continue;
    }
    const json &ta = a[i], &tb = b[i];
    if (ta.value("dtype", "") != tb.value("dtype", ""))
      add(i, "dtype", nullptr, ta.value("dtype", ""), tb.value("dtype", ""),
          name + ": dtype " + ta.value("dtype", "") + " → " + tb.value("dtype", ""));
    json sa = ta.value("sizes", json::array()), sb = tb.value("sizes", json::array());
    if (sa.size() != sb.size()) {
      add(i, "rank", nullptr, sa.size(), sb.size(),
          name + ": rank " + std::to_string(sa.size()) + " → " + std::to_string(sb.size()) + " (" + shapes_text(json::array({ta})) + " → " + shapes_text(json::array({tb})) + ")");
      continue;
    }
    for (size_t d = 0; d < sa.size(); ++d)
      if (sa[d] != sb[d])
        add(i, "size", d, sa[d], sb[d], name + " dim " + std::to_string(d) + ": " + sa[d].dump() + " → " + sb[d].dump());
    if (ta.value("strides", json::array()) != tb.value("strides", json::array()))
      add(i, "strides", nullptr, ta.value("strides", json::array()), tb.value("strides", json::array()),
          name + ": strides " + ta.value("strides", json::array()).dump() + " → " + tb.value("strides", json::array()).dump());
  }
  return out;
}

}  // namespace

int cmd_explain(const Common& c, const std::string& key1, const std::string& key2) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  const Entry &a = find_entry(all, key1), &b = find_entry(all, key2);
  for (const Entry* e : {&a, &b})
    if (!e->problem.empty()) throw ToolError("lazyjit-cache: " + e->key + " is unreadable: " + e->problem, 1);
  const json &ma = a.manifest, &mb = b.manifest;

  json parts = json::array();
  json pa = ma.value("key_parts", json::object()), pb = mb.value("key_parts", json::object());
  for (const char* p : {"structure", "shape", "target"})
    if (pa.value(p, "") != pb.value(p, "")) parts.push_back(p);

  json target = json::array();
  json ta = target_fields(ma), tb = target_fields(mb);
  std::set<std::string> names;
  for (auto& [k, v] : ta.items()) names.insert(k);
  for (auto& [k, v] : tb.items()) names.insert(k);
  for (const std::string& k : names) {
    std::string va = ta.value(k, ""), vb = tb.value(k, "");
    if (va == vb) continue;
    json row = {{"field", k}, {"a", va}, {"b", vb}};
    if (k == "features") {  // hundreds of flags: say which
      auto fa = split_set(va, ','), fb = split_set(vb, ',');
      json only_a = json::array(), only_b = json::array();
      for (auto& f : fa) if (!fb.count(f)) only_a.push_back(f);
      for (auto& f : fb) if (!fa.count(f)) only_b.push_back(f);
      row["only_a"] = only_a, row["only_b"] = only_b;
    }
    target.push_back(row);
  }
  // Keys whose target parts differ while every recorded field agrees: entries
  // written before the manifest recorded debug_nans (the one switch the key's
  // target part holds beyond the fingerprint) differ in it.
  if (target.empty() && pa.value("target", "") != pb.value("target", ""))
    target.push_back({{"field", "debug_nans"}, {"a", ta.value("debug_nans", "not recorded")},
                      {"b", tb.value("debug_nans", "not recorded")},
                      {"note", "the fingerprints agree: the entries differ in debug_nans (lazyjit.debug_nans(), "
                               "LAZYJIT_DEBUG_NANS), which these manifests do not record; its kernels check what they store"}});
  json other = json::array();
  for (const char* f : {"kind", "libtorch_version", "format", "scalars"})
    if (ma.value(f, json()) != mb.value(f, json())) other.push_back({{"field", f}, {"a", ma.value(f, json())}, {"b", mb.value(f, json())}});

  json inputs = tensor_differences("input", ma.value("inputs", json::array()), mb.value("inputs", json::array()));
  json outputs = tensor_differences("output", ma.value("outputs", json::array()), mb.value("outputs", json::array()));

  // The header line ("graph(inputs=5, scalars=4) {") is skipped: counts
  // differ whenever anything does. first_op skips input and scalar lines too,
  // whose differences the input list above already names.
  auto la = lines(ma.value("ir", std::string())), lb = lines(mb.value("ir", std::string()));
  auto first_difference = [&](bool ops_only) -> json {
    for (size_t i = 1; i < std::max(la.size(), lb.size()); ++i) {
      std::string x = i < la.size() ? la[i] : "", y = i < lb.size() ? lb[i] : "";
      std::string ox = op_of(x), oy = op_of(y);
      if (x == y || (ops_only && (ox == "input" || ox == "scalar") && ox == oy)) continue;
      return {{"line", i + 1}, {"a", x}, {"b", y}, {"op_a", ox}, {"op_b", oy},
              {"site_a", site_of(x).empty() ? json(nullptr) : json(site_of(x))},
              {"site_b", site_of(y).empty() ? json(nullptr) : json(site_of(y))}};
    }
    return nullptr;
  };
  json first_ir = first_difference(false), first_op = first_difference(true);

  if (c.json) {
    json out = {{"schema", "lazyjit-cache/explain/1"},
                {"dir", cache.dir},
                {"a", {{"key", a.key}, {"site", a.site()}}},
                {"b", {{"key", b.key}, {"site", b.site()}}},
                {"same_entry", a.key == b.key},
                {"key_parts", parts},
                {"target", target},
                {"inputs", inputs},
                {"outputs", outputs},
                {"other", other},
                {"first_ir_difference", first_ir},
                {"first_op_difference", first_op}};
    std::printf("%s\n", json_text(out).c_str());
    return 0;
  }
  // Keys, sites, target fields and IR lines come from the entries: printed escaped.
  auto p = [](const std::string& text) { return printable(text); };
  auto pj = [](const json& v) { return printable(v.is_string() ? v.get<std::string>() : v.dump()); };
  std::printf("a  %s  (%s)\nb  %s  (%s)\n", p(a.key).c_str(), p(a.site()).c_str(), p(b.key).c_str(), p(b.site()).c_str());
  if (a.key == b.key) {
    std::printf("\nthe same entry\n");
    return 0;
  }
  std::string ps;
  for (auto& part : parts) ps += (ps.empty() ? "" : ", ") + part.get<std::string>();
  // "target (debug_nans)": the part, and the switches behind it.
  std::string fields;
  for (auto& t : target) fields += (fields.empty() ? "" : ", ") + pj(t["field"]);
  if (!fields.empty() && ps.find("target") != std::string::npos) ps.replace(ps.find("target"), 6, "target (" + fields + ")");
  std::printf("\nkey parts that differ: %s\n", ps.empty() ? "none (same parts, different file names?)" : ps.c_str());
  for (auto& t : target) {
    if (t.contains("only_a"))
      std::printf("  target %s: only in a %s, only in b %s\n", pj(t["field"]).c_str(), p(t["only_a"].dump()).c_str(),
                  p(t["only_b"].dump()).c_str());
    else
      std::printf("  target %s: %s → %s%s\n", pj(t["field"]).c_str(), pj(t["a"]).c_str(), pj(t["b"]).c_str(),
                  t.contains("note") ? (" (" + pj(t["note"]) + ")").c_str() : "");
  }
  for (auto& o : other)
    std::printf("  %s: %s → %s\n", pj(o["field"]).c_str(), p(o["a"].dump()).c_str(), p(o["b"].dump()).c_str());
  if (!inputs.empty()) std::printf("\ninputs that differ\n");
  for (auto& d : inputs) std::printf("  %s\n", pj(d["text"]).c_str());
  if (!outputs.empty()) std::printf("\noutputs that differ\n");
  for (auto& d : outputs) std::printf("  %s\n", pj(d["text"]).c_str());
  auto print_difference = [&](const char* what, const json& d) {
    if (d.is_null()) return;
    std::printf("\n%s (line %d): %s vs %s\n  a: %s\n  b: %s\n", what, d["line"].get<int>(), pj(d["op_a"]).c_str(),
                pj(d["op_b"]).c_str(), pj(d["a"]).c_str(), pj(d["b"]).c_str());
    if (!d["site_a"].is_null() || !d["site_b"].is_null())
      std::printf("  call sites: %s vs %s\n", p(d["site_a"].dump()).c_str(), p(d["site_b"].dump()).c_str());
  };
  if (first_ir.is_null()) std::printf("\nIR: identical\n");
  print_difference("first IR line that differs", first_ir);
  if (first_op != first_ir) print_difference("first op that differs", first_op);
  return 0;
}

}  // namespace lazyjit::cache_tool
