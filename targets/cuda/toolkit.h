// Where the CUDA target finds the two files of NVIDIA's toolkit it needs:
// libdevice.10.bc (the device math library, linked into every kernel) and
// ptxas (PTX to cubin). Neither needs a GPU; both come with the pip wheels
// nvidia-nvvm and nvidia-cuda-nvcc (scripts/setup.sh installs them into .venv;
// CMake bakes the paths it found there in as the last resort).
#pragma once
#include <string>
#include <vector>

#include "targets/cuda/cuda_target.h"

namespace lazyjit::lowering::cuda {

// libdevice.10.bc: CudaOptions::libdevice, else $LAZYJIT_LIBDEVICE, else
// $CUDA_HOME/nvvm/libdevice/libdevice.10.bc, /usr/local/cuda/nvvm/libdevice/
// libdevice.10.bc, the nvidia-nvvm wheel's found at configure time. A path given
// (option or variable) must exist. Throws std::runtime_error naming every place
// looked.
std::string find_libdevice(const CudaOptions& o);

// ptxas: CudaOptions::ptxas, else $LAZYJIT_PTXAS (both must exist), else ptxas
// on $PATH, $CUDA_HOME/bin/ptxas, /usr/local/cuda/bin/ptxas, the
// nvidia-cuda-nvcc wheel's found at configure time. Empty when none is found:
// `looked` then lists every place looked (for the error of a caller that needs one).
std::string find_ptxas(const CudaOptions& o, std::string* looked = nullptr);

// The places find_* looked, joined for a message ("a, b, c").
std::string join_places(const std::vector<std::string>& places);

}  // namespace lazyjit::lowering::cuda
