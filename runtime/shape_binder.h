// New sizes without a compile: a graph whose structure was compiled before, to
// shape-generic code, runs that program bound to its own sizes.
//
// A program's steps, fusion, kernels, code and buffer plan depend on the
// graph's structure; its sizes only set numbers: each kernel's iteration space,
// strides and offsets (lowering/plan_bind.h), the sizes of the values the
// executor allocates, and the shape attributes of library steps (slice bounds,
// view shapes), all read from the new graph's types and attributes, which the
// tracer's shape inference gave it. Binding replays what the graph passes did
// (where each fold and merge still holds; else runs them), takes those numbers
// from the new graph and checks that the compiled code still holds: every kernel
// keeps its generic key (rank after coalescing, which dims broadcast, unit
// strides, zero offsets, row schedule), and every node still fits its kernel.
// No fusion, no kernel lookups, no codegen: 0.6 ms on average for GPT-2's decode.
//
// When a check fails (a dim that was longer is now 1 and broadcasts, a zero
// size, a row that no longer fits its scratch), the graph is compiled as any
// miss is, explained, and its program is remembered beside the first.
//
// Needs no libtorch or LLVM; thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "graph_ir/graph.h"
#include "lowering/passes.h"
#include "lowering/program.h"

namespace lazyjit::runtime {

class ShapeBinder {
 public:
  // Remembers `program`, compiled (or loaded) for `traced`, as one that graphs
  // of `traced`'s structure may bind to, when all its code is shape-generic;
  // while it lives (held by the program cache, or by a program bound from it):
  // the binder does not keep it, so an evicted program is freed with its code.
  // `code_hash` tells programs of other code apart (NaN-checked stores).
  void remember(const ir::Graph& traced, uint64_t code_hash, std::shared_ptr<const lowering::Program> program,
                const std::vector<std::string>& disabled_passes);
  // `traced` as a program bound from a remembered one of its structure, or
  // null when none holds for its sizes. `disabled_passes` as for lowering.
  std::shared_ptr<const lowering::Program> bind(const ir::Graph& traced, uint64_t code_hash,
                                                const std::vector<std::string>& disabled_passes);
  void clear();
  // The rules of where programs' ATen steps run: the graph passes a bind reruns
  // depend on them (lowering/pass_rules.h). Set once, before the first program.
  void set_pass_rules(const lowering::PassRules& rules) { rules_ = rules; }

  // Programs kept per structure (the most recent first) and structures kept.
  static constexpr size_t kPerStructure = 4;
  static constexpr size_t kStructures = 512;

 private:
  struct Family;  // shape_binder.cpp
  using Key = std::tuple<uint64_t, uint64_t, uint64_t>;  // traced structure (lo, hi), code hash
  std::mutex mu_;
  lowering::PassRules rules_ = lowering::cpu_library_rules();
  std::map<Key, std::vector<std::shared_ptr<const Family>>> families_;
  std::vector<Key> order_;  // structures, oldest first (forgotten past kStructures)
};

}  // namespace lazyjit::runtime
