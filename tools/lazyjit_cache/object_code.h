// The object code inside a cache entry's payload, and its disassembly.
//
// The payload is a serialized program (lowering/program_bytes.cpp): ...,
// the object file as a u32-length-prefixed string, then a u64 checksum. The
// graph and plan before it need lowering's readers (LLVM), so instead the
// object is found from the end: the manifest's object_bytes says its length,
// and the u32 just before it must say the same. That string holds one object
// file per compiled kernel, in the CPU target's kernel archive
// (lowering/cpu/cpu_target.cpp):
//   "LJKO" u32 version 1, u32 unit count, per unit: u64 key lo, u64 key hi,
//   u8 generic, str symbol, str object; then u32 kernel count + u32 unit each.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lazyjit::cache_tool {

struct ObjectCode {
  std::string bytes;  // the archive; empty: the program has no kernels
  struct Unit {
    std::string symbol;  // the kernel function (named for the kernel it was first compiled for)
    bool generic = false;  // shape-generic code (serves other sizes)
    std::string object;  // a relocatable object file
  };
  std::vector<Unit> units;  // distinct compiled kernels, in the archive's order
  std::string error;  // set when the entry does not hold what its manifest says
};

// `file` is the whole .ljc file; `manifest` its parsed manifest.
ObjectCode object_code(const std::string& file, const std::string& key, const nlohmann::json& manifest);

// `llvm-objdump-19 -d` (or llvm-objdump, objdump) of the object; empty with
// *note set when no disassembler is installed or it fails.
std::string disassemble(const std::string& object, std::string* note);

}  // namespace lazyjit::cache_tool
