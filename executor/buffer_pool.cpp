#include "executor/buffer_pool.h"

#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <new>

namespace lazyjit::executor {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kPoolFrom = 1 << 20;          // smaller blocks: plain malloc
constexpr size_t kPoolCap = size_t(256) << 20;  // most bytes kept for reuse

struct Block {
  void* ptr;
  size_t bytes;
};

class Pool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    size_t bytes = round(n);
    void* p = nullptr;
    if (bytes >= kPoolFrom) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_size_.find(bytes);
      if (it != by_size_.end()) {
        p = it->second->ptr;
        pooled_ -= bytes;
        age_.erase(it->second);
        by_size_.erase(it);
      }
    }
    if (!p && posix_memalign(&p, kAlign, std::max<size_t>(bytes, kAlign)) != 0) throw std::bad_alloc();
    return c10::DataPtr(p, new Block{p, bytes}, &release, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
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
  using Age = std::list<Block>;  // front = freed longest ago

  static size_t round(size_t n) { return n >= kPoolFrom ? (n + 4095) & ~size_t(4095) : n; }
  static void release(void* ctx);
  void give_back(Block* b) {
    if (b->bytes >= kPoolFrom && b->bytes <= kPoolCap) {
      std::lock_guard<std::mutex> lock(mu_);
      trim_locked(kPoolCap - b->bytes);
      age_.push_back(*b);
      by_size_.emplace(b->bytes, std::prev(age_.end()));
      pooled_ += b->bytes;
      delete b;
      return;
    }
    std::free(b->ptr);
    delete b;
  }
  // Frees the blocks freed longest ago until at most `keep` bytes are pooled.
  void trim_locked(size_t keep) {
    while (pooled_ > keep && !age_.empty()) {
      Block old = age_.front();
      auto range = by_size_.equal_range(old.bytes);
      for (auto it = range.first; it != range.second; ++it)
        if (it->second == age_.begin()) {
          by_size_.erase(it);
          break;
        }
      age_.pop_front();
      pooled_ -= old.bytes;
      std::free(old.ptr);
    }
  }

  std::mutex mu_;
  Age age_;
  std::multimap<size_t, Age::iterator> by_size_;
  size_t pooled_ = 0;
};

Pool* pool() {
  static Pool* p = new Pool();  // never destroyed: results may outlive static destructors
  return p;
}

void Pool::release(void* ctx) { pool()->give_back(static_cast<Block*>(ctx)); }

}  // namespace

c10::Allocator* buffer_pool() { return pool(); }
size_t pooled_bytes() { return pool()->pooled(); }
void trim_buffer_pool() { pool()->trim(0); }

}  // namespace lazyjit::executor
