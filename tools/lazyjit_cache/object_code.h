// The object code inside a cache entry's payload, and its disassembly.
//
// The payload is a serialized program (formats/program_bytes.h). The graph and
// plan at its front need lowering's readers (LLVM), so the object is found
// from the end (formats::program_tail_from_end), by the manifest's
// object_bytes. It is the kernel archive of the target that compiled the
// program, told apart by its tag:
//
// the CPU target's (targets/cpu/cpu_target.cpp), one object file per kernel:
//   "LJKO" u32 version 1, u32 unit count, per unit: u64 key lo, u64 key hi,
//   u8 generic, str symbol, str object; then u32 kernel count + u32 unit each.
//   Read here byte by byte: the tool links no LLVM and no lowering.
//
// the CUDA target's ("LJCU": PTX, cubin and launch per kernel; versions 1 to 3
// are shown) and cuda-sim's ("LJCS": a host object file per kernel), read by
// targets/cuda/kernel_archive.h, the reader the targets load them with.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lazyjit::cache_tool {

struct ObjectCode {
  enum class Format { None, Cpu, Cuda, CudaSim };
  std::string bytes;  // the archive; empty: the program has no kernels
  Format format = Format::None;  // from the archive's tag (None: empty, or a tag this tool does not know)
  // CUDA: what every unit was compiled for.
  std::string arch;       // "sm_90"
  uint32_t ptx_isa = 0;   // 78: PTX ISA 7.8
  struct Unit {
    std::string symbol;  // the kernel function (named for the kernel it was first compiled for)
    bool generic = false;  // shape-generic code (serves other sizes)
    std::string object;  // CPU, cuda-sim: a relocatable (host) object file
    // CUDA: the launch shape and the code.
    std::string grid;        // "elements" (one thread per element) or "rows" (one block per row)
    int32_t block = 0;       // threads per block
    int32_t shared_bytes = 0;  // dynamic shared memory per block
    int32_t elements_per_thread = 1;  // consecutive elements a thread takes per step (vectorized kernels)
    int32_t rows_per_block = 1;       // row kernels: rows a block runs (block / 32 for warp rows)
    std::string ptx;
    std::string cubin;       // an ELF for `arch`
  };
  std::vector<Unit> units;  // distinct compiled kernels, in the archive's order
  std::vector<uint32_t> kernel_units;  // per plan kernel, its unit (equal kernels share one)
  std::string error;  // set when the entry does not hold what its manifest says
};

// `file` is the whole .ljc file; `manifest` its parsed manifest.
ObjectCode object_code(const std::string& file, const std::string& key, const nlohmann::json& manifest);

// `llvm-objdump-19 -d` (or llvm-objdump, objdump) of the object; empty with
// *note set when no disassembler is installed or it fails.
std::string disassemble(const std::string& object, std::string* note);

// "7.8" for 78.
std::string ptx_isa_text(uint32_t isa);

// The program that prints a cubin's SASS: nvdisasm, else cuobjdump, looked
// for on PATH, then in $CUDA_HOME/bin and /usr/local/cuda/bin. Empty when
// neither is found; *looked then says where it looked.
std::string find_sass_tool(std::string* looked);
// The SASS of a cubin by `tool` (find_sass_tool's): `nvdisasm -c`, or
// `cuobjdump -sass`. Empty with *note set when it fails.
std::string disassemble_cubin(const std::string& tool, const std::string& cubin, std::string* note);

// show's views of a CUDA entry's kernels (obj.format == Cuda, no error), each
// cubin disassembled at most once. `code`: with each kernel's PTX and SASS.
struct CudaView {
  std::string table;    // target line and one row per compiled kernel: symbol, generic, launch shape, sizes
  std::string listing;  // with `code`: per kernel a header (symbol, generic, arch, PTX ISA, launch), PTX, SASS
  nlohmann::json json;  // {arch, ptx_isa, sass_tool, kernels: [...], plan_kernels: [unit, ...]}
  std::vector<std::string> notes;  // no SASS disassembler (naming what to install), one that failed
};
CudaView cuda_view(const ObjectCode& obj, bool code);

// 'text' for /bin/sh, whatever it holds.
std::string shell_quote(const std::string& text);
// `command`'s standard output through /bin/sh; *status is pclose's (-1: not started).
std::string run_capture(const std::string& command, int* status);

}  // namespace lazyjit::cache_tool
