// A CUDA entry's kernels as `show` prints them: the launch shape of each, its
// PTX (stored in the entry) and its SASS, disassembled from the stored cubin by
// the CUDA toolkit's nvdisasm (or cuobjdump) when one is installed. Nothing
// here needs a GPU or the CUDA driver.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "env/env.h"
#include "tools/lazyjit_cache/object_code.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Row kernels: "rows a block" (1: one block a row; block / 32: one warp a row).
std::string rows_text(const ObjectCode::Unit& u) {
  if (u.grid != "rows") return "-";
  return u.rows_per_block > 1 ? std::to_string(u.rows_per_block) + " (warp)" : "1 (block)";
}

std::string launch_text(const ObjectCode::Unit& u) {
  std::string s = "grid " + u.grid + ", block " + std::to_string(u.block) + ", shared " + human_bytes(u.shared_bytes) +
                  ", " + std::to_string(u.elements_per_thread) + " per thread";
  if (u.grid == "rows")
    s += u.rows_per_block > 1 ? ", " + std::to_string(u.rows_per_block) + " rows a block (one warp a row)"
                              : ", one block a row";
  return s;
}

}  // namespace

std::string ptx_isa_text(uint32_t isa) { return std::to_string(isa / 10) + "." + std::to_string(isa % 10); }

std::string find_sass_tool(std::string* looked) {
  std::vector<std::string> dirs;
  std::string p = env::get("PATH");
  for (size_t start = 0; start <= p.size();) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    if (end > start) dirs.push_back(p.substr(start, end - start));
    start = end + 1;
  }
  const std::string home = env::get("CUDA_HOME");
  if (!home.empty()) dirs.push_back(home + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  for (const char* name : {"nvdisasm", "cuobjdump"})
    for (const std::string& d : dirs)
      if (is_executable_file(d + "/" + name)) return d + "/" + name;
  if (looked)
    *looked = std::string("PATH, ") + (!home.empty() ? home + "/bin" : "$CUDA_HOME/bin (unset)") +
              ", /usr/local/cuda/bin";
  return "";
}

std::string disassemble_cubin(const std::string& tool, const std::string& cubin, std::string* note) {
  char path[] = "/tmp/lazyjit-cache-sass.XXXXXX.cubin";
  int fd = ::mkstemps(path, 6);
  if (fd < 0 || ::write(fd, cubin.data(), cubin.size()) != static_cast<ssize_t>(cubin.size())) {
    if (fd >= 0) ::close(fd), ::unlink(path);
    *note = "cannot write a temporary file for " + base_name(tool);
    return "";
  }
  ::close(fd);
  const bool nvdisasm = base_name(tool) == "nvdisasm";
  int status = 0;
  std::string text =
      run_capture(shell_quote(tool) + (nvdisasm ? " -c " : " -sass ") + shell_quote(path) + " 2>&1", &status);
  ::unlink(path);
  if (status != 0 || text.empty()) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    *note = base_name(tool) + " failed on the cubin" + (text.empty() ? std::string(" (no output)") : ": " + text);
    return "";
  }
  return text;
}

CudaView cuda_view(const ObjectCode& obj, bool code) {
  CudaView v;
  const std::string isa = ptx_isa_text(obj.ptx_isa);
  std::string looked, tool;
  if (code) {
    tool = find_sass_tool(&looked);
    if (tool.empty())
      v.notes.push_back("SASS not shown: no nvdisasm or cuobjdump found (looked on " + looked +
                        "); install the CUDA toolkit's nvdisasm (apt: cuda-nvdisasm-<version>; pip: "
                        "nvidia-cuda-nvdisasm) and put it on PATH or set CUDA_HOME");
  }
  // How many plan kernels each unit serves (equal kernels compile once).
  std::map<uint32_t, int> serves;
  for (uint32_t u : obj.kernel_units) ++serves[u];

  json kernels = json::array();
  Table t;
  t.headers = {"KERNEL", "GENERIC", "GRID", "BLOCK", "SHARED", "PER THREAD", "ROWS/BLOCK", "PTX", "CUBIN", "RUNS AS"};
  t.right = {false, false, false, true, true, true, true, true, true, true};
  t.max_width = 64;
  std::string failed;  // the first disassembler failure, noted once
  for (size_t i = 0; i < obj.units.size(); ++i) {
    const ObjectCode::Unit& u = obj.units[i];
    const int runs = serves.count(static_cast<uint32_t>(i)) ? serves[static_cast<uint32_t>(i)] : 0;
    t.rows.push_back({u.symbol, u.generic ? "yes" : "no", u.grid, std::to_string(u.block), human_bytes(u.shared_bytes),
                      std::to_string(u.elements_per_thread), rows_text(u), human_bytes(u.ptx.size()),
                      human_bytes(u.cubin.size()),
                      std::to_string(runs) + (runs == 1 ? " kernel" : " kernels")});
    json k = {{"symbol", u.symbol}, {"generic", u.generic}, {"arch", obj.arch},     {"ptx_isa", isa},
              {"grid", u.grid},     {"block", u.block},     {"shared_bytes", u.shared_bytes},
              {"elements_per_thread", u.elements_per_thread}, {"rows_per_block", u.rows_per_block},
              {"ptx_bytes", u.ptx.size()}, {"cubin_bytes", u.cubin.size()}, {"plan_kernels", runs}};
    if (code) {
      std::string sass, why;
      if (!tool.empty()) {
        sass = disassemble_cubin(tool, u.cubin, &why);  // an ELF: the archive's reader checked it
        if (!why.empty() && failed.empty()) failed = "SASS of " + u.symbol + ": " + why;
      }
      v.listing += "== kernel " + u.symbol + (u.generic ? " (shape-generic)" : "") + ": " + obj.arch + ", PTX ISA " +
                   isa + ", " + launch_text(u) + "\n";
      v.listing += "-- PTX (" + human_bytes(u.ptx.size()) + ")\n" + u.ptx;
      if (!u.ptx.empty() && u.ptx.back() != '\n') v.listing += "\n";
      if (!sass.empty()) {
        v.listing += "-- SASS (" + base_name(tool) + ", cubin " + human_bytes(u.cubin.size()) + ")\n" + sass;
        if (sass.back() != '\n') v.listing += "\n";
      } else if (!tool.empty()) {
        v.listing += "-- SASS: not shown: " + why + "\n";
      }
      k["ptx"] = u.ptx;
      k["sass"] = sass.empty() ? json(nullptr) : json(sass);
    }
    kernels.push_back(std::move(k));
  }
  if (!failed.empty()) v.notes.push_back(failed);
  if (code && tool.empty() && !v.notes.empty()) v.listing += "-- " + v.notes.front() + "\n";

  v.table = "target      cuda " + obj.arch + ", PTX ISA " + isa + "; " + std::to_string(obj.kernel_units.size()) +
            " plan kernels, " + std::to_string(obj.units.size()) + " compiled\n";
  char* buf = nullptr;
  size_t len = 0;
  if (FILE* f = ::open_memstream(&buf, &len)) {
    t.print(f);
    std::fclose(f);
    v.table.append(buf, len);
    std::free(buf);
  }
  v.json = {{"arch", obj.arch},
            {"ptx_isa", isa},
            {"sass_tool", code ? (tool.empty() ? json(nullptr) : json(tool)) : json(nullptr)},
            {"kernels", kernels},
            {"plan_kernels", obj.kernel_units}};
  return v;
}

}  // namespace lazyjit::cache_tool
