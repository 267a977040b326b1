#include "targets/cuda_sim/sim_grid.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

namespace lazyjit::lowering::cuda_sim {

namespace {

// A fiber's stack: the kernel's frame and the libm calls it makes. A guard
// page below it turns an overflow into a fault, not a corruption.
constexpr size_t kStackBytes = 256 * 1024;

struct Stacks {
  std::vector<char*> all;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ~Stacks() {
    for (char* s : all) munmap(s - page, kStackBytes + page);
  }
  char* get(size_t i) {
    while (all.size() <= i) {
      void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, page, PROT_NONE);
      all.push_back(static_cast<char*>(p) + page);
    }
    return all[i];
  }
};
thread_local Stacks stacks;

enum class State : uint8_t { Runnable, AtBarrier, AtShuffle, Done };

}  // namespace

struct SimBlock {
  const SimKernel* k = nullptr;
  void* const* bufs = nullptr;
  int64_t total = 0;
  const int64_t* dims = nullptr;
  uint32_t n = 0;
  std::vector<SimThread> threads;
  std::vector<ucontext_t> ctx;
  std::vector<State> state;
  ucontext_t sched;
  uint32_t current = 0;
  uint32_t at_barrier = 0;
  struct Warp {
    uint32_t arrived = 0, generation = 0;
    uint32_t slots[2][32];  // by generation parity: a lane one shuffle ahead writes the other half
  };
  std::vector<Warp> warps;
  std::string error;
};

namespace {

void wait(SimBlock& b, uint32_t tid, State why) {
  b.state[tid] = why;
  swapcontext(&b.ctx[tid], &b.sched);
}

void barrier(SimThread* t) {
  SimBlock& b = *t->block;
  if (++b.at_barrier < b.n) return wait(b, t->regs[kRegTid], State::AtBarrier);
  b.at_barrier = 0;  // the last to arrive lets the others go on and goes on itself
  for (State& s : b.state)
    if (s == State::AtBarrier) s = State::Runnable;
}

// PTX's shfl.sync (ISA "Data Movement: shfl.sync"), over the warp's 32 lanes.
uint32_t shuffle(SimThread* t, uint32_t mode, uint32_t value, uint32_t bval, uint32_t c, uint32_t mask) {
  SimBlock& b = *t->block;
  const uint32_t tid = t->regs[kRegTid], lane = tid & 31;
  SimBlock::Warp& w = b.warps[tid >> 5];
  if (mask != 0xffffffffu && b.error.empty())
    b.error = "a shuffle with member mask " + std::to_string(mask) + " (cuda-sim simulates whole warps)";
  const uint32_t half = w.generation & 1;
  w.slots[half][lane] = value;
  if (++w.arrived < 32) {
    wait(b, tid, State::AtShuffle);
  } else {
    w.arrived = 0;
    ++w.generation;
    for (uint32_t l = 0; l < 32; ++l)
      if (b.state[(tid & ~31u) + l] == State::AtShuffle) b.state[(tid & ~31u) + l] = State::Runnable;
  }
  const int32_t l = static_cast<int32_t>(lane), bv = static_cast<int32_t>(bval & 31);
  const int32_t seg = static_cast<int32_t>((c >> 8) & 31), cv = static_cast<int32_t>(c & 31);
  const int32_t max_lane = (l & seg) | (cv & ~seg), min_lane = l & seg;
  int32_t j = l;
  bool ok = false;
  switch (mode) {
    case 0: j = l - bv; ok = j >= max_lane; break;
    case 1: j = l + bv; ok = j <= max_lane; break;
    case 2: j = l ^ bv; ok = j <= max_lane; break;
    default: j = min_lane | (bv & ~seg); ok = j <= max_lane; break;
  }
  if (!ok) j = l;
  return w.slots[half][j];
}

// The threads of a kernel that never meets: these are never called.
void no_barrier(SimThread* t) { (void)t; }
uint32_t no_shuffle(SimThread*, uint32_t, uint32_t value, uint32_t, uint32_t, uint32_t) { return value; }

void fiber_main(unsigned lo, unsigned hi) {
  auto* b = reinterpret_cast<SimBlock*>((static_cast<uintptr_t>(hi) << 32) | lo);
  const uint32_t tid = b->current;
  b->k->entry(b->bufs, b->total, b->dims, &b->threads[tid]);
  b->state[tid] = State::Done;  // then uc_link: back to the scheduler
}

[[noreturn]] void fail(const SimKernel& k, uint32_t block, const std::string& what) {
  throw std::runtime_error("cuda-sim: kernel " + k.name + ", block " + std::to_string(block) + ": " + what);
}

void run_block(SimBlock& b, uint32_t ctaid, uint32_t grid, std::vector<unsigned char>& shared) {
  std::memset(shared.data(), 0xff, shared.size());
  b.at_barrier = 0;
  b.error.clear();
  for (SimBlock::Warp& w : b.warps) w.arrived = 0, w.generation = 0;
  const uintptr_t self = reinterpret_cast<uintptr_t>(&b);
  for (uint32_t t = 0; t < b.n; ++t) {
    SimThread& th = b.threads[t];
    th.regs[kRegTid] = t, th.regs[kRegNtid] = b.n, th.regs[kRegCtaid] = ctaid, th.regs[kRegNctaid] = grid;
    th.regs[kRegLane] = t & 31;
    th.shared = shared.data();
    th.block = &b;
    th.shuffle = &shuffle;
    th.barrier = &barrier;
    b.state[t] = State::Runnable;
    ucontext_t& c = b.ctx[t];
    getcontext(&c);
    c.uc_stack.ss_sp = stacks.get(t);
    c.uc_stack.ss_size = kStackBytes;
    c.uc_link = &b.sched;
    makecontext(&c, reinterpret_cast<void (*)()>(&fiber_main), 2, static_cast<unsigned>(self & 0xffffffffu),
                static_cast<unsigned>(self >> 32));
  }
  uint32_t done = 0;
  while (done < b.n) {
    bool ran = false;
    for (uint32_t t = 0; t < b.n; ++t) {
      if (b.state[t] != State::Runnable) continue;
      b.current = t;
      swapcontext(&b.sched, &b.ctx[t]);
      ran = true;
      done += b.state[t] == State::Done;
    }
    if (!ran) {
      uint32_t bar = 0, shf = 0;
      for (State s : b.state) bar += s == State::AtBarrier, shf += s == State::AtShuffle;
      fail(*b.k, ctaid,
           "its threads do not meet: " + std::to_string(bar) + " wait at a barrier, " + std::to_string(shf) +
               " at a shuffle, " + std::to_string(done) + " of " + std::to_string(b.n) + " finished");
    }
  }
  if (!b.error.empty()) fail(*b.k, ctaid, b.error);
}

}  // namespace

void run_blocks(const SimKernel& k, void* const* bufs, int64_t total, const int64_t* dims, uint32_t grid,
                uint32_t block, uint32_t first, uint32_t last) {
  std::vector<unsigned char> shared(static_cast<size_t>(k.shared_bytes) + 16);
  if (!k.meets) {
    SimThread t;
    t.shared = shared.data();
    t.shuffle = &no_shuffle;
    t.barrier = &no_barrier;
    for (uint32_t c = first; c < last; ++c) {
      if (k.shared_bytes) std::memset(shared.data(), 0xff, shared.size());
      for (uint32_t i = 0; i < block; ++i) {
        t.regs[kRegTid] = i, t.regs[kRegNtid] = block, t.regs[kRegCtaid] = c, t.regs[kRegNctaid] = grid;
        t.regs[kRegLane] = i & 31;
        k.entry(bufs, total, dims, &t);
      }
    }
    return;
  }
  if (block == 0 || block % 32 != 0 || block > 1024)
    fail(k, first, "a block of " + std::to_string(block) + " threads (kernels that meet need whole warps, at most 1024)");
  SimBlock b;
  b.k = &k, b.bufs = bufs, b.total = total, b.dims = dims, b.n = block;
  b.threads.resize(block);
  b.ctx.resize(block);
  b.state.resize(block);
  b.warps.resize(block / 32);
  for (uint32_t c = first; c < last; ++c) run_block(b, c, grid, shared);
}

}  // namespace lazyjit::lowering::cuda_sim
