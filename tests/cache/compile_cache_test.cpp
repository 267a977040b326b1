// CompileCache: hits, misses with reasons, dedup of concurrent compiles, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cache/compile_cache.h"
#include "debug/metrics.h"

using namespace lazyjit;

namespace {
struct Entry {
  int id;
  explicit Entry(int i) : id(i) {}
};
cache::CacheKey key(uint64_t s, uint64_t shape, uint64_t confirm = 7) {
  return cache::CacheKey{ir::Hash128{s, s}, shape, 1, confirm};
}
}  // namespace

TEST(CompileCache, HitsAfterOneCompileAndExplainsMisses) {
  cache::CompileCache<Entry> c;
  int compiles = 0;
  auto make = [&] { return std::make_shared<Entry>(++compiles); };
  auto a = c.get_or_compile(key(1, 10), make);
  EXPECT_FALSE(a.hit);
  EXPECT_EQ(a.miss_reason, "new graph");
  auto b = c.get_or_compile(key(1, 10), make);
  EXPECT_TRUE(b.hit);
  EXPECT_EQ(b.entry, a.entry);
  auto d = c.get_or_compile(key(1, 11), make);
  EXPECT_FALSE(d.hit);
  EXPECT_EQ(d.miss_reason, "new shapes for a known graph");
  EXPECT_EQ(compiles, 2);
}

TEST(CompileCache, ConfirmingHashRefusesACollision) {
  cache::CompileCache<Entry> c;
  int compiles = 0;
  auto make = [&] { return std::make_shared<Entry>(++compiles); };
  c.get_or_compile(key(1, 10, 7), make);
  int64_t before = debug::Metrics::get().value(debug::Counter::HashCollisions);
  auto r = c.get_or_compile(key(1, 10, 8), make);
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.entry->id, 2);
  EXPECT_EQ(debug::Metrics::get().value(debug::Counter::HashCollisions), before + 1);
}

TEST(CompileCache, ConcurrentCallersCompileOnce) {
  cache::CompileCache<Entry> c;
  std::atomic<int> compiles{0};
  std::vector<std::thread> ts;
  std::vector<std::shared_ptr<const Entry>> got(8);
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      got[i] = c.get_or_compile(key(5, 5), [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return std::make_shared<Entry>(++compiles);
      }).entry;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(compiles.load(), 1);
  for (auto& g : got) EXPECT_EQ(g, got[0]);
}

TEST(CompileCache, FailedCompileCachesNothing) {
  cache::CompileCache<Entry> c;
  EXPECT_THROW(c.get_or_compile(key(2, 2), []() -> std::shared_ptr<const Entry> {
                 throw std::runtime_error("boom");
               }),
               std::runtime_error);
  EXPECT_EQ(c.size(), 0u);
  auto r = c.get_or_compile(key(2, 2), [] { return std::make_shared<Entry>(1); });
  EXPECT_FALSE(r.hit);
}

TEST(CompileCache, NothingBuiltIsNotCached) {
  // A compile callback that builds nothing now (the runtime: the graph runs op
  // by op while its program compiles in the background) caches nothing.
  cache::CompileCache<Entry> c;
  int calls = 0;
  auto none = [&] { ++calls; return std::shared_ptr<Entry>(); };
  auto a = c.get_or_compile(key(4, 10), none);
  EXPECT_FALSE(a.hit);
  EXPECT_EQ(a.entry, nullptr);
  EXPECT_EQ(c.size(), 0u);
  auto b = c.get_or_compile(key(4, 10), [&] { return std::make_shared<Entry>(++calls); });
  EXPECT_FALSE(b.hit);
  ASSERT_NE(b.entry, nullptr);
  EXPECT_EQ(b.entry->id, 2);
  EXPECT_TRUE(c.get_or_compile(key(4, 10), none).hit);
}

TEST(CompileCache, EvictsLeastRecentlyUsed) {
  cache::CompileCache<Entry> c(2);
  auto make = [] { return std::make_shared<Entry>(0); };
  c.get_or_compile(key(1, 1), make);
  c.get_or_compile(key(2, 2), make);
  c.get_or_compile(key(1, 1), make);  // 1 is now the most recent
  c.get_or_compile(key(3, 3), make);  // evicts 2
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.get_or_compile(key(1, 1), make).hit);
  EXPECT_FALSE(c.get_or_compile(key(2, 2), make).hit);
}
