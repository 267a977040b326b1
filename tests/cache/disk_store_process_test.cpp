// DiskStore across processes: concurrent writers and readers, the per-key
// lock, and writers or lock holders killed with SIGKILL.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache/disk_store.h"
#include "tests/cache/disk_test_util.h"

using namespace lazyjit::cache;
using namespace lazyjit::cache::testing;
using namespace std::chrono_literals;

namespace {

// Big enough that a write is many syscalls, so a torn read would show.
std::string payload_of(int writer, int round) {
  std::string p(256 * 1024 + writer * 13, '\0');
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<char>(writer * 7 + round * 3 + i);
  return p;
}

std::string manifest_of(int writer, int round) {
  return nlohmann::json{{"writer", writer}, {"round", round}}.dump();
}

// Checks that an entry is exactly what its manifest says its writer wrote.
bool consistent(const entry_file::VerifiedEntry& r) {
  auto m = nlohmann::json::parse(r.manifest());
  return r.payload() == payload_of(m["writer"].get<int>(), m["round"].get<int>());
}

}  // namespace

TEST(DiskStoreProcesses, EightWritersAndReadersNeverSeeTornEntries) {
  TempDir t;
  std::vector<pid_t> kids;
  for (int w = 0; w < 8; ++w)
    kids.push_back(spawn([&, w] {
      int errors = 0;
      auto store = DiskStore::open({t.cache()}, nullptr);
      if (!store) return 10;
      store->on_error = [&](DiskError, DiskOp, const std::string&) { ++errors; };
      std::string own = "own-" + std::to_string(w);
      for (int round = 0; round < 20; ++round) {
        if (!store->put("shared", manifest_of(w, round), payload_of(w, round))) return 11;
        if (!store->put(own, manifest_of(w, round), payload_of(w, round))) return 12;
        auto shared = store->get("shared", nullptr);
        if (!shared || !consistent(*shared)) return 13;  // someone's complete entry, never a mix
        store->record_hit("shared");
        auto mine = store->get(own, nullptr);
        if (!mine || mine->payload() != payload_of(w, round)) return 14;
      }
      return errors == 0 ? 0 : 15;
    }));
  for (pid_t k : kids) EXPECT_EQ(wait_for(k), 0);
  auto store = DiskStore::open({t.cache()}, nullptr);
  EXPECT_TRUE(files_in(store->root() + "/tmp").empty());
  EXPECT_TRUE(files_in(store->root() + "/quarantine").empty());
}

TEST(DiskStoreProcesses, OnlyOneProcessHoldsAKeyLockAtATime) {
  TempDir t;
  ASSERT_TRUE(DiskStore::open({t.cache()}, nullptr));
  std::string inside = t.path() + "/inside";  // exists exactly while someone holds the lock
  std::vector<pid_t> kids;
  for (int c = 0; c < 2; ++c)
    kids.push_back(spawn([&] {
      auto store = DiskStore::open({t.cache()}, nullptr);
      for (int i = 0; i < 30; ++i) {
        auto lock = store->lock("k", 10s);
        if (!lock) return 10;
        int fd = ::open(inside.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
        if (fd < 0) return 11;  // the other process is inside too
        ::close(fd);
        std::this_thread::sleep_for(2ms);
        ::unlink(inside.c_str());
      }
      return 0;
    }));
  for (pid_t k : kids) EXPECT_EQ(wait_for(k), 0);
}

TEST(DiskStoreProcesses, SigkilledLockHolderDoesNotBlockTheNextLocker) {
  TempDir t;
  auto store = DiskStore::open({t.cache()}, nullptr);
  ASSERT_TRUE(store);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t holder = spawn([&] {
    auto lock = store->lock("k", 1s);
    char c = lock ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) return 1;
    ::pause();  // holds the lock until killed
    return 0;
  });
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_FALSE(store->lock("k", 50ms).held());  // really held by the child
  ::kill(holder, SIGKILL);
  EXPECT_EQ(wait_for(holder), 128 + SIGKILL);
  EXPECT_TRUE(store->lock("k", 1s).held());
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(DiskStoreProcesses, KillDuringPutLeavesNoEntryAndTheNextOpenRemovesTheTmp) {
  TempDir t;
  auto store = DiskStore::open({t.cache()}, nullptr);
  ASSERT_TRUE(store);
  std::string tmp = store->root() + "/tmp";
  pid_t writer = spawn([&] {
    ::setenv("LAZYJIT_TEST_PAUSE_IN_WRITE", "k", 1);
    auto s = DiskStore::open({t.cache()}, nullptr);
    s->put("k", manifest_of(0, 0), payload_of(0, 0));
    return 0;
  });
  // Wait for the half-written tmp file (the child then sleeps 30 s).
  bool partial = false;
  for (int i = 0; i < 500 && !partial; ++i) {
    for (auto& n : files_in(tmp)) {
      struct stat st;
      partial = partial || (::stat((tmp + "/" + n).c_str(), &st) == 0 && st.st_size > 0);
    }
    if (!partial) std::this_thread::sleep_for(10ms);
  }
  ::kill(writer, SIGKILL);
  EXPECT_EQ(wait_for(writer), 128 + SIGKILL);
  ASSERT_TRUE(partial) << "the writer never started its tmp file";
  EXPECT_FALSE(exists(store->root() + "/entries/k.ljc"));
  EXPECT_EQ(files_in(tmp).size(), 1u);
  EXPECT_FALSE(store->get("k", nullptr).has_value());

  ASSERT_TRUE(DiskStore::open({t.cache()}, nullptr));  // open() runs cleanup()
  EXPECT_TRUE(files_in(tmp).empty());
}
