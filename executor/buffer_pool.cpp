#include "executor/buffer_pool.h"

#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>

namespace lazyjit::executor {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kPoolFrom = 1 << 20;          // smaller blocks: plain malloc
constexpr size_t kPoolCap = size_t(256) << 20;  // most bytes kept for reuse

void free_small(void* p) { std::free(p); }

// A block's data pointer is its DataPtr's context (as ATen's own CPU
// allocator's are), so raw_allocate, which ideep uses for oneDNN's buffers,
// accepts it; the pool finds a block's size by its address.
class Pool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    size_t bytes = round(n);
    void* p = nullptr;
    if (bytes < kPoolFrom) {
      if (posix_memalign(&p, kAlign, std::max<size_t>(bytes, kAlign)) != 0) throw std::bad_alloc();
      return c10::DataPtr(p, p, &free_small, c10::Device(c10::kCPU));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_size_.find(bytes);
      if (it != by_size_.end()) {
        p = it->second->first;
        pooled_ -= bytes;
        age_.erase(it->second);
        by_size_.erase(it);
        live_[p] = bytes;
      }
    }
    if (!p) {
      if (posix_memalign(&p, kAlign, bytes) != 0) throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = bytes;
    }
    return c10::DataPtr(p, p, &release, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // Takes back `p` when the pool handed it out; false when it did not.
  bool give_back(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    size_t bytes = it->second;
    live_.erase(it);
    if (bytes > kPoolCap) {
      std::free(p);
      return true;
    }
    trim_locked(kPoolCap - bytes);
    age_.emplace_back(p, bytes);
    by_size_.emplace(bytes, std::prev(age_.end()));
    pooled_ += bytes;
    return true;
  }
  size_t pooled() {
    std::lock_guard<std::mutex> lock(mu_);
    return pooled_;
  }
  void trim(size_t keep) {
    std::lock_guard<std::mutex> lock(mu_);
    trim_locked(keep);
  }

 private:
  using Age = std::list<std::pair<void*, size_t>>;  // front = freed longest ago

  static size_t round(size_t n) { return n >= kPoolFrom ? (n + 4095) & ~size_t(4095) : n; }
  static void release(void* p);
  // Frees the blocks freed longest ago until at most `keep` bytes are pooled.
  void trim_locked(size_t keep) {
    while (pooled_ > keep && !age_.empty()) {
      auto [old, bytes] = age_.front();
      auto range = by_size_.equal_range(bytes);
      for (auto it = range.first; it != range.second; ++it)
        if (it->second == age_.begin()) {
          by_size_.erase(it);
          break;
        }
      age_.pop_front();
      pooled_ -= bytes;
      std::free(old);
    }
  }

  std::mutex mu_;
  Age age_;
  std::multimap<size_t, Age::iterator> by_size_;
  std::unordered_map<void*, size_t> live_;  // handed out, by address
  size_t pooled_ = 0;
};

Pool* pool() {
  static Pool* p = new Pool();  // never destroyed: results may outlive static destructors
  return p;
}

void Pool::release(void* p) {
  if (!pool()->give_back(p)) std::free(p);
}

thread_local bool t_in_program = false;

// ATen's CPU allocator while lazyjit is loaded: inside a program (this
// thread's ProgramAllocations), large blocks come from the pool; everything
// else is the replaced allocator's. Its raw deleter tells the two apart by
// address (the pool knows what it handed out).
class ScopedCpuAllocator final : public c10::Allocator {
 public:
  explicit ScopedCpuAllocator(c10::Allocator* base) : base_(base), base_raw_(base->raw_deleter()) {}
  c10::DataPtr allocate(size_t n) override {
    if (t_in_program && n >= kPoolFrom) return pool()->allocate(n);
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_raw_ ? &raw_free : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  static void raw_free(void* p);
  c10::Allocator* base_;
  c10::DeleterFnPtr base_raw_;
};

ScopedCpuAllocator* scoped() {
  static ScopedCpuAllocator* a = [] {
    auto* s = new ScopedCpuAllocator(c10::GetAllocator(c10::DeviceType::CPU));  // never destroyed
    // ATen registers its own CPU allocator at priority 0.
    c10::SetAllocator(c10::DeviceType::CPU, s, /*priority=*/1);
    return s;
  }();
  return a;
}

void ScopedCpuAllocator::raw_free(void* p) {
  if (!pool()->give_back(p)) scoped()->base_raw_(p);
}

}  // namespace

c10::Allocator* buffer_pool() { return pool(); }
size_t pooled_bytes() { return pool()->pooled(); }
void trim_buffer_pool() { pool()->trim(0); }

ProgramAllocations::ProgramAllocations() : outer_(!t_in_program) {
  scoped();
  t_in_program = true;
}

ProgramAllocations::~ProgramAllocations() {
  if (outer_) t_in_program = false;
}

}  // namespace lazyjit::executor
