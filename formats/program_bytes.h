// The bytes of a compiled program, a cache entry's payload: written and read
// by lowering (lowering/program_bytes.cpp, which writes the graph and plan
// inside with their own writers), and read by lazyjit-cache for the object
// code at the end (tools/lazyjit_cache/object_code.cpp). One statement of the
// frame around the graph and plan, for both.
//
//   "LJPG" u32 version 2
//   graph                  graph_ir/graph_io.h
//   plan                   lowering/plan_io.h
//   f64 compile ms
//   str object             u32 length + bytes: the target's kernel archive
//                          (empty for a program without kernels)
//   u64 checksum           XXH3-64 of every byte before it
//
// Fixed-width little-endian, as graph_ir/bytes.h writes them. The graph and
// plan carry no length of their own, so a reader without lowering's readers
// finds the object from the end, by the length the entry's manifest gives it
// (object_bytes), and the u32 before it must say the same. Every byte read is
// untrusted: each length is checked against the bytes there, and any damage
// throws ProgramBytesError naming it.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lazyjit::formats {

inline constexpr std::string_view kProgramTag = "LJPG";
inline constexpr uint32_t kProgramVersion = 2;  // 2: the object is a kernel archive (one object per kernel)

struct ProgramBytesError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What follows the plan.
struct ProgramTail {
  double compile_ms = 0;
  std::string_view object;  // a view into the bytes read
};

// `head` (tag, version, graph and plan, as written) closed with the tail and
// the checksum of it all.
std::string seal_program(std::string head, double compile_ms, std::string_view object);
// `bytes` without their checksum, once it matches; throws when it does not or
// the bytes are shorter than it.
std::string_view unseal_program(std::string_view bytes);
// The tail from `rest`, the checked bytes after the plan: exactly a compile
// time and an object, nothing after it.
ProgramTail read_program_tail(std::string_view rest);
// The tail of sealed `bytes` whose object is `object_bytes` long, found from
// the end; the checksum is checked first.
ProgramTail program_tail_from_end(std::string_view bytes, uint64_t object_bytes);

}  // namespace lazyjit::formats
