#include "runtime/repro.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bridge/aten_ir.h"
#include "graph_ir/graph_io.h"
#include "graph_ir/hash.h"

namespace lazyjit::runtime {

namespace fs = std::filesystem;

namespace {

// The switches that change the code a graph compiles to; the repro runs with
// these and with no on-disk cache, so it compiles afresh.
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

}  // namespace

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
      at::Tensor t = bindings.inputs[i].contiguous();
      write_file(d / ("input" + std::to_string(i) + ".bin"),
                 std::string(static_cast<const char*>(t.const_data_ptr()), t.nbytes()));
    }
    std::string scalars, env = "LAZYJIT_CACHE=off\n";
    for (int64_t s : bindings.scalars) scalars += std::to_string(s) + "\n";
    for (const char* k : kCodegenSwitches)
      if (const char* v = std::getenv(k)) env += std::string(k) + "=" + v + "\n";
    write_file(d / "scalars.txt", scalars);
    write_file(d / "env.txt", env);
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
  std::istringstream scalars(read_file(d / "scalars.txt"));
  for (std::string line; std::getline(scalars, line);)
    if (!line.empty()) out.bindings.scalars.push_back(std::stoll(line));
  std::istringstream env(read_file(d / "env.txt"));
  for (std::string line; std::getline(env, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) out.env.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  if (fs::exists(d / "report.txt")) out.report = read_file(d / "report.txt");
  return out;
}

}  // namespace lazyjit::runtime
