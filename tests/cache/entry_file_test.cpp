// The entry file format: layout, checksums, signatures, the manifest's payload fields.
#include "cache/entry_file.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using namespace lazyjit::cache;

namespace {
uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}
}  // namespace

TEST(DiskEntryFile, LayoutIsTheDocumentedOne) {
  std::string manifest = entry_file::complete_manifest(R"({"target":"x86"})", "k", "payload!");
  std::string f = entry_file::encode(manifest, "payload!", "");
  EXPECT_EQ(f.substr(0, 8), "LAZYJITC");
  EXPECT_EQ(le(f, 8, 4), 1u);
  EXPECT_EQ(le(f, 12, 4), manifest.size());
  EXPECT_EQ(le(f, 16, 8), 8u);
  EXPECT_EQ(f.substr(24, manifest.size()), manifest);
  EXPECT_EQ(f.substr(24 + manifest.size(), 8), "payload!");
  EXPECT_EQ(le(f, 32 + manifest.size(), 8), entry_file::xxh64(manifest, "payload!"));
  EXPECT_EQ(f[40 + manifest.size()], 0);  // unsigned
  EXPECT_EQ(f.size(), 41 + manifest.size());

  std::string s = entry_file::encode(manifest, "payload!", "secret");
  EXPECT_EQ(s[40 + manifest.size()], 1);
  EXPECT_EQ(s.size(), 41 + manifest.size() + 32);
  EXPECT_EQ(s.substr(41 + manifest.size()), entry_file::hmac_sha256("secret", s.substr(0, 32 + manifest.size())));
}

TEST(DiskEntryFile, ManifestGainsOnlyTheKeyAndPayloadFields) {
  auto m = nlohmann::json::parse(entry_file::complete_manifest(R"({"a":1,"created":12.5})", "k-1", "abc"));
  EXPECT_EQ(m.size(), 5u);
  EXPECT_EQ(m["key"], "k-1");
  EXPECT_EQ(m["a"], 1);
  EXPECT_EQ(m["created"], 12.5);
  EXPECT_EQ(m["payload_bytes"], 3);
  EXPECT_EQ(m["payload_xxh64"].get<std::string>().size(), 16u);
  EXPECT_THROW(entry_file::complete_manifest("[1,2]", "k", "abc"), std::invalid_argument);
  EXPECT_THROW(entry_file::complete_manifest("{not json", "k", "abc"), std::invalid_argument);
}

TEST(DiskEntryFile, ChecksumIsXxh64AndMacIsHmacSha256) {
  // Reference values, so a reader in another language can trust the header's words.
  EXPECT_EQ(entry_file::xxh64(""), 0xef46db3751d8e999ull);  // XXH64 of nothing, seed 0
  EXPECT_EQ(entry_file::xxh64("ab", "c"), entry_file::xxh64("abc"));
  // RFC 4231, test case 2.
  EXPECT_EQ(entry_file::hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(DiskEntryFile, DecodeReturnsTheManifestAndPayload) {
  std::string manifest = entry_file::complete_manifest("{}", "key", std::string("\0\1\2", 3));
  std::string f = entry_file::encode(manifest, std::string("\0\1\2", 3), "k");
  auto d = entry_file::decode(f, "k", "key");
  ASSERT_TRUE(std::holds_alternative<entry_file::Decoded>(d));
  EXPECT_EQ(std::get<entry_file::Decoded>(d).manifest, manifest);
  EXPECT_EQ(std::get<entry_file::Decoded>(d).payload, std::string("\0\1\2", 3));
  EXPECT_TRUE(std::get<entry_file::Decoded>(d).is_signed);
  // Without a secret a signature is not checked, but the checksum still is.
  EXPECT_TRUE(std::holds_alternative<entry_file::Decoded>(entry_file::decode(f, "", "key")));
}

TEST(DiskEntryFile, AValidEntryIsRefusedUnderAnotherKey) {
  // Signed, intact, and looked up under a name it was not stored for: a file
  // renamed on disk or a value renamed in Redis (which needs no secret).
  for (const char* secret : {"", "s"}) {
    std::string manifest = entry_file::complete_manifest(R"({"kind":"program"})", "a-1", "payload");
    std::string f = entry_file::encode(manifest, "payload", secret);
    EXPECT_TRUE(std::holds_alternative<entry_file::Decoded>(entry_file::decode(f, secret, "a-1")));
    auto d = entry_file::decode(f, secret, "b-2");
    ASSERT_TRUE(std::holds_alternative<entry_file::DecodeError>(d)) << secret;
    EXPECT_EQ(std::get<entry_file::DecodeError>(d).kind, DiskError::WrongKey);
    EXPECT_NE(std::get<entry_file::DecodeError>(d).message.find("a-1"), std::string::npos);
    // A manifest that names no key is bound to none.
    std::string keyless = R"({"payload_bytes":7,"payload_xxh64":")" +
                          nlohmann::json::parse(manifest)["payload_xxh64"].get<std::string>() + R"("})";
    auto k = entry_file::decode(entry_file::encode(keyless, "payload", secret), secret, "a-1");
    ASSERT_TRUE(std::holds_alternative<entry_file::DecodeError>(k));
    EXPECT_EQ(std::get<entry_file::DecodeError>(k).kind, DiskError::WrongKey);
  }
}

TEST(DiskEntryFile, VerifyHandsOnOnlyWhatTheCallerExpects) {
  std::string manifest = entry_file::complete_manifest(R"({"target":"x86"})", "a-1", "payload");
  std::string f = entry_file::encode(manifest, "payload", "s");
  auto ok = entry_file::verify(f, "s", "a-1", [](const std::string& m) { return m.find("x86") != std::string::npos; });
  ASSERT_TRUE(std::holds_alternative<entry_file::VerifiedEntry>(ok));
  const auto& e = std::get<entry_file::VerifiedEntry>(ok);
  EXPECT_EQ(e.key(), "a-1");
  EXPECT_EQ(e.payload(), "payload");
  EXPECT_EQ(e.manifest(), manifest);
  EXPECT_EQ(e.file(), f);
  auto foreign = entry_file::verify(f, "s", "a-1", [](const std::string&) { return false; });
  ASSERT_TRUE(std::holds_alternative<entry_file::DecodeError>(foreign));
  EXPECT_EQ(std::get<entry_file::DecodeError>(foreign).kind, DiskError::Foreign);
  auto renamed = entry_file::verify(f, "s", "b-2", nullptr);
  ASSERT_TRUE(std::holds_alternative<entry_file::DecodeError>(renamed));
  EXPECT_EQ(std::get<entry_file::DecodeError>(renamed).kind, DiskError::WrongKey);
}

TEST(DiskEntryFile, ManifestThatDisagreesWithThePayloadIsCorrupt) {
  // A consistent checksum over a lying manifest: only the JSON check catches it.
  std::string manifest = R"({"payload_bytes":4,"payload_xxh64":"0000000000000000"})";
  auto d = entry_file::decode(entry_file::encode(manifest, "abc", ""), "", "k");
  ASSERT_TRUE(std::holds_alternative<entry_file::DecodeError>(d));
  EXPECT_EQ(std::get<entry_file::DecodeError>(d).kind, DiskError::Corrupt);
  EXPECT_NE(std::get<entry_file::DecodeError>(d).message.find("payload_bytes"), std::string::npos);
}

TEST(DiskEntryFile, ErrorKindsHaveStableNames) {
  EXPECT_STREQ(disk_error_name(DiskError::BadSignature), "bad_signature");
  EXPECT_STREQ(disk_error_name(DiskError::Full), "full");
  EXPECT_STREQ(disk_error_name(DiskError::WrongKey), "wrong_key");
  EXPECT_STREQ(disk_error_name(DiskError::NotAFile), "not_a_file");
}
