// Why a graph had to be compiled, in the user's terms: what differs from the
// nearest graph compiled before at the same sync call site.
//
//   x (input 1) dim 0: 7 → 8 (sizes seen: 7, 8) — now dynamic
//   model.weight (input 0): dtype float32 → float64
//   input 2: layout strides [16, 1] → [1, 8] (contiguous → not contiguous)
//   op #14 aten::slice.Tensor (model.py:88): attr 4: 17 → 18
//   op #3: gelu → silu (first op that differs; 40 → 41 ops)
//
// Inputs are named as the user's code names them (`x`, `model.layers[0].weight`,
// `batch['ids']`: NodeSites answers for an input's node with its name, "" when
// it has none) and matched by name, not by position: a graph that reads its
// inputs in another order (a model cast to another dtype reads its old
// parameters first) compares each input with itself. Unnamed inputs are
// matched with an unmatched input of the same type, then of the same dtype and
// rank, then in order.
//
// Needs no libtorch or LLVM: it reads graphs. One per runtime; thread-safe.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::runtime {

// The user's file:line that recorded a node, "" when not known (the tracer
// keeps it for the nodes that can fail: library calls); for an input's node,
// the input's name in the user's code, "" when not known.
using NodeSites = std::function<std::string(uint32_t node)>;

struct Recompile {
  std::string site;    // the sync's call site ("" when unknown)
  std::string kind;    // "first at this site", "new shapes", "new graph"
  std::string detail;  // what differs, one line per difference (at most a few)
  int64_t count = 0;   // compiles at this site so far, this one included
  // Whether it counts against LAZYJIT_RECOMPILE_LIMIT: not when the graph has
  // the structure of one compiled there and differs from it only in sizes of
  // dims that were already dynamic there (their kernels are shape-generic: a
  // plan, no code). `budget`: the compiles at this site that counted so far.
  bool counted = true;
  int64_t budget = 0;
};

class RecompileExplainer {
 public:
  // Explains compiling `g` at `site`, then remembers `g` for later misses there.
  Recompile explain(const ir::Graph& g, const std::string& site, const NodeSites& node_sites = {});
  // Whether a dim that takes a second size becomes dynamic (LAZYJIT_DYNAMIC is
  // not off): its explanation says so, and it is counted (dynamic_dims).
  void set_dynamic(bool on) { dynamic_ = on; }
  // Misses explained at `site` so far.
  int64_t count(const std::string& site) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = count_.find(site);
    return it == count_.end() ? 0 : it->second;
  }
  // Misses at `site` so far that counted against the budget (Recompile::counted).
  int64_t budget(const std::string& site) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = budget_.find(site);
    return it == budget_.end() ? 0 : it->second;
  }
  // Whether compiling `g` at `site` would count against the budget.
  bool would_count(const ir::Graph& g, const std::string& site) {
    std::lock_guard<std::mutex> lock(mu_);
    return !resized_locked(g, site);
  }

 private:
  // `g` has the structure of a graph seen at `site` and differs from the latest
  // such only in sizes of dims that have taken two sizes there already.
  bool resized_locked(const ir::Graph& g, const std::string& site);
  struct Seen {
    ir::Hash128 structure;
    std::vector<ir::TensorType> inputs;
    std::vector<std::string> keys;  // per input: its name, else "#<position>" (or the key of the input it matched)
    std::vector<ir::Node> nodes;
    std::vector<ir::TensorType> types;  // per value
  };
  // The latest graph seen with this structure, or null.
  static const Seen* latest_with(const std::vector<Seen>& seen, const ir::Hash128& structure);
  static constexpr size_t kKeepPerSite = 8;
  bool dynamic_ = true;
  std::mutex mu_;
  std::map<std::string, std::vector<Seen>> seen_;  // per site, most recent last
  std::map<std::string, int64_t> count_;           // per site: compiles
  std::map<std::string, int64_t> budget_;          // per site: compiles that counted
  // Per site, input (its key) and dim: the sizes compiled for so far.
  std::map<std::string, std::map<std::pair<std::string, size_t>, std::set<int64_t>>> sizes_;
};

}  // namespace lazyjit::runtime
