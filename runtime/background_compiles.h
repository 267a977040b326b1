// Compiles that do not hold up the sync that needed them (LAZYJIT_BACKGROUND_COMPILE).
//
// A graph that misses every cache tier (no program for its key, none of its
// structure to bind to, none on disk) would otherwise wait for LLVM: 15–40 ms
// for a small block, up to a second for a decoder step, against well under a
// millisecond to run it op by op. So the runtime hands the compile to one
// worker thread and runs this sync's graph op by op through ATen, as eager
// would. Later syncs of the same structure run op by op too until the program
// is ready; the first sync after that takes it (for its own sizes, or bound to
// new ones: shape_binder.h) and from then on it is the cached program, as if it
// had compiled in the foreground. Counters, explanations and the disk entry
// are the same either way; only when the compiled code first runs changes.
//
// A job still pending kOverdue after it was queued is waited for by the next
// sync that asks for it (take()): the worker runs at the lowest priority, and
// on a machine the user's own work keeps busy (a training loop on 2 cores: the
// main thread and ATen's OpenMP thread) it got almost no time, so a loop ran
// op by op for good (the bench's Llama layer: no program after 300 syncs,
// 4.5 s). Blocked, the sync leaves the cores to the compile; a loop pays at
// most ~1 s of op-by-op runs and one compile's wait.
//
// One job per structure (structure hash + code hash): a structure whose compile
// is queued or running is not queued again. Jobs run one at a time, in order.
// stop() waits for the running job and drops the queued ones, unless they
// outlive the process (finish_queued_at_stop: the runtime writes what it
// compiles to the on-disk cache, for the next process): then it finishes them
// all. The Python module calls it from Python's atexit, before any static is
// torn down; a C++ program gets the same from a thread_local of the main
// thread (destroyed when it calls exit(), before any static) and, for an exit
// from another thread, from a C exit handler registered when the worker starts
// and again after its first job (see start() and work()); lazyjit's statics
// that a compile makes on first use are immortal.
// fork(): the child has no worker thread, only the parent's copy of its state,
// and used to hang at exit joining a thread it did not have (or waiting for a
// job nobody would finish). A pthread_atfork handler (registered with the first
// instance) makes it safe, as PyTorch does for its own pools: before the fork
// it pauses every worker between jobs (waiting for the job or warm-up that
// runs: a worker mid-compile may hold LLVM's or the allocator's locks, which
// the child could never take) and holds its lock across the fork; the parent
// then goes on as before; the child gets "no worker, nothing running": its
// jobs still queued are dropped (the parent compiles them; a sync of theirs in
// the child queues them again), the finished ones stay for take(), and the
// child's first job starts a worker of its own. So a fork waits for at most one
// compile, as exit does.
//
// Needs no libtorch or LLVM; thread-safe.
#pragma once
#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "cache/cache_key.h"
#include "lowering/program.h"

namespace lazyjit::runtime {

class BackgroundCompiles {
 public:
  using Compile = std::function<std::shared_ptr<const lowering::Program>()>;
  // A finished job: the program compiled for `key`, or the error its compile threw.
  struct Done {
    cache::CacheKey key;
    std::shared_ptr<const lowering::Program> program;
    std::exception_ptr error;
  };
  enum class State { None, Pending };

  BackgroundCompiles();
  ~BackgroundCompiles();
  BackgroundCompiles(const BackgroundCompiles&) = delete;
  BackgroundCompiles& operator=(const BackgroundCompiles&) = delete;

  static constexpr std::chrono::milliseconds kOverdue{1000};
  // The finished job of `key`'s structure, taken out (the caller owns it now);
  // else whether one is queued or running. A job pending past `overdue` is
  // waited for first; `waited_ms` (when given) says how long (0: no wait).
  std::optional<Done> take(const cache::CacheKey& key, State* state, double* waited_ms = nullptr,
                           std::chrono::milliseconds overdue = kOverdue);
  // Queues `compile` for `key`'s structure, unless a job of it is there already
  // (queued, running or finished and not taken): then returns false.
  bool start(const cache::CacheKey& key, Compile compile);
  // Starts the worker (unless it runs) with `fn` as its first work, before any
  // job: set-up that every compile needs, off the first compile's path.
  void warm_up(std::function<void()> fn);
  // Waits until no job is queued or running. Returns how many were waited for.
  int64_t wait_all();
  // Waits for every job, then forgets them all, taken or not.
  void clear();
  // Waits for the running job (and the queued ones, with finish_queued_at_stop),
  // drops the rest, and starts no more.
  void stop();
  // Whether stop() finishes the queued jobs too (their results outlive the process).
  void finish_queued_at_stop(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    finish_queued_ = on;
  }

 private:
  using Structure = std::tuple<uint64_t, uint64_t, uint64_t>;  // structure (lo, hi), code hash
  static Structure structure_of(const cache::CacheKey& key) {
    return {key.structure.lo, key.structure.hi, key.target};
  }
  struct Job {
    Compile compile;
    bool finished = false;
    Done done;  // its key from the start, the rest once finished
    std::chrono::steady_clock::time_point queued = std::chrono::steady_clock::now();
  };
  void work();
  void start_worker_locked();
  // Under mu_: no job queued or running (or stopping: none will be).
  bool idle_locked() const { return stopping_ || (queue_.empty() && running_ == 0); }
  // fork() (the pthread_atfork handlers in the .cpp): before it, pauses the
  // worker between jobs and returns holding mu_; after it, the parent's resumes
  // it and the child's resets this to "no worker, nothing running".
  void before_fork();
  void after_fork_in_parent();
  void after_fork_in_child();
  friend struct ForkHandlers;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the worker: a job was queued, or stop
  std::condition_variable finished_;  // waiters: a job finished
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<Structure, std::shared_ptr<Job>> jobs_;  // queued, running, or finished and not taken
  int64_t running_ = 0;
  bool stopping_ = false;
  bool finish_queued_ = false;
  std::thread worker_;
  bool worker_started_ = false;
  bool warming_ = false;      // the worker runs warm_up_'s function (outside mu_)
  bool fork_paused_ = false;  // a fork is under way: the worker starts no job
  std::function<void()> warm_up_;  // the worker's first work (warm_up), then cleared
};

}  // namespace lazyjit::runtime
