// NVIDIA's ptxas, run as a child process: PTX text to a cubin (an ELF for one
// GPU architecture), without a GPU or the driver.
#pragma once
#include <string>

namespace lazyjit::lowering::cuda {

// Assembles `ptx` for `arch` ("sm_90") with `ptxas` at -O`opt_level` (0-3),
// in a private temporary directory it removes. Throws std::runtime_error
// quoting ptxas's output (and naming `what`, e.g. the kernel) when it fails.
std::string run_ptxas(const std::string& ptxas, const std::string& arch, const std::string& ptx, int opt_level,
                      const std::string& what);

// ptxas's release ("13.0.88", from `ptxas --version`'s "V13.0.88"). Throws
// when it does not run.
std::string ptxas_version(const std::string& ptxas);

}  // namespace lazyjit::lowering::cuda
