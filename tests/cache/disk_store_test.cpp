// DiskStore in one process: round trips, every kind of damage and refusal,
// directory safety, read-only directories, eviction, cleanup, a full disk.
#include "cache/disk_store.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache/entry_file.h"
#include "tests/cache/disk_test_util.h"

using namespace lazyjit::cache;
using namespace lazyjit::cache::testing;

namespace {

DiskStoreOptions opts(const std::string& dir, std::string secret = "", uint64_t max_bytes = 2ull << 30) {
  return DiskStoreOptions{dir, max_bytes, std::move(secret)};
}

std::string payload_of(size_t n, char seed) {
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(seed + i * 31);
  return p;
}

const char* kManifest = R"({"target":"x86_64-avx2","created":1700000000.5})";

// The store's quarantine files for `key`.
std::vector<std::string> quarantined(RecordingStore& s, const std::string& key) {
  std::vector<std::string> out;
  for (auto& n : files_in(s->root() + "/quarantine"))
    if (n.rfind(key + ".", 0) == 0) out.push_back(n);
  return out;
}

// Expects `get(key)` to miss with exactly one error of `kind`, the file moved to quarantine.
void expect_refused(RecordingStore& s, const std::string& key, DiskError kind, const std::string& what) {
  s.errors.clear();
  size_t before = quarantined(s, key).size();
  EXPECT_FALSE(s->get(key, nullptr).has_value()) << what;
  ASSERT_EQ(s.errors.size(), 1u) << what;
  EXPECT_EQ(s.errors[0].first, kind) << what << ": " << s.errors[0].second;
  EXPECT_FALSE(exists(s.entry(key))) << what;
  EXPECT_EQ(quarantined(s, key).size(), before + 1) << what;
}

}  // namespace

TEST(DiskStore, RoundTripReturnsManifestAndPayload) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s.store) << s.warning;
  std::string payload = payload_of(10000, 3);
  ASSERT_TRUE(s->put("k1", kManifest, payload));
  auto got = s->get("k1", nullptr);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload(), payload);
  auto m = nlohmann::json::parse(got->manifest());
  EXPECT_EQ(m["target"], "x86_64-avx2");
  EXPECT_EQ(m["payload_bytes"], 10000);
  EXPECT_TRUE(s.errors.empty());
  struct stat st;
  ASSERT_EQ(::stat(s.entry("k1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(s->root().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(files_in(s->root() + "/tmp").empty());
}

TEST(DiskStore, ASecondStoreReadsWhatTheFirstWrote) {
  TempDir t;
  RecordingStore a(opts(t.cache()));
  ASSERT_TRUE(a->put("shared", kManifest, "bytes"));
  RecordingStore b(opts(t.cache()));
  auto got = b->get("shared", nullptr);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload(), "bytes");
}

TEST(DiskStore, MissingKeyIsAPlainMiss) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  EXPECT_FALSE(s->get("nothing", nullptr).has_value());
  EXPECT_TRUE(s.errors.empty());
}

TEST(DiskStore, PutReplacesAnEntry) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s->put("k", kManifest, "old"));
  ASSERT_TRUE(s->put("k", kManifest, "new"));
  EXPECT_EQ(s->get("k", nullptr)->payload(), "new");
}

TEST(DiskStore, TruncatedAndZeroByteEntriesAreQuarantinedAsCorrupt) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s->put("k", kManifest, payload_of(1000, 1)));
  std::string good = read_file(s.entry("k"));
  for (size_t len : {size_t(0), size_t(1), size_t(7), size_t(23), size_t(24), size_t(100), good.size() / 2,
                     good.size() - 9, good.size() - 1}) {
    write_file(s.entry("k"), good.substr(0, len));
    expect_refused(s, "k", DiskError::Corrupt, "truncated to " + std::to_string(len));
  }
  write_file(s.entry("k"), good + "x");
  expect_refused(s, "k", DiskError::Corrupt, "trailing byte");
}

TEST(DiskStore, SingleBitFlipsAreQuarantinedAsCorrupt) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  std::string payload = payload_of(500, 9);
  ASSERT_TRUE(s->put("k", kManifest, payload));
  std::string good = read_file(s.entry("k"));
  size_t manifest_len = good.size() - 24 - payload.size() - 9;
  struct Spot {
    size_t at;
    const char* where;
  };
  for (Spot spot : {Spot{0, "magic"}, Spot{12, "manifest length"}, Spot{16, "payload length"},
                    Spot{24 + 3, "manifest"}, Spot{24 + manifest_len + 250, "payload"},
                    Spot{good.size() - 9 + 4, "checksum"}, Spot{good.size() - 1, "signed flag"}})
    for (int bit : {0, 7}) {
      std::string bad = good;
      bad[spot.at] ^= static_cast<char>(1 << bit);
      write_file(s.entry("k"), bad);
      expect_refused(s, "k", DiskError::Corrupt, std::string("bit ") + std::to_string(bit) + " of " + spot.where);
    }
}

TEST(DiskStore, AnotherFormatVersionIsForeign) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s->put("k", kManifest, "p"));
  std::string f = read_file(s.entry("k"));
  f[8] = 2;  // u32 version, little-endian
  write_file(s.entry("k"), f);
  expect_refused(s, "k", DiskError::Foreign, "version 2");
}

TEST(DiskStore, ExpectRefusingTheManifestIsForeign) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s->put("k", kManifest, "p"));
  std::string seen;
  s.errors.clear();
  EXPECT_FALSE(s->get("k", [&](const std::string& m) {
                  seen = m;
                  return nlohmann::json::parse(m)["target"] == "aarch64";
                }).has_value());
  EXPECT_NE(seen.find("x86_64-avx2"), std::string::npos);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].first, DiskError::Foreign);
  EXPECT_FALSE(exists(s.entry("k")));
  EXPECT_EQ(quarantined(s, "k").size(), 1u);
  EXPECT_NE(quarantined(s, "k")[0].find(".foreign."), std::string::npos);
}

TEST(DiskStore, WithASecretOnlyEntriesSignedByItAreAccepted) {
  TempDir t;
  {
    RecordingStore unsigned_writer(opts(t.cache()));
    ASSERT_TRUE(unsigned_writer->put("plain", kManifest, "p"));
    RecordingStore other_writer(opts(t.cache(), "another secret"));
    ASSERT_TRUE(other_writer->put("other", kManifest, "p"));
    RecordingStore writer(opts(t.cache(), "our secret"));
    ASSERT_TRUE(writer->put("ours", kManifest, "p"));
  }
  RecordingStore s(opts(t.cache(), "our secret"));
  auto got = s->get("ours", nullptr);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload(), "p");
  EXPECT_TRUE(s.errors.empty());
  expect_refused(s, "plain", DiskError::Unsigned, "unsigned entry");
  expect_refused(s, "other", DiskError::BadSignature, "wrong secret");

  // A flipped signature byte: the checksum still holds, the signature does not.
  ASSERT_TRUE(s->put("flip", kManifest, "p"));
  std::string f = read_file(s.entry("flip"));
  f[f.size() - 5] ^= 1;
  write_file(s.entry("flip"), f);
  expect_refused(s, "flip", DiskError::BadSignature, "flipped signature");
}

TEST(DiskStore, AnEntryIsValidOnlyUnderItsOwnKey) {
  for (const char* secret : {"", "our secret"}) {
    TempDir t;
    RecordingStore s(opts(t.cache(), secret));
    ASSERT_TRUE(s.store) << s.warning;
    ASSERT_TRUE(s->put("a-1", kManifest, "program a"));
    ASSERT_TRUE(s->put("b-2", kManifest, "program b"));
    std::string a = read_file(s.entry("a-1")), b = read_file(s.entry("b-2"));
    write_file(s.entry("a-1"), b);  // swapped: each file intact and signed, under the other's name
    write_file(s.entry("b-2"), a);
    expect_refused(s, "a-1", DiskError::WrongKey, std::string("swapped, secret '") + secret + "'");
    expect_refused(s, "b-2", DiskError::WrongKey, std::string("swapped, secret '") + secret + "'");
    EXPECT_NE(s.errors[0].second.find("stored for key a-1"), std::string::npos) << s.errors[0].second;
  }
}

TEST(DiskStore, WhatIsNotARegularFileIsRefusedWithoutBlocking) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s.store) << s.warning;
  ASSERT_TRUE(s->put("k", kManifest, "payload"));
  // A FIFO nobody writes to, where an entry, its stats and its lock belong:
  // opening any of them for reading would block forever.
  ASSERT_EQ(::unlink(s.entry("k").c_str()), 0);
  ASSERT_EQ(::mkfifo(s.entry("k").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((s->root() + "/entries/k.stats").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((s->root() + "/locks/k.lock").c_str(), 0600), 0);
  s.errors.clear();
  EXPECT_FALSE(s->get("k", nullptr).has_value());
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].first, DiskError::NotAFile) << s.errors[0].second;
  EXPECT_NE(s.errors[0].second.find("a FIFO"), std::string::npos) << s.errors[0].second;
  s->record_hit("k");
  s->evict();
  EXPECT_FALSE(s->lock("k", std::chrono::milliseconds(50)).held());
  // A symlink to a good entry is refused too (never followed), then replaced by a put.
  ASSERT_TRUE(s->put("real", kManifest, "payload"));
  ASSERT_EQ(::unlink(s.entry("k").c_str()), 0);
  ASSERT_EQ(::symlink(s.entry("real").c_str(), s.entry("k").c_str()), 0);
  s.errors.clear();
  EXPECT_FALSE(s->get("k", nullptr).has_value());
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].first, DiskError::NotAFile) << s.errors[0].second;
  ASSERT_TRUE(s->put("k", kManifest, "payload"));
  EXPECT_TRUE(s->get("k", nullptr).has_value());
}

TEST(DiskStore, PutFileWritesAnEntryFileAsItIsOnlyWhenItChecksOut) {
  TempDir t;
  RecordingStore s(opts(t.cache(), "our secret"));
  ASSERT_TRUE(s.store) << s.warning;
  std::string file = s->encode("k", kManifest, "payload");
  ASSERT_TRUE(s->put_file("k", file));
  EXPECT_EQ(read_file(s.entry("k")), file);  // byte for byte: the signature carried over
  auto got = s->get("k", nullptr);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload(), "payload");
  EXPECT_TRUE(s.errors.empty());
  // Signed by another secret, unsigned, damaged: reported, never written.
  RecordingStore other(opts(t.path() + "/other", "another secret"));
  RecordingStore plain(opts(t.path() + "/plain"));
  std::string damaged = file;
  damaged[damaged.size() / 2] ^= 4;
  const std::pair<std::string, DiskError> bad[] = {{other->encode("bad", kManifest, "payload"), DiskError::BadSignature},
                                                   {plain->encode("bad", kManifest, "payload"), DiskError::Unsigned},
                                                   {damaged, DiskError::Corrupt},
                                                   {file, DiskError::WrongKey}};  // k's entry, offered as "bad"
  for (const auto& [bytes, kind] : bad) {
    s.errors.clear();
    EXPECT_FALSE(s->put_file("bad", bytes));
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_EQ(s.errors[0].first, kind) << s.errors[0].second;
    EXPECT_FALSE(exists(s.entry("bad")));
  }
}

TEST(DiskStore, LooseDirectoryIsRefusedWithAWarningNamingIt) {
  TempDir t;
  ASSERT_EQ(::mkdir(t.cache().c_str(), 0700), 0);
  ASSERT_EQ(::chmod(t.cache().c_str(), 0777), 0);
  RecordingStore s(opts(t.cache()));
  EXPECT_FALSE(s.store);
  EXPECT_NE(s.warning.find(t.cache()), std::string::npos) << s.warning;
  EXPECT_NE(s.warning.find("writable by group or others"), std::string::npos) << s.warning;

  // A loose directory inside the store is refused the same way.
  ASSERT_EQ(::chmod(t.cache().c_str(), 0700), 0);
  ASSERT_TRUE(RecordingStore(opts(t.cache())).store);
  std::string entries = t.cache() + "/v1/entries";
  ASSERT_EQ(::chmod(entries.c_str(), 0770), 0);
  RecordingStore s2(opts(t.cache()));
  EXPECT_FALSE(s2.store);
  EXPECT_NE(s2.warning.find(entries), std::string::npos) << s2.warning;
}

TEST(DiskStore, DirectoryOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  TempDir t;
  ASSERT_EQ(::mkdir(t.cache().c_str(), 0700), 0);
  ASSERT_EQ(::chown(t.cache().c_str(), 65534, 65534), 0);
  RecordingStore s(opts(t.cache()));
  EXPECT_FALSE(s.store);
  EXPECT_NE(s.warning.find("owned by uid 65534"), std::string::npos) << s.warning;
}

TEST(DiskStore, ReadOnlyDirectoryReadsButReportsPutsAsReadOnly) {
  TempDir t;
  {
    RecordingStore writer(opts(t.cache()));
    ASSERT_TRUE(writer->put("k", kManifest, "payload"));
  }
  // Root writes through mode 0500, so as root the check runs in a child that
  // becomes an ordinary user owning the directory (the store must be its own).
  bool as_root = ::geteuid() == 0;
  const uid_t user = 65534;
  if (as_root) {
    std::error_code ec;
    ::chown(t.path().c_str(), user, user);
    for (auto& e : std::filesystem::recursive_directory_iterator(t.path(), ec)) ::lchown(e.path().c_str(), user, user);
  }
  int rc = wait_for(spawn([&] {
    if (as_root && (::setgid(user) != 0 || ::setuid(user) != 0)) return 77;
    for (const char* d : {"", "/v1", "/v1/entries", "/v1/locks", "/v1/tmp", "/v1/quarantine"})
      if (::chmod((t.cache() + d).c_str(), 0500) != 0) return 10;
    RecordingStore s(opts(t.cache()));
    if (!s.store) return 11;
    if (!s->read_only()) return 12;
    auto got = s->get("k", nullptr);
    if (!got || got->payload() != "payload") return 13;
    if (s->put("k2", kManifest, "x")) return 14;
    if (s.errors.size() != 1 || s.errors[0].first != DiskError::ReadOnly) return 15;
    if (s->lock("k", std::chrono::milliseconds(10))) return 16;
    return 0;
  }));
  if (rc == 77) GTEST_SKIP() << "running as root without the right to drop to uid 65534";
  EXPECT_EQ(rc, 0) << "see the return codes in the child";
}

TEST(DiskStore, EvictionDropsLeastRecentlyUsedFirst) {
  TempDir t;
  std::string payload = payload_of(1000, 5);
  uint64_t entry_bytes;
  {
    RecordingStore probe(opts(t.path() + "/probe"));
    probe->put("a", kManifest, payload);
    entry_bytes = read_file(probe.entry("a")).size();
  }
  RecordingStore s(opts(t.cache(), "", 3 * entry_bytes + 10));
  // File times are only as fine as the kernel's clock tick: space the steps out.
  auto step = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
  for (const char* k : {"a", "b", "c"}) {
    ASSERT_TRUE(s->put(k, kManifest, payload));
    step();
  }
  s->record_hit("c");  // c gets a .stats file, which eviction must take along
  s->record_hit("a");  // a is now more recent than b and c
  step();
  ASSERT_TRUE(s->put("d", kManifest, payload));
  EXPECT_TRUE(exists(s.entry("a")));
  EXPECT_FALSE(exists(s.entry("b")));
  EXPECT_TRUE(exists(s.entry("c")));
  EXPECT_TRUE(exists(s.entry("d")));
  step();
  ASSERT_TRUE(s->put("e", kManifest, payload));
  EXPECT_FALSE(exists(s.entry("c")));
  EXPECT_FALSE(exists(s->root() + "/entries/c.stats"));
  uint64_t total = 0;
  for (auto& n : files_in(s->root() + "/entries"))
    if (n.size() > 4 && n.substr(n.size() - 4) == ".ljc") total += read_file(s->root() + "/entries/" + n).size();
  EXPECT_LE(total, 3 * entry_bytes + 10);
  EXPECT_TRUE(s.errors.empty());
}

TEST(DiskStore, EntryLargerThanTheBudgetIsFull) {
  TempDir t;
  RecordingStore s(opts(t.cache(), "", 100));
  EXPECT_FALSE(s->put("big", kManifest, payload_of(1000, 0)));
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].first, DiskError::Full);
  EXPECT_FALSE(exists(s.entry("big")));
}

TEST(DiskStore, RecordHitCountsHitsAndStampsLastUse) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ASSERT_TRUE(s->put("k", kManifest, "p"));
  s->record_hit("k");
  s->record_hit("k");
  auto stats = nlohmann::json::parse(read_file(s->root() + "/entries/k.stats"));
  EXPECT_EQ(stats["hits"], 2);
  EXPECT_NEAR(stats["last_used"].get<double>(), double(::time(nullptr)), 5.0);
  s->record_hit("gone");  // no entry: no stats file either
  EXPECT_FALSE(exists(s->root() + "/entries/gone.stats"));
  EXPECT_TRUE(files_in(s->root() + "/tmp").empty());
}

TEST(DiskStore, CleanupRemovesLeftoversButNotLiveWriters) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  std::string tmp = s->root() + "/tmp/", q = s->root() + "/quarantine/";
  write_file(tmp + "k.999999999.0123.tmp", "dead writer");  // no such pid
  write_file(tmp + "k." + std::to_string(::getpid()) + ".0123.tmp", "live writer");
  write_file(tmp + "k.old." + std::to_string(::getpid()) + ".0123.tmp", "live but old");
  write_file(q + "k.corrupt.1.2.ljc", "old");
  write_file(q + "k.corrupt.3.4.ljc", "recent");
  auto age = [](const std::string& path, int seconds) {
    struct timespec times[2] = {{::time(nullptr) - seconds, 0}, {::time(nullptr) - seconds, 0}};
    ::utimensat(AT_FDCWD, path.c_str(), times, 0);
  };
  age(tmp + "k.old." + std::to_string(::getpid()) + ".0123.tmp", 120);
  age(q + "k.corrupt.1.2.ljc", 2 * 24 * 3600);
  s->cleanup();
  EXPECT_EQ(files_in(s->root() + "/tmp"), std::vector<std::string>{"k." + std::to_string(::getpid()) + ".0123.tmp"});
  EXPECT_EQ(files_in(s->root() + "/quarantine"), std::vector<std::string>{"k.corrupt.3.4.ljc"});
}

TEST(DiskStore, DiskFullHookReportsFullAndLeavesNoTmp) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  ::setenv("LAZYJIT_TEST_DISK_FULL", "1", 1);
  bool ok = s->put("k", kManifest, payload_of(4000, 2));
  ::unsetenv("LAZYJIT_TEST_DISK_FULL");
  EXPECT_FALSE(ok);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].first, DiskError::Full) << s.errors[0].second;
  EXPECT_FALSE(exists(s.entry("k")));
  EXPECT_TRUE(files_in(s->root() + "/tmp").empty());
}

TEST(DiskStore, RealFullFileSystemReportsFull) {
  // A 64 KiB tmpfs in a private mount namespace, which vanishes with the child.
  TempDir t;
  int rc = wait_for(spawn([&] {
    if (::unshare(CLONE_NEWNS) != 0) return 77;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (::mount("tmpfs", t.path().c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0) return 77;
    RecordingStore s(opts(t.cache()));
    if (!s.store) return 10;
    if (s->put("big", kManifest, payload_of(200 * 1024, 1))) return 11;
    if (s.errors.size() != 1 || s.errors[0].first != DiskError::Full) return 12;
    if (exists(s.entry("big")) || !files_in(s->root() + "/tmp").empty()) return 13;
    if (!s->put("small", kManifest, "fits")) return 14;  // the failed put freed its space
    return 0;
  }));
  if (rc == 77) GTEST_SKIP() << "cannot mount a tmpfs here (needs CAP_SYS_ADMIN); see DiskFullHookReportsFullAndLeavesNoTmp";
  EXPECT_EQ(rc, 0) << "see the return codes in the child";
}

TEST(DiskStore, BadKeysAndManifestsThrow) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  for (const char* key : {"", "../escape", "a/b", ".hidden", "sp ace"})
    EXPECT_THROW(s->get(key, nullptr), std::invalid_argument) << key;
  EXPECT_THROW(s->put("k", "[]", "p"), std::invalid_argument);
  EXPECT_NO_THROW(s->get("0123abcdef-0000000000000001-deadbeef", nullptr));
}

TEST(DiskStore, KeyLockExcludesASecondHolderUntilReleased) {
  TempDir t;
  RecordingStore s(opts(t.cache()));
  auto first = s->lock("k", std::chrono::milliseconds(0));
  ASSERT_TRUE(first.held());
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(s->lock("k", std::chrono::milliseconds(50)).held());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_TRUE(s->lock("other", std::chrono::milliseconds(0)).held());
  first.release();
  EXPECT_TRUE(s->lock("k", std::chrono::milliseconds(0)).held());
}
