// The object code inside a cache entry's payload, and its disassembly.
//
// The payload is a serialized program (lowering/program_bytes.cpp): ...,
// the object file as a u32-length-prefixed string, then a u64 checksum. The
// graph and plan before it need lowering's readers (LLVM), so instead the
// object is found from the end: the manifest's object_bytes says its length,
// and the u32 just before it must say the same.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace lazyjit::cache_tool {

struct ObjectCode {
  std::string bytes;  // empty: the program has no kernels
  std::string error;  // set when the entry does not hold what its manifest says
};

// `file` is the whole .ljc file; `manifest` its parsed manifest.
ObjectCode object_code(const std::string& file, const nlohmann::json& manifest);

// `llvm-objdump-19 -d` (or llvm-objdump, objdump) of the object; empty with
// *note set when no disassembler is installed or it fails.
std::string disassemble(const std::string& object, std::string* note);

}  // namespace lazyjit::cache_tool
