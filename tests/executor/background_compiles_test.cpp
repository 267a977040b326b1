// The worker that compiles programs while their graphs run op by op
// (runtime/background_compiles.h): one job per structure, in order, on one
// thread; errors come back to the taker; clear and destruction wait.
#include "runtime/background_compiles.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace lazyjit::runtime {
namespace {

using State = BackgroundCompiles::State;

cache::CacheKey key_of(uint64_t structure, uint64_t shape, uint64_t target = 7) {
  cache::CacheKey k;
  k.structure = ir::Hash128{structure, structure * 31 + 1};
  k.shape = shape;
  k.target = target;
  return k;
}

std::shared_ptr<const lowering::Program> program_with_ms(double ms) {
  auto p = std::make_shared<lowering::Program>();
  p->compile_ms = ms;
  return p;
}

TEST(BackgroundCompiles, AJobPendingPastTheLimitIsWaitedForByTheNextTake) {
  // A worker starved of CPU time must not leave a loop running op by op for
  // good: past `overdue` since it was queued, take() waits for the job.
  BackgroundCompiles bg;
  ASSERT_TRUE(bg.start(key_of(5, 10), [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return program_with_ms(7);
  }));
  State state;
  double waited = -1;
  // Young: pending, no wait.
  EXPECT_FALSE(bg.take(key_of(5, 10), &state, &waited, std::chrono::milliseconds(10000)).has_value());
  EXPECT_EQ(state, State::Pending);
  EXPECT_EQ(waited, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  // Past a 50 ms limit: this take waits until the job is done and takes it.
  auto t0 = std::chrono::steady_clock::now();
  auto done = bg.take(key_of(5, 11), &state, &waited, std::chrono::milliseconds(50));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(done.has_value());
  ASSERT_TRUE(done->program);
  EXPECT_EQ(done->program->compile_ms, 7);
  EXPECT_TRUE(done->key == key_of(5, 10));
  EXPECT_EQ(state, State::None);
  EXPECT_GT(waited, 100);  // the job slept 300 ms, ~60 of them before the take
  EXPECT_LE(waited, ms + 1);
  EXPECT_EQ(bg.wait_all(), 0);
}

TEST(BackgroundCompiles, AnOverdueTakeWaitsUntilTheJobFinishes) {
  BackgroundCompiles bg;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  ASSERT_TRUE(bg.start(key_of(6, 1), [gate] {
    gate.wait();
    return program_with_ms(1);
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto taker = std::async(std::launch::async, [&] {
    State state;
    return bg.take(key_of(6, 1), &state, nullptr, std::chrono::milliseconds(1)).has_value();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(taker.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);  // waiting for the job
  release.set_value();
  EXPECT_TRUE(taker.get());  // the job finished: taken
}

TEST(BackgroundCompiles, AJobIsPendingUntilItFinishesThenTakenOnce) {
  BackgroundCompiles bg;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  ASSERT_TRUE(bg.start(key_of(1, 10), [gate] {
    gate.wait();
    return program_with_ms(42);
  }));
  State state;
  EXPECT_FALSE(bg.take(key_of(1, 10), &state).has_value());
  EXPECT_EQ(state, State::Pending);
  // Another size of the same structure: the same job, not a second one.
  EXPECT_FALSE(bg.take(key_of(1, 11), &state).has_value());
  EXPECT_EQ(state, State::Pending);
  EXPECT_FALSE(bg.start(key_of(1, 11), [] { return program_with_ms(0); }));
  release.set_value();
  EXPECT_EQ(bg.wait_all(), 1);
  EXPECT_EQ(bg.wait_all(), 0);  // nothing queued or running any more
  auto done = bg.take(key_of(1, 11), &state);  // taken by a graph of other sizes
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->key == key_of(1, 10));
  ASSERT_TRUE(done->program);
  EXPECT_EQ(done->program->compile_ms, 42);
  EXPECT_FALSE(done->error);
  EXPECT_FALSE(bg.take(key_of(1, 10), &state).has_value());
  EXPECT_EQ(state, State::None);
  // Taken: the structure can start again.
  EXPECT_TRUE(bg.start(key_of(1, 12), [] { return program_with_ms(1); }));
  bg.wait_all();
}

TEST(BackgroundCompiles, OtherCodeOrStructureIsAnotherJob) {
  BackgroundCompiles bg;
  EXPECT_TRUE(bg.start(key_of(1, 10, 7), [] { return program_with_ms(1); }));
  EXPECT_TRUE(bg.start(key_of(1, 10, 8), [] { return program_with_ms(2); }));  // NaN-checked code, say
  EXPECT_TRUE(bg.start(key_of(2, 10, 7), [] { return program_with_ms(3); }));
  EXPECT_EQ(bg.wait_all(), 3);
  State state;
  EXPECT_EQ(bg.take(key_of(1, 10, 7), &state)->program->compile_ms, 1);
  EXPECT_EQ(bg.take(key_of(1, 10, 8), &state)->program->compile_ms, 2);
  EXPECT_EQ(bg.take(key_of(2, 10, 7), &state)->program->compile_ms, 3);
}

TEST(BackgroundCompiles, JobsRunInOrderOnOneThreadThatIsNotTheCallers) {
  BackgroundCompiles bg;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 5; ++i)
    bg.start(key_of(100 + i, 1), [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      return program_with_ms(i);
    });
  bg.wait_all();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (auto id : threads) {
    EXPECT_EQ(id, threads[0]);
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(BackgroundCompiles, AFailedCompileComesBackAsItsError) {
  BackgroundCompiles bg;
  bg.start(key_of(3, 1), []() -> std::shared_ptr<const lowering::Program> {
    throw std::runtime_error("codegen failed for kernel fused_0");
  });
  bg.wait_all();
  State state;
  auto done = bg.take(key_of(3, 1), &state);
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(done->program);
  ASSERT_TRUE(done->error);
  try {
    std::rethrow_exception(done->error);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "codegen failed for kernel fused_0");
  }
  // The worker lives on.
  EXPECT_TRUE(bg.start(key_of(3, 2), [] { return program_with_ms(5); }));
  bg.wait_all();
  EXPECT_EQ(bg.take(key_of(3, 2), &state)->program->compile_ms, 5);
}

TEST(BackgroundCompiles, ClearWaitsThenForgetsEverything) {
  BackgroundCompiles bg;
  std::atomic<bool> ran{false};
  bg.start(key_of(4, 1), [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ran = true;
    return program_with_ms(1);
  });
  bg.clear();
  EXPECT_TRUE(ran);
  State state;
  EXPECT_FALSE(bg.take(key_of(4, 1), &state).has_value());
  EXPECT_EQ(state, State::None);
}

TEST(BackgroundCompiles, DestructionFinishesTheRunningJobAndDropsTheQueued) {
  std::atomic<int> ran{0};
  std::promise<void> started;
  {
    BackgroundCompiles bg;
    bg.start(key_of(5, 1), [&] {
      started.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ++ran;
      return program_with_ms(1);
    });
    for (int i = 0; i < 3; ++i)
      bg.start(key_of(6 + i, 1), [&] {
        ++ran;
        return program_with_ms(1);
      });
    started.get_future().wait();
  }
  EXPECT_EQ(ran, 1);
}

TEST(BackgroundCompilesDeathTest, ExitWaitsForTheWorkerBeforeAnyStaticItMadeDies) {
  // The worker's first codegen builds libLLVM's statics, whose destructors
  // register after every exit handler lazyjit set before it; a process exiting
  // meanwhile destroyed them under the worker (a crash at exit). Now the main
  // thread's exit joins the worker first.
  EXPECT_EXIT(
      {
        auto* bg = new BackgroundCompiles;  // like Runtime::get()'s: never destroyed
        static std::atomic<bool> started{false};
        bg->warm_up([] {
          struct Marker {
            ~Marker() { std::fputs("marker destroyed\n", stderr); }
          };
          static Marker made_by_the_worker;  // its destructor registers now
          (void)made_by_the_worker;
          started = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          std::fputs("worker done\n", stderr);
        });
        while (!started) std::this_thread::yield();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "worker done\nmarker destroyed");
}

// fork(): the child has no worker of the parent's; it must neither hang at
// exit (it joined a thread it did not have) nor wait for a job nobody runs.
// Runs `child` in a forked child that leaves through std::exit (exit handlers
// and all: where the hang was) with child()'s status; the exit status, or -1
// for a child still running after `deadline` (then killed).
int exit_status_of_child(const std::function<int()>& child,
                         std::chrono::milliseconds deadline = std::chrono::milliseconds(10000)) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) std::exit(child());
  if (pid < 0) return -2;
  const auto end = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

TEST(BackgroundCompilesFork, AForkWaitsForTheRunningJobAndTheChildStartsAWorkerOfItsOwn) {
  BackgroundCompiles bg;
  std::promise<void> started;
  ASSERT_TRUE(bg.start(key_of(20, 1), [&] {
    started.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return program_with_ms(1);
  }));
  ASSERT_TRUE(bg.start(key_of(21, 1), [] { return program_with_ms(2); }));  // queued behind it
  started.get_future().wait();
  const int status = exit_status_of_child([&] {
    State state;
    // The running job finished before the fork: the child has its program.
    auto first = bg.take(key_of(20, 1), &state);
    if (!first || !first->program || first->program->compile_ms != 1) return 10;
    // The queued one is the parent's: none here (a sync of it queues it again),
    // even for a take that would wait for an overdue job.
    if (bg.take(key_of(21, 1), &state, nullptr, std::chrono::milliseconds(0)) || state != State::None) return 11;
    // A job of the child's own runs on a worker of the child's.
    const pid_t me = ::getpid();
    std::atomic<pid_t> ran_in{0};
    if (!bg.start(key_of(21, 1), [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          ran_in = ::getpid();  // last: set once the job is done
          return program_with_ms(3);
        }))
      return 12;
    // wait_all returns once the job is done (how many it counted depends on
    // whether the worker had already finished it: not checked).
    bg.wait_all();
    if (ran_in != me) return 13;
    auto mine = bg.take(key_of(21, 1), &state);
    if (!mine || mine->program->compile_ms != 3) return 14;
    // A job still running at exit: exit waits for it (stop_all).
    bg.start(key_of(22, 1), [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return program_with_ms(4);
    });
    return 0;
  });
  EXPECT_EQ(status, 0) << "-1: the child hung; 10-14: a check in it failed";
  // The parent goes on: its queued job runs on its worker, and new ones too.
  bg.wait_all();
  State state;
  auto queued = bg.take(key_of(21, 1), &state);
  ASSERT_TRUE(queued.has_value());
  EXPECT_EQ(queued->program->compile_ms, 2);
  EXPECT_TRUE(bg.take(key_of(20, 1), &state).has_value());  // the parent's copy of the first
  ASSERT_TRUE(bg.start(key_of(23, 1), [] { return program_with_ms(5); }));
  bg.wait_all();
  EXPECT_EQ(bg.take(key_of(23, 1), &state)->program->compile_ms, 5);
}

TEST(BackgroundCompilesFork, AChildDoesNotWaitAtExitForTheParentsJobs) {
  // With the disk cache on, exit finishes the queued jobs (finish_queued_at_stop):
  // a child waited for jobs that only the parent's worker would run (the hang
  // of a Python child at sys.exit).
  BackgroundCompiles bg;
  bg.finish_queued_at_stop(true);
  std::promise<void> started;
  ASSERT_TRUE(bg.start(key_of(40, 1), [&] {
    started.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return program_with_ms(1);
  }));
  ASSERT_TRUE(bg.start(key_of(41, 1), [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return program_with_ms(2);
  }));
  started.get_future().wait();
  EXPECT_EQ(exit_status_of_child([] { return 0; }), 0) << "-1: the child hung at exit";
  bg.wait_all();
  State state;
  EXPECT_EQ(bg.take(key_of(41, 1), &state)->program->compile_ms, 2);  // the parent's worker ran it
}

TEST(BackgroundCompilesFork, AChildForkedWhileTheWorkerIdlesExitsAtOnce) {
  BackgroundCompiles bg;
  ASSERT_TRUE(bg.start(key_of(30, 1), [] { return program_with_ms(1); }));
  bg.wait_all();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(exit_status_of_child([] { return 0; }), 0) << "-1: the child hung at exit";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // A warm-up under way at the fork is waited for too; the parent goes on.
  std::atomic<bool> warming{false}, warmed{false};
  BackgroundCompiles other;
  other.warm_up([&] {
    warming = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    warmed = true;
  });
  while (!warming) std::this_thread::yield();
  EXPECT_EQ(exit_status_of_child([&] { return warmed ? 0 : 20; }), 0);
  ASSERT_TRUE(other.start(key_of(31, 1), [] { return program_with_ms(6); }));
  other.wait_all();
  State state;
  EXPECT_EQ(other.take(key_of(31, 1), &state)->program->compile_ms, 6);
}

}  // namespace
}  // namespace lazyjit::runtime
