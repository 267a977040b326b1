#include "executor/buffer_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

namespace lazyjit::executor {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kPoolFrom = 1 << 20;       // smaller blocks: plain malloc
constexpr size_t kPoolCap = size_t(2) << 30;  // most bytes kept for reuse

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
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
        pooled_ -= bytes;
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

 private:
  static size_t round(size_t n) { return n >= kPoolFrom ? (n + 4095) & ~size_t(4095) : n; }
  static void release(void* ctx);
  void give_back(Block* b) {
    if (b->bytes >= kPoolFrom) {
      std::lock_guard<std::mutex> lock(mu_);
      if (pooled_ + b->bytes <= kPoolCap) {
        free_.emplace(b->bytes, b->ptr);
        pooled_ += b->bytes;
        delete b;
        return;
      }
    }
    std::free(b->ptr);
    delete b;
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;
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

}  // namespace lazyjit::executor
