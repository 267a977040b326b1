// A program's bytes (formats/program_bytes.h): the frame lowering writes and
// lazyjit-cache reads, on untrusted bytes. Each truncation, flipped byte and
// lying length is a ProgramBytesError, never a crash or an object read wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "formats/program_bytes.h"

namespace lazyjit::formats {
namespace {

// The front as lowering writes it: tag, version, then graph and plan bytes
// (opaque here).
std::string head(const std::string& graph_and_plan) {
  std::string h(kProgramTag);
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<char>((kProgramVersion >> (8 * i)) & 0xff));
  return h + graph_and_plan;
}

const std::string kObject = std::string("\x7f" "ELF", 4) + std::string(37, '\x05');

TEST(ProgramBytes, TheTailReadsBackFromThePlanAndFromTheEnd) {
  const std::string front = head("graph and plan");
  const std::string bytes = seal_program(front, 12.5, kObject);
  // The layout written by hand: f64, u32 length, the object, u64 checksum.
  ASSERT_EQ(bytes.size(), front.size() + 8 + 4 + kObject.size() + 8);
  double ms;
  std::memcpy(&ms, bytes.data() + front.size(), 8);
  EXPECT_EQ(ms, 12.5);
  EXPECT_EQ(static_cast<unsigned char>(bytes[front.size() + 8]), kObject.size());
  std::string_view body = unseal_program(bytes);
  ASSERT_EQ(body.size(), bytes.size() - 8);
  ProgramTail t = read_program_tail(body.substr(front.size()));
  EXPECT_EQ(t.compile_ms, 12.5);
  EXPECT_EQ(t.object, kObject);
  ProgramTail e = program_tail_from_end(bytes, kObject.size());
  EXPECT_EQ(e.compile_ms, 12.5);
  EXPECT_EQ(e.object, kObject);
  // Without kernels: an empty object.
  EXPECT_EQ(program_tail_from_end(seal_program(front, 1, ""), 0).object, "");
}

TEST(ProgramBytes, DamageIsRefusedByName) {
  const std::string bytes = seal_program(head("graph and plan"), 3, kObject);
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_THROW(program_tail_from_end(bytes.substr(0, cut), kObject.size()), ProgramBytesError) << "cut at " << cut;
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string bad = bytes;
    bad[at] ^= 0x20;
    EXPECT_THROW(unseal_program(bad), ProgramBytesError) << "flip at " << at;
  }
  auto error_of = [&](uint64_t n) {
    try {
      program_tail_from_end(bytes, n);
    } catch (const ProgramBytesError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A manifest that lies about the object's length: the length before where
  // the object would start is not it.
  EXPECT_NE(error_of(kObject.size() - 1).find("where 40 bytes are left"), std::string::npos)
      << error_of(kObject.size() - 1);
  EXPECT_NE(error_of(uint64_t{1} << 40).find("shorter than its object code"), std::string::npos)
      << error_of(uint64_t{1} << 40);
  // A tail with bytes after its object, or a length past the bytes left.
  std::string tail(8, '\0');
  tail += std::string("\x03\0\0\0", 4) + "abcd";
  EXPECT_THROW(read_program_tail(tail), ProgramBytesError);
  tail[8] = 5;
  EXPECT_THROW(read_program_tail(tail), ProgramBytesError);
  tail[8] = 4;
  EXPECT_EQ(read_program_tail(tail).object, "abcd");
  // Another tag or version, checksummed as if good.
  std::string other = head("x");
  other[0] = 'X';
  EXPECT_THROW(program_tail_from_end(seal_program(other, 0, kObject), kObject.size()), ProgramBytesError);
  other = head("x");
  other[4] = 9;
  EXPECT_THROW(program_tail_from_end(seal_program(other, 0, kObject), kObject.size()), ProgramBytesError);
}

}  // namespace
}  // namespace lazyjit::formats
