// The bytes of one on-disk cache entry (`<key>.ljc`), format version 1.
//
// Kept free of libtorch and LLVM so that an inspection tool can read entries
// with nothing but this file, xxHash and (to check signatures) libcrypto.
// All integers are little-endian.
//
//   offset  size  field
//   0       8     magic "LAZYJITC"
//   8       4     u32 format version (1)
//   12      4     u32 M = manifest length in bytes
//   16      8     u64 P = payload length in bytes
//   24      M     manifest: UTF-8 JSON object (the caller's, plus the two fields below)
//   24+M    P     payload: opaque bytes (for the runtime, a serialized program)
//   24+M+P  8     u64 XXH64 (seed 0) of manifest+payload
//   32+M+P  1     u8 signed flag: 0 or 1
//   33+M+P  32    only if signed: HMAC-SHA256 over bytes [0, 24+M+P) keyed by the secret
//
// The file is exactly 33+M+P bytes unsigned, 65+M+P signed; anything else is
// corrupt. The manifest always holds "key" (the key the entry was stored
// under), "payload_bytes" (= P) and "payload_xxh64" (16 lower-case hex digits,
// XXH64 seed 0 of the payload alone), so a reader can check sizes from the
// JSON alone.
//
// The checksum catches damage; only the HMAC proves who wrote the entry. The
// signed flag and the checksum are outside the HMAC: flipping the flag makes an
// entry "unsigned", which a reader holding a secret refuses anyway.
//
// Signed means bound: the key, and whatever else the caller's manifest says
// (its target fingerprint, its format), are inside what both the checksum and
// the HMAC cover, and decode() compares the key with the one the reader looked
// up. A valid entry copied or renamed under another key (a file moved on disk,
// a value renamed in Redis, a record relabelled in an archive) is WrongKey,
// with or without a secret: renaming needs no secret, so the name proves
// nothing. What the caller expects of the rest of the manifest (target,
// version) it checks on the decoded manifest before using the payload.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>

#include "cache/disk_error.h"

namespace lazyjit::cache::entry_file {

inline constexpr char kMagic[8] = {'L', 'A', 'Z', 'Y', 'J', 'I', 'T', 'C'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 24;
inline constexpr size_t kChecksumBytes = 8;
inline constexpr size_t kHmacBytes = 32;

// Returns the caller's manifest (a JSON object, as text) with "key",
// "payload_bytes" and "payload_xxh64" set for `key` and `payload`. Throws
// std::invalid_argument if `manifest_json` is not a JSON object: that is the
// caller's bug, not damage.
std::string complete_manifest(std::string_view manifest_json, std::string_view key, std::string_view payload);

// The whole file. `manifest_json` must already be complete (see above); the
// entry is signed iff `secret` is not empty.
std::string encode(std::string_view manifest_json, std::string_view payload, std::string_view secret);

struct Decoded {
  std::string_view manifest;  // views into the decoded file's bytes
  std::string_view payload;
  bool is_signed = false;
};
struct DecodeError {
  DiskError kind;
  std::string message;
};

// Checks, in order: magic, version (Foreign), lengths against the file size,
// checksum, signed flag, signature (only when `secret` is set: an unsigned
// entry is Unsigned, a mismatch BadSignature; without a secret a signature is
// not checked), that the manifest is a JSON object whose payload fields match
// the payload, and that its "key" is `key` (WrongKey).
std::variant<Decoded, DecodeError> decode(std::string_view file, std::string_view secret, std::string_view key);

// An entry file that decode() accepted for its key and whose manifest the
// reader's `expect` accepted: what a tier hands on to be loaded. Only verify()
// makes one, so holding one proves the checks ran for this key.
class VerifiedEntry {
 public:
  const std::string& key() const { return key_; }
  const std::string& file() const { return file_; }  // the whole entry file, as read
  std::string_view manifest() const { return std::string_view(file_).substr(manifest_at_, manifest_size_); }
  std::string_view payload() const { return std::string_view(file_).substr(payload_at_, payload_size_); }

 private:
  friend std::variant<VerifiedEntry, DecodeError> verify(std::string file, std::string_view secret,
                                                         std::string_view key,
                                                         const std::function<bool(const std::string&)>& expect);
  VerifiedEntry() = default;
  std::string key_, file_;
  size_t manifest_at_ = 0, manifest_size_ = 0, payload_at_ = 0, payload_size_ = 0;
};

// decode(file, secret, key), then `expect` (if set) on the manifest: false is
// Foreign ("built for another target or version").
std::variant<VerifiedEntry, DecodeError> verify(std::string file, std::string_view secret, std::string_view key,
                                                const std::function<bool(const std::string&)>& expect);

// XXH64, seed 0.
uint64_t xxh64(std::string_view a, std::string_view b = {});
// Raw 32-byte HMAC-SHA256 and its lower-case hex form.
std::string hmac_sha256(std::string_view secret, std::string_view data);
std::string hmac_sha256_hex(std::string_view secret, std::string_view data);

}  // namespace lazyjit::cache::entry_file
