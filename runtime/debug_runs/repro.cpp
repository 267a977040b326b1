#include "runtime/debug_runs/repro.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bridge/aten_ir.h"
#include "env/env.h"
#include "graph_ir/graph_io.h"
#include "graph_ir/hash.h"
#include "runtime/config.h"

namespace lazyjit::runtime {

namespace fs = std::filesystem;

namespace {

// The switches that change the code a graph compiles to; the repro runs with
// these and with no on-disk cache, so it compiles afresh.
// (python/lazyjit/repro.py keeps the same list, with LAZYJIT_CACHE.)
const char* const kCodegenSwitches[] = {"LAZYJIT_FAULT", "LAZYJIT_DISABLE_PASSES", "LAZYJIT_VECTOR_BITS",
                                        "LAZYJIT_OPT_LEVEL", "LAZYJIT_DYNAMIC"};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("lazyjit.repro: cannot read " + p.string());
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

const char kScript[] = R"(# Reruns the compiled-vs-eager check on this graph and its inputs.
# Same as: python -m lazyjit.repro <this directory>
import os, runpy, sys
sys.argv = ["lazyjit.repro", os.path.dirname(os.path.abspath(__file__))]
runpy.run_module("lazyjit.repro", run_name="__main__")
)";

// Printable: a name or value from a file, as a message may show it.
std::string shown(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> read_env(const fs::path& p, std::vector<std::string>* warnings) {
  std::istringstream in(read_file(p));
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<int> line_of;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    auto malformed = [&](const std::string& why) {
      return MalformedRepro("lazyjit.repro: " + p.string() + ":" + std::to_string(n) + ": " + why);
    };
    if (line.empty() || line[0] == '#') continue;
    if (line.find('\0') != std::string::npos) throw malformed("\"" + shown(line) + "\" holds a NUL byte");
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      throw malformed("\"" + shown(line) + "\" is not NAME=VALUE");
    std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    if (name.rfind("LAZYJIT_", 0) != 0) {
      warnings->push_back("lazyjit.repro: warning: " + p.string() + ":" + std::to_string(n) + ": " + shown(name) +
                          " is not a lazyjit switch; ignored (a repro sets only its LAZYJIT_* switches)");
      continue;
    }
    const auto& known = repro_switches();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw malformed(shown(name) + " is not a switch a repro carries (" + list + ")" +
                      (Config::is_switch(name) ? "; to run with it, set it in your own environment" : ""));
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].first == name)
        throw malformed(name + " is set twice (line " + std::to_string(line_of[i]) + " and this one)");
    if (std::string why = Config::check_switch(name, value); !why.empty()) throw malformed(shown(why));
    out.emplace_back(name, value);
    line_of.push_back(n);
  }
  return out;
}

std::vector<int64_t> read_scalars(const fs::path& p, size_t want) {
  std::istringstream in(read_file(p));
  std::vector<int64_t> out;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(line.c_str(), &end, 10);
    // Whole decimal lines only: strtoll would also take " 5", "+5" and "12abc"'s 12.
    if (errno || end != line.c_str() + line.size() || std::isspace(static_cast<unsigned char>(line[0])) ||
        line[0] == '+')
      throw MalformedRepro("lazyjit.repro: " + p.string() + ":" + std::to_string(n) + ": \"" + shown(line) +
                           "\" is not an integer (a scalar slot: an int64, or a double's bits)");
    out.push_back(v);
  }
  if (out.size() != want)
    throw MalformedRepro("lazyjit.repro: " + p.string() + " holds " + std::to_string(out.size()) +
                         " scalars; the graph takes " + std::to_string(want));
  return out;
}

}  // namespace

const std::vector<std::string>& repro_switches() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = {"LAZYJIT_CACHE"};
    for (const char* k : kCodegenSwitches) v.push_back(k);
    return v;
  }();
  return names;
}

const char kReproExitStatus[] =
    "Exit status: 0 compiled and eager agree now; 1 the mismatch reproduced; 2 not a repro directory (a file\n"
    "missing or unreadable, graph.bin not a graph, an input of the wrong size); 3 a malformed line in env.txt\n"
    "or scalars.txt (the message names the file and line).";

std::string write_repro(const std::string& root, const ir::Graph& graph, const executor::Bindings& bindings,
                        const std::string& report, std::string* dir) {
  try {
    ir::ByteWriter w;
    ir::write_graph(w, graph);
    std::string bytes = w.take();
    char name[32];
    std::snprintf(name, sizeof name, "%016llx",
                  static_cast<unsigned long long>(ir::hash64(bytes.data(), bytes.size())));
    fs::path d = fs::absolute(fs::path(root) / name);
    fs::create_directories(d);
    write_file(d / "graph.bin", bytes);
    write_file(d / "graph.txt", graph.str());
    for (size_t i = 0; i < bindings.inputs.size(); ++i) {
      at::Tensor t = bindings.inputs[i].cpu().contiguous();  // GPU inputs (the CUDA target) copied to the host
      write_file(d / ("input" + std::to_string(i) + ".bin"),
                 std::string(static_cast<const char*>(t.const_data_ptr()), t.nbytes()));
    }
    std::string scalars, env_txt = "LAZYJIT_CACHE=off\n";
    for (int64_t s : bindings.scalars) scalars += std::to_string(s) + "\n";
    for (const char* k : kCodegenSwitches)
      if (auto v = env::find(k)) env_txt += std::string(k) + "=" + *v + "\n";
    write_file(d / "scalars.txt", scalars);
    write_file(d / "env.txt", env_txt);
    write_file(d / "report.txt", report + "\n");
    write_file(d / "repro.py", kScript);
    *dir = d.string();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

Repro read_repro(const std::string& dir) {
  fs::path d(dir);
  std::string bytes = read_file(d / "graph.bin");
  ir::ByteReader r(bytes);
  Repro out;
  try {
    out.graph = ir::read_graph(r);
  } catch (const std::exception& e) {
    throw std::runtime_error("lazyjit.repro: " + (d / "graph.bin").string() + " is not a lazyjit graph: " + e.what());
  }
  const ir::Graph& g = out.graph;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::TensorType& t = g.value(g.inputs()[i]).type;
    fs::path p = d / ("input" + std::to_string(i) + ".bin");
    std::string data = read_file(p);
    at::Tensor x = at::empty(t.sizes, at::TensorOptions().dtype(bridge::to_aten(t.dtype)));
    if (data.size() != x.nbytes())
      throw std::runtime_error("lazyjit.repro: " + p.string() + " holds " + std::to_string(data.size()) +
                               " bytes; the graph's input " + std::to_string(i) + " (" + t.str() + ") needs " +
                               std::to_string(x.nbytes()));
    std::memcpy(x.data_ptr(), data.data(), data.size());
    out.bindings.inputs.push_back(at::empty_strided(t.sizes, t.strides, x.options()).copy_(x));
  }
  out.bindings.scalars = read_scalars(d / "scalars.txt", g.scalars().size());
  out.env = read_env(d / "env.txt", &out.env_warnings);
  if (fs::exists(d / "report.txt")) out.report = read_file(d / "report.txt");
  return out;
}

}  // namespace lazyjit::runtime
