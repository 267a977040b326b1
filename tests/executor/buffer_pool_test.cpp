// The buffer pool: reuse of a freed size, and a bound on what it keeps when
// every size is new (a sweep over distinct shapes must not hoard memory);
// ATen's allocations inside a program (ProgramAllocations) and outside one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "executor/buffer_pool.h"

using lazyjit::executor::buffer_pool;
using lazyjit::executor::ProgramAllocations;
using lazyjit::executor::pooled_bytes;
using lazyjit::executor::trim_buffer_pool;

TEST(BufferPool, AFreedBlockServesTheNextRequestOfItsSize) {
  trim_buffer_pool();
  void* first;
  {
    c10::DataPtr a = buffer_pool()->allocate(3 << 20);
    first = a.get();
  }
  EXPECT_EQ(pooled_bytes(), size_t(3) << 20);
  c10::DataPtr b = buffer_pool()->allocate(3 << 20);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(pooled_bytes(), 0u);
}

TEST(BufferPool, DistinctSizesStayWithinTheCapOldestReturnedFirst) {
  trim_buffer_pool();
  const size_t mb = size_t(1) << 20, cap = 256 * mb;
  size_t freed = 0;
  void* last = nullptr;
  size_t last_size = 0;
  for (int i = 0; i < 400; ++i) {
    size_t n = mb + size_t(i) * 8192;  // 400 sizes, 1-4 MB, 1 GB in all
    c10::DataPtr p = buffer_pool()->allocate(n);
    last = p.get();
    last_size = n;
    freed += n;
  }  // each is freed at the end of its iteration
  EXPECT_GT(freed, 3 * cap);
  EXPECT_LE(pooled_bytes(), cap);
  EXPECT_GT(pooled_bytes(), cap - 4 * mb);
  // The newest blocks are the ones kept.
  c10::DataPtr again = buffer_pool()->allocate(last_size);
  EXPECT_EQ(again.get(), last);
  c10::DataPtr first_size = buffer_pool()->allocate(mb);  // freed longest ago: gone
  trim_buffer_pool();
  EXPECT_EQ(pooled_bytes(), 0u);
}

TEST(BufferPool, AtenAllocationsInsideAProgramComeFromThePool) {
  trim_buffer_pool();
  const int64_t big = int64_t(3) << 18;  // 3 MiB of float
  void* first;
  {
    ProgramAllocations scope;
    at::Tensor t = at::ones({big});
    first = t.data_ptr();
    at::Tensor small = at::ones({1000});  // below the pool's size: malloc, as before
    EXPECT_EQ(pooled_bytes(), 0u);
  }
  EXPECT_EQ(pooled_bytes(), size_t(3) << 20);  // the ATen result went back to the pool
  {
    ProgramAllocations scope;
    ProgramAllocations nested;  // nests; leaving it keeps the outer scope
    { ProgramAllocations inner; }
    at::Tensor t = at::empty({big});
    EXPECT_EQ(t.data_ptr(), first);
    EXPECT_EQ(pooled_bytes(), 0u);
    t.fill_(2.0f);
    EXPECT_EQ(t.sum().item<float>(), 2.0f * big);
  }
  // Outside a program, ATen allocates as it did: the pool is not touched.
  size_t before = pooled_bytes();
  at::Tensor outside = at::ones({big});
  EXPECT_NE(outside.data_ptr(), first);
  EXPECT_EQ(pooled_bytes(), before);
  outside.reset();
  EXPECT_EQ(pooled_bytes(), before);
}

TEST(BufferPool, RawAllocationsInsideAProgramFreeThroughTheRawDeleter) {
  // ideep (oneDNN's buffers) allocates with raw_allocate and frees with the
  // allocator's raw deleter: pool blocks and the base allocator's both.
  trim_buffer_pool();
  void* pooled;
  {
    ProgramAllocations scope;  // the first one installs lazyjit's CPU allocator
    c10::Allocator* cpu = c10::GetAllocator(c10::DeviceType::CPU);  // as ideep asks, at each call
    pooled = cpu->raw_allocate(size_t(2) << 20);
    void* small = cpu->raw_allocate(4096);
    static_cast<char*>(pooled)[(size_t(2) << 20) - 1] = 1;
    cpu->raw_deleter()(small);
    cpu->raw_deleter()(pooled);
  }
  EXPECT_EQ(pooled_bytes(), size_t(2) << 20);
  c10::Allocator* cpu = c10::GetAllocator(c10::DeviceType::CPU);
  void* outside = cpu->raw_allocate(size_t(2) << 20);  // the base allocator's
  cpu->raw_deleter()(outside);
  EXPECT_EQ(pooled_bytes(), size_t(2) << 20);
  trim_buffer_pool();
}
