#include "cache/entry_file.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "graph_ir/hash.h"

namespace lazyjit::cache {

namespace entry_file {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

DecodeError corrupt(std::string msg) { return {DiskError::Corrupt, std::move(msg)}; }

}  // namespace

uint64_t xxh64(std::string_view a, std::string_view b) {
  ir::StreamHasher h(ir::StreamHasher::Algo::Xxh64, 0);
  h.update(a.data(), a.size());
  h.update(b.data(), b.size());
  return h.digest64();
}

std::string hmac_sha256(std::string_view secret, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len) ||
      len != kHmacBytes)
    throw std::runtime_error("HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string hmac_sha256_hex(std::string_view secret, std::string_view data) {
  std::string raw = hmac_sha256(secret, data), hex;
  static const char* digits = "0123456789abcdef";
  for (unsigned char c : raw) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  return hex;
}

std::string complete_manifest(std::string_view manifest_json, std::string_view key, std::string_view payload) {
  nlohmann::json m = nlohmann::json::parse(manifest_json, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) throw std::invalid_argument("disk cache manifest is not a JSON object");
  m["key"] = std::string(key);
  m["payload_bytes"] = payload.size();
  m["payload_xxh64"] = hex16(xxh64(payload));
  return m.dump();
}

std::string encode(std::string_view manifest, std::string_view payload, std::string_view secret) {
  if (manifest.size() > UINT32_MAX) throw std::invalid_argument("disk cache manifest over 4 GiB");
  std::string out;
  out.reserve(kHeaderBytes + manifest.size() + payload.size() + kChecksumBytes + 1 + kHmacBytes);
  out.append(kMagic, sizeof kMagic);
  put_le(out, kVersion, 4);
  put_le(out, manifest.size(), 4);
  put_le(out, payload.size(), 8);
  out.append(manifest);
  out.append(payload);
  put_le(out, xxh64(manifest, payload), 8);
  if (secret.empty()) {
    out.push_back(0);
  } else {
    std::string mac = hmac_sha256(secret, std::string_view(out).substr(0, out.size() - kChecksumBytes));
    out.push_back(1);
    out.append(mac);
  }
  return out;
}

std::variant<Decoded, DecodeError> decode(std::string_view f, std::string_view secret, std::string_view key) {
  if (f.empty()) return corrupt("zero-byte entry");
  if (f.size() < kHeaderBytes) return corrupt("truncated header (" + std::to_string(f.size()) + " bytes)");
  if (std::memcmp(f.data(), kMagic, sizeof kMagic) != 0) return corrupt("not a lazyjit cache entry (bad magic)");
  uint64_t version = get_le(f, 8, 4);
  if (version != kVersion)
    return DecodeError{DiskError::Foreign, "entry format version " + std::to_string(version) + ", this build reads " +
                                               std::to_string(kVersion)};
  uint64_t m = get_le(f, 12, 4), p = get_le(f, 16, 8);
  // Lengths come from the file: bound them by its size before adding them up.
  uint64_t body_end = kHeaderBytes + m;
  if (p > f.size() || body_end + p + kChecksumBytes + 1 > f.size())
    return corrupt("truncated: file has " + std::to_string(f.size()) + " bytes, header announces a " +
                   std::to_string(m) + "-byte manifest and a " + std::to_string(p) + "-byte payload");
  body_end += p;
  uint8_t flag = static_cast<uint8_t>(f[body_end + kChecksumBytes]);
  if (flag > 1) return corrupt("bad signed flag " + std::to_string(flag));
  size_t expected = body_end + kChecksumBytes + 1 + (flag ? kHmacBytes : 0);
  if (f.size() != expected)
    return corrupt("size " + std::to_string(f.size()) + " bytes, expected " + std::to_string(expected));

  Decoded d{f.substr(kHeaderBytes, m), f.substr(kHeaderBytes + m, p), flag == 1};
  if (get_le(f, body_end, 8) != xxh64(d.manifest, d.payload)) return corrupt("checksum mismatch");
  if (!secret.empty()) {
    if (!d.is_signed) return DecodeError{DiskError::Unsigned, "entry is not signed and a secret is set"};
    std::string mac = hmac_sha256(secret, f.substr(0, body_end));
    if (CRYPTO_memcmp(mac.data(), f.data() + body_end + kChecksumBytes + 1, kHmacBytes) != 0)
      return DecodeError{DiskError::BadSignature, "signature does not match the secret"};
  }
  nlohmann::json j = nlohmann::json::parse(d.manifest, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return corrupt("manifest is not a JSON object");
  auto bytes = j.find("payload_bytes");
  auto hash = j.find("payload_xxh64");
  if (bytes == j.end() || !bytes->is_number_unsigned() || bytes->get<uint64_t>() != p)
    return corrupt("manifest payload_bytes does not match the payload");
  if (hash == j.end() || !hash->is_string() || hash->get<std::string>() != hex16(xxh64(d.payload)))
    return corrupt("manifest payload_xxh64 does not match the payload");
  auto stored = j.find("key");
  if (stored == j.end() || !stored->is_string())
    return DecodeError{DiskError::WrongKey, "manifest names no key; looked up as " + std::string(key)};
  if (stored->get<std::string>() != key)
    return DecodeError{DiskError::WrongKey,
                       "stored for key " + stored->get<std::string>() + ", looked up as " + std::string(key)};
  return d;
}

std::variant<VerifiedEntry, DecodeError> verify(std::string file, std::string_view secret, std::string_view key,
                                                const std::function<bool(const std::string&)>& expect) {
  auto decoded = decode(file, secret, key);
  if (auto* err = std::get_if<DecodeError>(&decoded)) return std::move(*err);
  const Decoded& d = std::get<Decoded>(decoded);
  if (expect && !expect(std::string(d.manifest)))
    return DecodeError{DiskError::Foreign, "built for another target or version"};
  VerifiedEntry e;
  e.manifest_at_ = static_cast<size_t>(d.manifest.data() - file.data());
  e.manifest_size_ = d.manifest.size();
  e.payload_at_ = static_cast<size_t>(d.payload.data() - file.data());
  e.payload_size_ = d.payload.size();
  e.key_ = std::string(key);
  e.file_ = std::move(file);  // moving a std::string keeps offsets into it valid
  return e;
}

}  // namespace entry_file
}  // namespace lazyjit::cache
