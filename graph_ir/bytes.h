// The byte format shared by every serialized piece of a program (graph, plan).
//
// Fixed-width little-endian integers, doubles by their bit pattern, and
// u32-length-prefixed strings and vectors; nothing is aligned or padded. The
// bytes mean the same on every machine, so they can live in an on-disk cache.
//
// ByteReader never trusts its input: every read is bounds-checked and throws
// std::runtime_error naming the offset, and a length is refused unless the bytes
// left could hold that many elements, so a corrupt length cannot make a reader
// allocate more than the input's own size.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lazyjit::ir {

class ByteWriter {
 public:
  // A piece of the format opens with a 4-byte tag and a version; the reader's
  // expect_header refuses any other tag or version.
  void header(std::string_view tag4, uint32_t version);

  void u8(uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { put_le(v, 2); }
  void u32(uint32_t v) { put_le(v, 4); }
  void i32(int32_t v) { put_le(static_cast<uint32_t>(v), 4); }
  void u64(uint64_t v) { put_le(v, 8); }
  void i64(int64_t v) { put_le(static_cast<uint64_t>(v), 8); }
  void f64(double v);
  void boolean(bool v) { u8(v ? 1 : 0); }
  void count(size_t n);  // a length prefix; throws past UINT32_MAX
  void str(std::string_view s);
  void i64s(const std::vector<int64_t>& v);
  void f64s(const std::vector<double>& v);
  void u32s(const std::vector<uint32_t>& v);
  void i32s(const std::vector<int32_t>& v);

  size_t size() const { return bytes_.size(); }
  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  void put_le(uint64_t v, int n);
  std::string bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}

  // Throws unless the next bytes are `tag4` and `version`; `what` names the
  // piece in the message ("graph", "plan").
  void expect_header(std::string_view tag4, uint32_t version, std::string_view what);

  uint8_t u8() { return static_cast<uint8_t>(get_le(1)); }
  uint16_t u16() { return static_cast<uint16_t>(get_le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get_le(4)); }
  int32_t i32() { return static_cast<int32_t>(static_cast<uint32_t>(get_le(4))); }
  uint64_t u64() { return get_le(8); }
  int64_t i64() { return static_cast<int64_t>(get_le(8)); }
  double f64();
  bool boolean();  // refuses bytes other than 0 and 1
  // A length prefix of elements that take at least `min_elem_bytes` each; refused
  // when the bytes left cannot hold them. `what` names the list in the message.
  size_t count(size_t min_elem_bytes, std::string_view what);
  std::string str();
  std::vector<int64_t> i64s();
  std::vector<double> f64s();
  std::vector<uint32_t> u32s();
  std::vector<int32_t> i32s();

  size_t offset() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  // The bytes read since `start` (an earlier offset()), e.g. to checksum a piece.
  std::string_view read_since(size_t start) const { return bytes_.substr(start, pos_ - start); }
  // Throws unless every byte was read (trailing bytes mean a corrupt or
  // mismatched input).
  void expect_end(std::string_view what) const;
  // A std::runtime_error "lazyjit: corrupt program bytes (<what> at offset N)".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  uint64_t get_le(int n);
  void need(size_t n) const;
  std::string_view bytes_;
  size_t pos_ = 0;
};

}  // namespace lazyjit::ir
