#include "formats/program_bytes.h"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lazyjit::formats {

namespace {

constexpr size_t kChecksum = 8;
constexpr size_t kTailFixed = 8 + 4;  // f64 compile ms, u32 object length

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(std::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

[[noreturn]] void fail(const std::string& what) { throw ProgramBytesError("lazyjit: corrupt program bytes (" + what + ")"); }

}  // namespace

std::string seal_program(std::string head, double compile_ms, std::string_view object) {
  if (object.size() > UINT32_MAX)
    throw ProgramBytesError("lazyjit: a program object of " + std::to_string(object.size()) +
                            " bytes is over the format's 4 GiB");
  uint64_t ms_bits;
  std::memcpy(&ms_bits, &compile_ms, sizeof ms_bits);
  put_le(head, ms_bits, 8);
  put_le(head, object.size(), 4);
  head.append(object);
  // The object code is native code: a flipped bit must never reach the linker.
  put_le(head, XXH3_64bits(head.data(), head.size()), 8);
  return head;
}

std::string_view unseal_program(std::string_view bytes) {
  if (bytes.size() < kChecksum) fail("program shorter than its checksum: " + std::to_string(bytes.size()) + " bytes");
  std::string_view body = bytes.substr(0, bytes.size() - kChecksum);
  if (get_le(bytes, body.size(), 8) != XXH3_64bits(body.data(), body.size())) fail("program checksum mismatch");
  return body;
}

ProgramTail read_program_tail(std::string_view rest) {
  if (rest.size() < kTailFixed)
    fail("program tail of " + std::to_string(rest.size()) + " bytes, shorter than a compile time and an object length");
  ProgramTail t;
  uint64_t ms_bits = get_le(rest, 0, 8);
  std::memcpy(&t.compile_ms, &ms_bits, sizeof t.compile_ms);
  uint64_t n = get_le(rest, 8, 4);
  if (n != rest.size() - kTailFixed)
    fail("program object of " + std::to_string(n) + " bytes where " + std::to_string(rest.size() - kTailFixed) +
         " bytes are left");
  t.object = rest.substr(kTailFixed);
  return t;
}

ProgramTail program_tail_from_end(std::string_view bytes, uint64_t object_bytes) {
  std::string_view body = unseal_program(bytes);
  if (body.substr(0, kProgramTag.size()) != kProgramTag) fail("not a program: no " + std::string(kProgramTag) + " tag");
  if (body.size() >= kProgramTag.size() + 4 && get_le(body, kProgramTag.size(), 4) != kProgramVersion)
    fail("program format version " + std::to_string(get_le(body, kProgramTag.size(), 4)) + ", this build reads " +
         std::to_string(kProgramVersion));
  if (body.size() < kProgramTag.size() + 4 + kTailFixed || body.size() - kProgramTag.size() - 4 - kTailFixed < object_bytes)
    fail("program of " + std::to_string(bytes.size()) + " bytes is shorter than its object code of " +
         std::to_string(object_bytes) + " bytes");
  return read_program_tail(body.substr(body.size() - kTailFixed - object_bytes));
}

}  // namespace lazyjit::formats
