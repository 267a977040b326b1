#include "runtime/program_entry.h"

#include "lowering/program_bytes.h"

namespace lazyjit::runtime {

std::shared_ptr<const lowering::Program> link_entry(const cache::entry_file::VerifiedEntry& entry,
                                                    lowering::Target& target) {
  return lowering::program_from_bytes(entry.payload(), target);
}

}  // namespace lazyjit::runtime
