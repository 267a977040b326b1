// DiskStore and its directory (issue 48): a store works in the directory it
// opened even when that is renamed away and replaced; a directory others could
// replace (a parent writable by group or others without the sticky bit, or
// owned by another user) is refused; lock files do not outlive their holders;
// a full disk makes room by evicting and tries once more.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "cache/disk_store.h"
#include "tests/cache/disk_test_util.h"

using namespace lazyjit::cache;
using namespace lazyjit::cache::testing;
using namespace std::chrono_literals;

namespace {

DiskStoreOptions opts(const std::string& dir, uint64_t max_bytes = 2ull << 30) {
  return DiskStoreOptions{dir, max_bytes, ""};
}

const char* kManifest = R"({"target":"x86_64-avx2"})";

std::string payload_of(size_t n, char seed) {
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(seed + i * 31);
  return p;
}

}  // namespace

TEST(DiskStoreDir, ADirectorySwappedUnderAnOpenStoreIsNeverRead) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s.store) << s.warning;
  ASSERT_TRUE(s->put("a", kManifest, "original"));
  {
    // What another user would put in its place: valid entries (right key,
    // right checksum) with their own payloads.
    RecordingStore planted(opts(t.path() + "/planted"));
    ASSERT_TRUE(planted->put("a", kManifest, "PLANTED"));
    ASSERT_TRUE(planted->put("k", kManifest, "PLANTED"));
  }
  std::string moved = t.path() + "/moved";
  ASSERT_EQ(::rename(t.cache().c_str(), moved.c_str()), 0);
  ASSERT_EQ(::rename((t.path() + "/planted").c_str(), t.cache().c_str()), 0);

  auto a = s->get("a", nullptr);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->payload(), "original");
  EXPECT_FALSE(s->get("k", nullptr).has_value()) << "read the planted entry";
  // Writes, hit stamps, locks and eviction stay in the directory it opened.
  ASSERT_TRUE(s->put("n", kManifest, "new"));
  EXPECT_TRUE(exists(moved + "/v1/entries/n.ljc"));
  EXPECT_FALSE(exists(t.cache() + "/v1/entries/n.ljc"));
  s->record_hit("a");
  EXPECT_TRUE(exists(moved + "/v1/entries/a.stats"));
  auto lock = s->lock("k", 0ms);
  ASSERT_TRUE(lock.held());
  EXPECT_EQ(files_in(moved + "/v1/locks"), std::vector<std::string>{"k.lock"});
  EXPECT_TRUE(files_in(t.cache() + "/v1/locks").empty());
  lock.release();
  EXPECT_TRUE(exists(t.cache() + "/v1/entries/k.ljc"));  // never touched, never quarantined
  EXPECT_TRUE(s.errors.empty());
}

TEST(DiskStoreDir, AParentOthersCanWriteWithoutTheStickyBitIsRefused) {
  TempDir t;
  for (mode_t mode : {0777, 0770, 0722}) {
    std::string team = t.path() + "/team" + std::to_string(mode);
    ASSERT_EQ(::mkdir(team.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(team.c_str(), mode), 0);
    RecordingStore s(opts(team + "/cache"));
    EXPECT_FALSE(s.store) << std::oct << mode;
    EXPECT_NE(s.warning.find(team + " is writable by group or others without the sticky bit"), std::string::npos)
        << s.warning;
    EXPECT_EQ(s.warning.find('\n'), std::string::npos) << s.warning;
  }
  // Further up counts as much as the parent.
  std::string shared = t.path() + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  ASSERT_EQ(::mkdir((shared + "/me").c_str(), 0700), 0);
  RecordingStore deep(opts(shared + "/me/x/cache"));
  EXPECT_FALSE(deep.store);
  EXPECT_NE(deep.warning.find(shared + " is writable"), std::string::npos) << deep.warning;
  // So does the directory a symlink leads to, whoever may write the link's own.
  std::string link = t.path() + "/link";
  ASSERT_EQ(::symlink((shared + "/me").c_str(), link.c_str()), 0);
  RecordingStore linked(opts(link + "/cache"));
  EXPECT_FALSE(linked.store);
  EXPECT_NE(linked.warning.find(shared + " is writable"), std::string::npos) << linked.warning;

  // With the sticky bit (like /tmp) others cannot rename what is not theirs.
  std::string sticky = t.path() + "/sticky";
  ASSERT_EQ(::mkdir(sticky.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  RecordingStore ok(opts(sticky + "/cache"));
  EXPECT_TRUE(ok.store) << ok.warning;
}

TEST(DiskStoreDir, AParentOwnedByAnotherUserIsRefused) {
  TempDir t;
  std::string theirs = t.path() + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((theirs + "/cache").c_str(), 0700), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    RecordingStore s(opts(theirs + "/cache"));
    EXPECT_FALSE(s.store);
    EXPECT_NE(s.warning.find(theirs + " is owned by uid 65534"), std::string::npos) << s.warning;
  } else {
    // Nothing here can be another user's: every ancestor is root's or ours.
    RecordingStore s(opts(theirs + "/cache"));
    EXPECT_TRUE(s.store) << s.warning;
  }
}

TEST(DiskStoreDir, AnEntriesDirectoryLoosenedAfterOpenIsNotRead) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s->put("a", kManifest, "p"));
  ASSERT_EQ(::chmod((t.cache() + "/v1/entries").c_str(), 0777), 0);
  EXPECT_FALSE(s->get("a", nullptr).has_value());
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].first, DiskError::Permission);
  EXPECT_NE(s.errors[0].second.find("writable by group or others"), std::string::npos) << s.errors[0].second;
  EXPECT_TRUE(exists(s.entry("a")));  // not moved: it may be fine, it is just not trusted
}

TEST(DiskStoreDir, LockFilesLiveOnlyWhileHeld) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  std::string locks = s->root() + "/locks";
  for (int i = 0; i < 50; ++i) {
    auto lock = s->lock("k" + std::to_string(i), 0ms);
    ASSERT_TRUE(lock.held());
    EXPECT_EQ(files_in(locks).size(), 1u);
  }
  EXPECT_TRUE(files_in(locks).empty());
  // One a killed holder left (the kernel released its lock) goes at the next
  // open; one held now stays, and stays exclusive.
  write_file(locks + "/dead.lock", "");
  auto held = s->lock("live", 0ms);
  ASSERT_TRUE(held.held());
  RecordingStore again(opts(t.cache()));
  ASSERT_TRUE(again.store);
  EXPECT_EQ(files_in(locks), std::vector<std::string>{"live.lock"});
  EXPECT_FALSE(again->lock("live", 20ms).held());
  // The same sweep by path, for a tool that holds no store.
  write_file(locks + "/dead.lock", "");
  EXPECT_EQ(FileLock::remove_unheld(locks), 1u);
  EXPECT_EQ(files_in(locks), std::vector<std::string>{"live.lock"});
  held.release();
  EXPECT_TRUE(again->lock("live", 0ms).held());
}

TEST(DiskStoreDir, RemovedLockFilesNeverLetTwoProcessesIn) {
  TempDir t;
  ASSERT_TRUE(DiskStore::open(opts(t.cache()), nullptr));
  std::string inside = t.path() + "/inside";  // exists exactly while someone holds the lock
  std::vector<pid_t> kids;
  for (int c = 0; c < 4; ++c)
    kids.push_back(spawn([&] {
      auto store = DiskStore::open(opts(t.cache()), nullptr);
      for (int i = 0; i < 300; ++i) {
        auto lock = store->lock("k", 10s);
        if (!lock) return 10;
        int fd = ::open(inside.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
        if (fd < 0) return 11;  // another process is inside too
        ::close(fd);
        if (i % 16 == 0) store->cleanup();  // sweeps lock files while others wait on them
        ::unlink(inside.c_str());
      }
      return 0;
    }));
  for (pid_t k : kids) EXPECT_EQ(wait_for(k), 0) << "11: two holders at once";
  EXPECT_TRUE(files_in(t.cache() + "/v1/locks").empty());
}

TEST(DiskStoreDir, AFullDiskEvictsTheOldestAndTriesAgain) {
  // A 256 KiB tmpfs in a private mount namespace, which vanishes with the child.
  TempDir t;
  int rc = wait_for(spawn([&] {
    if (::unshare(CLONE_NEWNS) != 0) return 77;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (::mount("tmpfs", t.path().c_str(), "tmpfs", 0, "size=256k,mode=0700") != 0) return 77;
    RecordingStore s(opts(t.cache()));  // a budget far above the disk
    if (!s.store) return 10;
    std::string payload = payload_of(60 * 1024, 3);
    int written = 0;
    for (const char* k : {"a", "b", "c", "d", "e", "f", "g"}) {
      if (!s->put(k, kManifest, payload)) return 20 + written;  // 2x: the put after x entries failed
      ++written;
      std::this_thread::sleep_for(20ms);  // distinct mtimes: a is the oldest
    }
    if (!s.errors.empty()) return 11;
    if (exists(s.entry("a")) || !exists(s.entry("g"))) return 12;
    return 0;
  }));
  if (rc == 77) GTEST_SKIP() << "cannot mount a tmpfs here (needs CAP_SYS_ADMIN)";
  EXPECT_EQ(rc, 0) << "see the return codes in the child";
}
