// The cuda-sim target's one change to a CUDA kernel: its LLVM IR, as the CUDA
// kernel emitter (targets/cuda/kernel_emitter.h) made it for NVPTX, rewritten
// so that the host CPU runs it one simulated GPU thread per call.
#pragma once
#include <cstdint>
#include <string>

#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Triple.h>

namespace lazyjit::lowering::cuda_sim {

struct HostKernel {
  std::string entry;          // the host entry's symbol (sim_thread.h's SimEntry)
  bool meets = false;         // calls shuffles or barriers: a block's threads run together
  int32_t shared_bytes = 0;   // per block: its static shared memory (and dynamic, when asked)
};

// Rewrites kernel `symbol` of the nvptx64 module `m` for the host (`triple`,
// `layout`):
//  - a new last parameter, the SimThread (sim_thread.h);
//  - llvm.nvvm.read.ptx.sreg.* (tid, ntid, ctaid, nctaid in x, y, z; laneid;
//    warpsize) become loads from it (y and z: index 0 of extent 1);
//  - llvm.nvvm.shfl.sync.{up,down,bfly,idx}.{i32,f32} and llvm.nvvm.barrier0 /
//    barrier.sync call its shuffle and barrier;
//  - addrspace(3) globals (shared memory) become offsets into its `shared`
//    (`dynamic_shared` more bytes for an extern one);
//  - the dims parameter loses byval (the host passes a pointer), NVPTX's
//    annotations and target attributes go;
//  - an entry `<symbol>_sim_entry` (SimEntry) calls it.
// Math stays as the emitter made it (LLVM intrinsics, libm calls): the host's
// libm stands in for libdevice. Throws std::runtime_error naming any other
// llvm.nvvm intrinsic (nothing the host can run).
HostKernel rewrite_for_host(llvm::Module& m, const std::string& symbol, const llvm::Triple& triple,
                            const llvm::DataLayout& layout, int32_t dynamic_shared = 0);

}  // namespace lazyjit::lowering::cuda_sim
