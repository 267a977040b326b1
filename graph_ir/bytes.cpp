#include "graph_ir/bytes.h"

#include <bit>
#include <cstring>
#include <stdexcept>

namespace lazyjit::ir {

// --- ByteWriter ----------------------------------------------------------------

void ByteWriter::put_le(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ByteWriter::header(std::string_view tag4, uint32_t version) {
  if (tag4.size() != 4) throw std::invalid_argument("lazyjit: a format tag has 4 bytes");
  bytes_.append(tag4);
  u32(version);
}

void ByteWriter::f64(double v) { u64(std::bit_cast<uint64_t>(v)); }

void ByteWriter::count(size_t n) {
  if (n > UINT32_MAX)
    throw std::length_error("lazyjit: a list of " + std::to_string(n) +
                            " entries does not fit the program byte format");
  u32(static_cast<uint32_t>(n));
}

void ByteWriter::str(std::string_view s) {
  count(s.size());
  bytes_.append(s);
}

void ByteWriter::i64s(const std::vector<int64_t>& v) {
  count(v.size());
  for (int64_t x : v) i64(x);
}

void ByteWriter::f64s(const std::vector<double>& v) {
  count(v.size());
  for (double x : v) f64(x);
}

void ByteWriter::u32s(const std::vector<uint32_t>& v) {
  count(v.size());
  for (uint32_t x : v) u32(x);
}

void ByteWriter::i32s(const std::vector<int32_t>& v) {
  count(v.size());
  for (int32_t x : v) i32(x);
}

// --- ByteReader ----------------------------------------------------------------

void ByteReader::fail(const std::string& what) const {
  throw std::runtime_error("lazyjit: corrupt program bytes (" + what + " at offset " +
                           std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
}

void ByteReader::need(size_t n) const {
  if (n > remaining())
    throw std::runtime_error("lazyjit: truncated program bytes (wanted " + std::to_string(n) +
                             " bytes at offset " + std::to_string(pos_) + " of " +
                             std::to_string(bytes_.size()) + ")");
}

uint64_t ByteReader::get_le(int n) {
  need(static_cast<size_t>(n));
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
  pos_ += static_cast<size_t>(n);
  return v;
}

void ByteReader::expect_header(std::string_view tag4, uint32_t version, std::string_view what) {
  need(tag4.size());
  if (bytes_.substr(pos_, tag4.size()) != tag4)
    throw std::runtime_error("lazyjit: not lazyjit " + std::string(what) + " bytes (tag '" +
                             std::string(tag4) + "' missing at offset " + std::to_string(pos_) + ")");
  pos_ += tag4.size();
  uint32_t got = u32();
  if (got != version)
    throw std::runtime_error("lazyjit: " + std::string(what) + " bytes have format version " +
                             std::to_string(got) + "; this build reads version " +
                             std::to_string(version));
}

double ByteReader::f64() { return std::bit_cast<double>(u64()); }

bool ByteReader::boolean() {
  uint8_t b = u8();
  if (b > 1) fail("bool byte " + std::to_string(b));
  return b == 1;
}

size_t ByteReader::count(size_t min_elem_bytes, std::string_view what) {
  uint32_t n = u32();
  // Elements of zero bytes (none in the format today) are capped by the bytes
  // left too, so a count alone never allocates more than the input's size.
  size_t per = min_elem_bytes ? min_elem_bytes : 1;
  if (n > remaining() / per)
    fail(std::string(what) + " count " + std::to_string(n) + " exceeds the " +
         std::to_string(remaining()) + " bytes left");
  return n;
}

std::string ByteReader::str() {
  size_t n = count(1, "string length");
  std::string s(bytes_.substr(pos_, n));
  pos_ += n;
  return s;
}

std::vector<int64_t> ByteReader::i64s() {
  std::vector<int64_t> v(count(8, "int64 list"));
  for (int64_t& x : v) x = i64();
  return v;
}

std::vector<double> ByteReader::f64s() {
  std::vector<double> v(count(8, "double list"));
  for (double& x : v) x = f64();
  return v;
}

std::vector<uint32_t> ByteReader::u32s() {
  std::vector<uint32_t> v(count(4, "uint32 list"));
  for (uint32_t& x : v) x = u32();
  return v;
}

std::vector<int32_t> ByteReader::i32s() {
  std::vector<int32_t> v(count(4, "int32 list"));
  for (int32_t& x : v) x = i32();
  return v;
}

void ByteReader::expect_end(std::string_view what) const {
  if (remaining() != 0)
    fail(std::to_string(remaining()) + " unread bytes after the " + std::string(what));
}

}  // namespace lazyjit::ir
