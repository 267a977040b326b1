// A standalone repro of a compiled-vs-eager mismatch (runtime/graph_check.h),
// one directory:
//   graph.bin      the traced graph (graph_ir/graph_io.h)
//   graph.txt      the same, as text
//   input<i>.bin   input i's elements, contiguous (dtype, sizes, strides: the graph's)
//   scalars.txt    the scalar arguments, one slot per line
//   env.txt        the switches that change generated code, NAME=value per line
//   report.txt     what the check found
//   repro.py       runs it: python -m lazyjit.repro DIR (C++: lazyjit-repro DIR)
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "executor/executable.h"
#include "graph_ir/graph.h"

namespace lazyjit::runtime {

// Writes a repro under `root` (a directory named by the graph's hash) and sets
// `*dir`; returns "" when written, else why not (never throws).
std::string write_repro(const std::string& root, const ir::Graph& graph, const executor::Bindings& bindings,
                        const std::string& report, std::string* dir);

struct Repro {
  ir::Graph graph;
  executor::Bindings bindings;
  std::vector<std::pair<std::string, std::string>> env;  // env.txt
  std::string report;                                     // report.txt
};

// Throws std::runtime_error naming the file and what is wrong with it.
Repro read_repro(const std::string& dir);

}  // namespace lazyjit::runtime
