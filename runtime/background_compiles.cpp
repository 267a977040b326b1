#include "runtime/background_compiles.h"

#include <cstdlib>
#include <new>
#include <pthread.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <set>

namespace lazyjit::runtime {

namespace {
// Every live instance, for the exit handler.
std::mutex& registry_mu() {
  static auto* mu = new std::mutex;  // outlives the exit handler
  return *mu;
}
std::set<BackgroundCompiles*>& registry() {
  static auto* r = new std::set<BackgroundCompiles*>;
  return *r;
}
void stop_all() {
  std::lock_guard<std::mutex> lock(registry_mu());
  for (BackgroundCompiles* b : registry()) b->stop();
}

// Stops every worker when the main thread calls exit() (or returns from
// main), before any exit handler runs: the destructors of the thread's
// thread_locals complete before those of any static ([basic.start.term]).
// A C exit handler alone came too late when exit raced the worker's first
// codegen: the statics libLLVM builds on first use there (SelectionDAG's
// value-type tables) register their destructors after the handler, so they
// ran first and the worker crashed in them (executor_tests, ~1 exit in 10).
struct StopAtMainThreadExit {
  ~StopAtMainThreadExit() { stop_all(); }
};
void guard_main_thread_exit() {
#ifdef __linux__
  // Only the main thread's: another thread's thread_locals die when it ends.
  if (::syscall(SYS_gettid) != ::getpid()) return;
  thread_local StopAtMainThreadExit guard;
  (void)guard;
#endif
}
}  // namespace

// fork(): see "fork()" in the header. Registered once, with the first instance.
// The registry's lock is held from before the fork to after it (no instance
// comes or goes meanwhile), and each instance's own lock likewise.
struct ForkHandlers {
  static void prepare() {
    registry_mu().lock();
    for (BackgroundCompiles* b : registry()) b->before_fork();
  }
  static void parent() {
    for (BackgroundCompiles* b : registry()) b->after_fork_in_parent();
    registry_mu().unlock();
  }
  static void child() {
    for (BackgroundCompiles* b : registry()) b->after_fork_in_child();
    // Held by this thread (prepare): a new one, like every lock of the child's.
    new (&registry_mu()) std::mutex;
  }
};

BackgroundCompiles::BackgroundCompiles() {
  static const bool at_fork =
      (pthread_atfork(ForkHandlers::prepare, ForkHandlers::parent, ForkHandlers::child), true);
  (void)at_fork;
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().insert(this);
}

void BackgroundCompiles::before_fork() {
  std::unique_lock<std::mutex> lock(mu_);
  // The worker finishes the job it runs (or its warm-up) and starts no other:
  // while it compiles it may hold locks (LLVM's, the runtime's) that the child
  // could never take. It needs nothing the forking thread holds (no interpreter
  // lock: NoPollScope). Queued jobs wait; other threads may queue more.
  fork_paused_ = true;
  finished_.wait(lock, [&] { return running_ == 0 && !warming_; });
  lock.release();  // held across the fork: no state of this changes mid-copy
}

void BackgroundCompiles::after_fork_in_parent() {
  fork_paused_ = false;
  mu_.unlock();
  wake_.notify_all();
}

void BackgroundCompiles::after_fork_in_child() {
  // The child is this thread alone: the worker (and any thread waiting in
  // take() or wait_all()) is not in it. Its mutex and condition variables are
  // replaced, not destroyed (a condition variable's destructor waits for
  // waiters that will never leave), and so is the thread object: joining the
  // parent's worker would wait forever, destroying it joinable terminates, and
  // glibc reuses its stack for the child's next thread.
  new (&mu_) std::mutex;
  new (&wake_) std::condition_variable;
  new (&finished_) std::condition_variable;
  new (&worker_) std::thread;
  worker_started_ = false;  // the next job (or warm-up) starts a worker of the child's
  fork_paused_ = false;
  warming_ = false;
  running_ = 0;
  // Queued jobs are the parent's to run: dropped here, so that a sync of theirs
  // finds none (and queues it again) instead of waiting for it forever.
  queue_.clear();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->finished)
      ++it;
    else
      it = jobs_.erase(it);
  }
}

BackgroundCompiles::~BackgroundCompiles() {
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    registry().erase(this);
  }
  stop();
}

std::optional<BackgroundCompiles::Done> BackgroundCompiles::take(const cache::CacheKey& key, State* state,
                                                                 double* waited_ms, std::chrono::milliseconds overdue) {
  std::unique_lock<std::mutex> lock(mu_);
  if (waited_ms) *waited_ms = 0;
  auto it = jobs_.find(structure_of(key));
  if (it != jobs_.end() && !it->second->finished && !stopping_ &&
      std::chrono::steady_clock::now() - it->second->queued >= overdue) {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<Job> job = it->second;
    finished_.wait(lock, [&] { return job->finished || stopping_; });
    if (waited_ms) *waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    it = jobs_.find(structure_of(key));  // the map may have changed meanwhile
  }
  if (it == jobs_.end() || !it->second->finished) {
    *state = it == jobs_.end() ? State::None : State::Pending;
    return std::nullopt;
  }
  Done done = std::move(it->second->done);
  jobs_.erase(it);
  *state = State::None;
  return done;
}

bool BackgroundCompiles::start(const cache::CacheKey& key, Compile compile) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || jobs_.count(structure_of(key))) return false;
  auto job = std::make_shared<Job>();
  job->done.key = key;
  job->compile = std::move(compile);
  jobs_.emplace(structure_of(key), job);
  queue_.push_back(job);
  guard_main_thread_exit();  // the worker may have been started by another thread
  start_worker_locked();
  wake_.notify_one();
  return true;
}

void BackgroundCompiles::warm_up(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || worker_started_) return;
  warm_up_ = std::move(fn);
  start_worker_locked();
}

void BackgroundCompiles::start_worker_locked() {
  if (worker_started_) return;
  // Exit handlers run in reverse order of registration, static destructors
  // among them: this one runs before those of everything built before the
  // worker starts (libLLVM's and oneTBB's, the runtime's), and the statics
  // a compile makes on first use are never destroyed (immortal).
  static const bool at_exit = (std::atexit(stop_all), true);
  (void)at_exit;
  guard_main_thread_exit();
  worker_started_ = true;
  worker_ = std::thread([this] { work(); });
}

int64_t BackgroundCompiles::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t n = static_cast<int64_t>(queue_.size()) + running_;
  finished_.wait(lock, [&] { return idle_locked(); });
  return n;
}

void BackgroundCompiles::clear() {
  std::unique_lock<std::mutex> lock(mu_);
  finished_.wait(lock, [&] { return idle_locked(); });
  jobs_.clear();
}

void BackgroundCompiles::work() {
#ifdef __linux__
  // The lowest priority (nice 19, this thread only): the compile takes the
  // cycles the program leaves idle and yields a core the moment ATen's OpenMP
  // threads (which run the kernels too) want it. At normal priority it
  // preempted an OpenMP thread for a whole time slice every few syncs (4–5 ms
  // stalls in op-by-op runs of ~0.6 ms on 2 cores), and took twice as long.
  setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
#endif
  std::unique_lock<std::mutex> lock(mu_);
  // Not while a fork is under way (before_fork): a warm-up or a job.
  wake_.wait(lock, [&] { return !fork_paused_; });
  if (std::function<void()> fn = std::move(warm_up_)) {
    // Not a job: wait_all() does not wait for it (jobs queued meanwhile, it does).
    warm_up_ = nullptr;
    warming_ = true;
    lock.unlock();
    try {
      fn();
    } catch (...) {
      // Set-up only: a compile that needs what failed fails itself, and says why.
    }
    // Before the destructors of the statics libLLVM built on first use in it.
    std::atexit(stop_all);
    lock.lock();
    warming_ = false;
    finished_.notify_all();  // a fork may wait for it
  }
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !fork_paused_); });
    if (stopping_) return;
    std::shared_ptr<Job> job = queue_.front();
    queue_.pop_front();
    ++running_;
    lock.unlock();
    std::shared_ptr<const lowering::Program> program;
    std::exception_ptr error;
    try {
      program = job->compile();
    } catch (...) {
      error = std::current_exception();
    }
    job->compile = nullptr;  // what it captured (a copy of the graph) goes now
    // Once more after the first compile: before the destructors of any static
    // that libLLVM built on first use during it.
    static const bool at_exit_again = (std::atexit(stop_all), true);
    (void)at_exit_again;
    lock.lock();
    job->done.program = std::move(program);
    job->done.error = error;
    job->finished = true;
    --running_;
    finished_.notify_all();
  }
}

void BackgroundCompiles::stop() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (finish_queued_ && worker_started_ && !stopping_)
      finished_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
    stopping_ = true;
    // Jobs never started stay unfinished: nothing takes them any more.
    queue_.clear();
  }
  wake_.notify_all();
  finished_.notify_all();
  if (worker_.joinable()) worker_.join();
}

}  // namespace lazyjit::runtime
