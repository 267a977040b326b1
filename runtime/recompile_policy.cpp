// The policy tier of a sync (step 5 of the map in pipeline.cpp): a strict
// region refuses to compile, and past LAZYJIT_RECOMPILE_LIMIT compiles at one
// call site the stance decides (warn, error, or run op by op); and the
// explanation every compile records (recompile_explainer.h), printed with
// LAZYJIT_LOG=recompiles.
#include <cstdio>
#include <stdexcept>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "runtime/recompile_policy.h"
#include "runtime/tiers.h"

namespace lazyjit::runtime {

namespace {
// Strict regions (lazyjit.strict()) on this thread: a miss may not compile.
thread_local int t_no_compile = 0;
// Ends a recompile log line of a compile started in the background.
constexpr const char* kBackgroundNote = " (in the background: runs op by op until ready)";

std::string site_text(const std::string& site) { return site.empty() ? std::string("(unknown site)") : site; }
}  // namespace

NoCompileScope::NoCompileScope() { ++t_no_compile; }
NoCompileScope::~NoCompileScope() { --t_no_compile; }
bool compiles_allowed_here() { return t_no_compile == 0; }

RecompilePolicy::RecompilePolicy(const Config& config) : config_(config) {
  explainer_.set_dynamic(config_.dynamic != lowering::Shapes::Off);
}

bool RecompilePolicy::past_limit(const SyncRequest& s) {
  return config_.on_recompile_limit == RecompileStance::OpByOp && explainer_.budget(s.site) >= config_.recompile_limit &&
         explainer_.would_count(s.graph, s.site);
}

std::optional<Resolved> Policy::try_resolve(SyncRequest& s) {
  if (!s.may_compile) p_.policy.explain(s, RecompilePolicy::Miss::Refused);  // throws CompileRefused
  if (!p_.policy.past_limit(s)) return std::nullopt;
  p_.policy.explain(s, RecompilePolicy::Miss::OpByOp);
  Resolved r = op_by_op(SyncNote::How::OpByOp);
  r.explained = true;
  return r;
}

std::string RecompilePolicy::explain(const SyncRequest& s, Miss miss) {
  const std::string& site = s.site;
  Recompile r = explainer_.explain(s.graph, site, s.node_sites);
  const std::string why = r.kind;
  if (miss == Miss::OpByOp) r.kind += " (run op by op: past the recompile limit)";
  if (miss == Miss::Refused) r.kind += " (refused: a strict region)";
  if (debug::trace_enabled())
    debug::trace_instant("cache", "cache miss",
                         {{"site", site}, {"kind", r.kind}, {"detail", r.detail}, {"compiles_at_site", r.count}});
  // `lazyjit-cache why-miss` reads these lines (tools/lazyjit_cache/cmd_why_miss.cpp).
  if (config_.log_recompiles && (miss == Miss::Compile || miss == Miss::Background))
    std::fprintf(stderr, "lazyjit: compiling at %s: %s%s%s%s\n", site_text(site).c_str(), r.kind.c_str(),
                 r.detail.empty() ? "" : ": ", r.detail.c_str(), miss == Miss::Background ? kBackgroundNote : "");
  debug::Metrics::get().recompile({r.site, r.kind, r.detail});
  if (miss == Miss::Refused)
    throw CompileRefused("lazyjit.strict: a compile in a strict region, for the sync at " + site_text(site) + ": " +
                         r.kind + (r.detail.empty() ? "" : ": " + r.detail) +
                         " (nothing ran; the tensors are still pending)");
  if (miss == Miss::OpByOp) {
    std::lock_guard<std::mutex> lock(op_by_op_sites_mu_);
    if (op_by_op_sites_.insert(site).second)
      std::fprintf(stderr,
                   "lazyjit: warning: %lld compiles at %s (LAZYJIT_RECOMPILE_LIMIT=%d): from now on its graphs that "
                   "miss the cache run op by op, uncompiled (LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op); this one because: "
                   "%s%s%s. lazyjit.explain_recompiles() lists them all.\n",
                   static_cast<long long>(r.budget - 1), site_text(site).c_str(), config_.recompile_limit,
                   r.kind.c_str(), r.detail.empty() ? "" : ": ", r.detail.c_str());
    return why;
  }
  if (!r.counted || r.budget <= config_.recompile_limit) return why;
  // New sizes of dims already dynamic are not counted: they plan, no code.
  const int64_t resized = r.count - r.budget;
  std::string what = std::to_string(r.budget) + " compiles at " + site_text(site) +
                     (resized ? " (and " + std::to_string(resized) + " for new sizes of dynamic dims, not counted)" : "") +
                     " (LAZYJIT_RECOMPILE_LIMIT=" + std::to_string(config_.recompile_limit) + "), this one because: " +
                     r.kind + (r.detail.empty() ? "" : ": " + r.detail) +
                     ". lazyjit.explain_recompiles() lists them all.";
  if (config_.on_recompile_limit == RecompileStance::Error) throw std::runtime_error("lazyjit: recompile limit reached: " + what);
  if (r.budget == config_.recompile_limit + 1) std::fprintf(stderr, "lazyjit: warning: %s\n", what.c_str());
  return why;
}

}  // namespace lazyjit::runtime
