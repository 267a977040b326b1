// A standalone repro of a compiled-vs-eager mismatch (runtime/debug_runs/graph_check.h),
// one directory:
//   graph.bin      the traced graph (graph_ir/graph_io.h)
//   graph.txt      the same, as text
//   input<i>.bin   input i's elements, contiguous (dtype, sizes, strides: the graph's)
//   scalars.txt    the scalar arguments, one slot per line
//   env.txt        the switches that change generated code, NAME=value per line
//                  (only those: see repro_switches below)
//   report.txt     what the check found
//   repro.py       runs it: python -m lazyjit.repro DIR (C++: lazyjit-repro DIR)
#pragma once
#include <stdexcept>
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

// A repro directory is data, never instructions: env.txt may set only these
// switches (the ones that change generated code, and LAZYJIT_CACHE, which a
// repro writes as off), each to a value runtime::Config takes. A line that sets
// any other name that is not a LAZYJIT_* one (PYTHONPATH, LD_PRELOAD, LC_CTYPE,
// ...) is never applied: it is ignored with a warning naming its line. Any other
// LAZYJIT_* name is malformed (LAZYJIT_DUMP, LAZYJIT_CACHE_DIR, ... would write
// or load files where the directory says; set them in your own environment).
const std::vector<std::string>& repro_switches();

// A malformed line of env.txt or scalars.txt; the message names the file and
// the line ("<dir>/env.txt:3: ..."). An std::invalid_argument, so Python sees a
// ValueError (a bad directory is an std::runtime_error: a RuntimeError).
struct MalformedRepro : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The runners' exit statuses (python -m lazyjit.repro, lazyjit-repro; both
// print kReproExitStatus in their usage text).
enum ReproStatus { kReproAgree = 0, kReproReproduced = 1, kReproBadDirectory = 2, kReproMalformed = 3 };
extern const char kReproExitStatus[];

struct Repro {
  ir::Graph graph;
  executor::Bindings bindings;
  std::vector<std::pair<std::string, std::string>> env;  // env.txt's switches, validated
  std::vector<std::string> env_warnings;                  // env.txt's lines that were ignored, one message each
  std::string report;                                     // report.txt
};

// Throws MalformedRepro for a malformed line of env.txt or scalars.txt (or a
// scalars.txt with the wrong number of scalars), std::runtime_error naming the
// file for anything else (a file missing, graph.bin not a graph, an input of the
// wrong size).
Repro read_repro(const std::string& dir);

}  // namespace lazyjit::runtime
