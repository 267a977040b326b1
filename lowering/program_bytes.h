// A compiled program as bytes: the graph, the plan and the kernels' object
// file, behind a tag and a format version, closed by a checksum of it all. Reading it back links the object
// into the target's JIT: no LLVM codegen. The bytes do not say which target
// they were made for: the caller keys them (the cache key's target part).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "lowering/program.h"

namespace lazyjit::lowering {

std::string program_to_bytes(const Program& p);
// Throws std::runtime_error naming what is wrong when the bytes are truncated,
// corrupt, of another format version, or their object file does not link.
std::shared_ptr<Program> program_from_bytes(std::string_view bytes, Target& target);

}  // namespace lazyjit::lowering
