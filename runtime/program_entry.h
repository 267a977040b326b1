// The one way from stored bytes to a linkable program. A tier (disk, remote)
// reads an entry file and has cache::entry_file::verify check it: checksum,
// signature, the key it was looked up under, and the manifest's target and
// version (DiskTier::expected). Only then does link_entry() read the payload
// and link its object code. Nothing else in the runtime calls
// lowering::program_from_bytes (tests/layering_test.sh checks this), so no path
// loads an entry without those checks.
#pragma once
#include <memory>

#include "cache/entry_file.h"
#include "lowering/program.h"

namespace lazyjit::runtime {

// Throws std::runtime_error (from lowering::program_from_bytes) when the
// payload does not read back or link: the caller refuses the entry.
std::shared_ptr<const lowering::Program> link_entry(const cache::entry_file::VerifiedEntry& entry,
                                                    lowering::Target& target);

}  // namespace lazyjit::runtime
