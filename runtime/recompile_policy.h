// The recompile policy (step 5 of the map in pipeline.cpp) and the explanation
// every compile records (recompile_explainer.h), printed with
// LAZYJIT_LOG=recompiles. Defined in recompile_policy.cpp.
#pragma once
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "runtime/config.h"
#include "runtime/recompile_explainer.h"

namespace lazyjit::runtime {

struct SyncRequest;  // runtime/tiers.h

// Thrown by Runtime::run, before anything runs, when the calling thread has
// forbidden compiles (a strict region) and the graph misses the cache.
struct CompileRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// While one lives, Runtime::run on this thread refuses to build a program
// (lazyjit.strict()); nests.
struct NoCompileScope {
  NoCompileScope();
  ~NoCompileScope();
  NoCompileScope(const NoCompileScope&) = delete;
  NoCompileScope& operator=(const NoCompileScope&) = delete;
};
// False while a NoCompileScope lives on this thread (read once per sync).
bool compiles_allowed_here();

class RecompilePolicy {
 public:
  explicit RecompilePolicy(const Config& config);

  // What a miss does: compiled now, queued in the background, run op by op
  // past the recompile limit, or refused (a strict region).
  enum class Miss { Compile, Background, OpByOp, Refused };
  // Records (and with LAZYJIT_LOG=recompiles prints) why the request's graph is
  // compiled, or run op by op; returns the kind of miss ("new shapes"). A
  // refused miss throws CompileRefused with the explanation; past the limit
  // with LAZYJIT_ON_RECOMPILE_LIMIT=error, std::runtime_error.
  std::string explain(const SyncRequest& s, Miss miss);
  // Whether a miss at `s.site` now runs op by op (past the limit with
  // LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op) instead of compiling.
  bool past_limit(const SyncRequest& s);

  RecompileExplainer& explainer() { return explainer_; }

 private:
  const Config& config_;
  RecompileExplainer explainer_;
  std::mutex op_by_op_sites_mu_;
  std::set<std::string> op_by_op_sites_;  // sites whose misses run op by op (warned once each)
};

}  // namespace lazyjit::runtime
