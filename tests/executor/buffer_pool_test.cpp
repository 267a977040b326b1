// The buffer pool: reuse of a freed size, and a bound on what it keeps when
// every size is new (a sweep over distinct shapes must not hoard memory).
#include <gtest/gtest.h>

#include <vector>

#include "executor/buffer_pool.h"

using lazyjit::executor::buffer_pool;
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
