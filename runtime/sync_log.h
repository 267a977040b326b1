// The sync log of LAZYJIT_LOG=syncs / LAZYJIT_DEBUG>=1: one line per sync on
// stderr, written by the tracer (tracer/trace_context.cpp, run_pending) from
// what the runtime noted about this thread's sync while running it:
//
//   lazyjit: sync at train.py:12 (item()): 37 ops -> cache hit, ran in 0.41 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> compiled (new shapes) in 55.1 ms, ran in 0.52 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> loaded from disk in 2.9 ms, ran in 0.47 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> bound to new sizes in 0.08 ms, ran in 0.47 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> loaded from the remote cache in 4.1 ms, ran in 0.47 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> run op by op (past the recompile limit) in 3.1 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> run op by op while compiling in the background (new shapes) in 0.61 ms
//   lazyjit: sync at train.py:12 (item()): 37 ops -> compiled in the background, ran in 0.47 ms
//   lazyjit: sync at train.py:12 (item()): 3 ops -> compiled in 9.1 ms, ran in 0.2 ms; CUDA graph: no — NaN checks ...   (cuda target)
//
// Header-only: Runtime::run returns the note with its result (SyncResult), and
// the pipeline (runtime/pipeline.cpp) fills it on the paths that are not a
// cache hit, so a hit costs nothing.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace lazyjit::runtime {

struct SyncNote {
  enum class How { Hit, Compiled, Loaded, Remote, OpByOp, Bound, Background, Ready };
  How how = How::Hit;  // a hit unless the pipeline says otherwise
  std::string why;     // Compiled, Background: what differs from the nearest program at the site (recompile_explainer.h); Ready: how long it was pending, when this sync waited for it
  double prepare_ms = 0;  // Compiled / Loaded / Remote / Bound: the compile, the load, or the binding to new sizes
  // Under the cuda target, a program new to memory: whether it can be a CUDA
  // graph (executor/graph_replay.h ReplayVerdict::text); empty otherwise.
  std::string graph_replay;
};

// How a program was found, in words ("bound to new sizes"), for traces.
inline const char* sync_how_text(SyncNote::How how) {
  switch (how) {
    case SyncNote::How::Hit: return "cache hit";
    case SyncNote::How::Compiled: return "compiled";
    case SyncNote::How::Loaded: return "loaded from the on-disk cache";
    case SyncNote::How::Remote: return "loaded from the remote cache";
    case SyncNote::How::OpByOp: return "run op by op (past the recompile limit)";
    case SyncNote::How::Bound: return "bound to new sizes";
    case SyncNote::How::Background: return "run op by op while compiling in the background";
    case SyncNote::How::Ready: return "compiled in the background";
  }
  return "?";
}

// How the sync went, for sync_line.
inline std::string sync_line_how(const std::string& reason, const std::string& site, size_t ops, const SyncNote& n,
                             double total_ms) {
  auto ms = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f ms" : "%.1f ms", v);
    return std::string(buf);
  };
  std::string s = "sync at " + (site.empty() ? std::string("(unknown site)") : site) + " (" + reason + "): " +
                  std::to_string(ops) + (ops == 1 ? " op -> " : " ops -> ");
  double run_ms = total_ms - n.prepare_ms;
  switch (n.how) {
    case SyncNote::How::Hit: return s + "cache hit, ran in " + ms(total_ms);
    case SyncNote::How::Compiled:
      return s + "compiled" + (n.why.empty() ? "" : " (" + n.why + ")") + " in " + ms(n.prepare_ms) + ", ran in " +
             ms(run_ms);
    case SyncNote::How::Loaded: return s + "loaded from disk in " + ms(n.prepare_ms) + ", ran in " + ms(run_ms);
    case SyncNote::How::Remote:
      return s + "loaded from the remote cache in " + ms(n.prepare_ms) + ", ran in " + ms(run_ms);
    case SyncNote::How::OpByOp: return s + "run op by op (past the recompile limit) in " + ms(total_ms);
    case SyncNote::How::Background:
      return s + "run op by op while compiling in the background" + (n.why.empty() ? "" : " (" + n.why + ")") +
             " in " + ms(total_ms);
    case SyncNote::How::Ready:
      if (n.prepare_ms > 0)  // pending too long (`why` says how long): this sync waited for it
        return s + "compiled in the background (" + n.why + ": waited " + ms(n.prepare_ms) + " for it), ran in " +
               ms(run_ms);
      return s + "compiled in the background, ran in " + ms(total_ms);
    case SyncNote::How::Bound:
      return s + "bound to new sizes in " + ms(n.prepare_ms) + ", ran in " + ms(run_ms);
  }
  return s;
}

// The line (without "lazyjit: " and the newline) for a sync that took total_ms;
// under the cuda target, for a program new to memory that cannot be a CUDA
// graph, why not. A replayable one adds nothing.
inline std::string sync_line(const std::string& reason, const std::string& site, size_t ops, const SyncNote& n,
                             double total_ms) {
  std::string line = sync_line_how(reason, site, ops, n, total_ms);
  if (!n.graph_replay.empty() && n.graph_replay != "yes") line += "; CUDA graph: " + n.graph_replay;
  return line;
}

}  // namespace lazyjit::runtime
