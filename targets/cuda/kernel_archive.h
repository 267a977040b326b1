// The kernel archives of the GPU targets: the bytes a program's object holds
// when its kernels run on a GPU (or the simulated one), written by the targets
// (targets/cuda/cuda_target.cpp, targets/cuda_sim/sim_target.cpp) and read by
// them and by lazyjit-cache (tools/lazyjit_cache/object_code.cpp). One reader
// for all of them, so that what the tool shows is what a target loads.
//
// This directory includes nothing of lazyjit, libtorch or LLVM: the cache tool
// starts fast and lowering/ does not include cache/, yet both read these bytes.
//
// Fixed-width little-endian integers and u32-length-prefixed strings and lists,
// as graph_ir/bytes.h writes them (str: u32 length + bytes; bool: one byte 0/1):
//
//  CUDA ("LJCU", version 3): u32 version, str arch, u32 PTX ISA (81: 8.1),
//    u32 unit count, per unit: u64 key lo, u64 key hi, bool generic, str
//    symbol, u8 grid (0: Elements, 1: Rows), i32 block, i32 shared bytes, i32
//    elements per thread, i32 rows per block, str PTX, str cubin; then u32
//    kernel count, per plan kernel: u32 unit.
//    Version 1 had no elements per thread (every kernel took 1), 2 added it, 3
//    rows per block (warp rows).
//  cuda-sim ("LJCS", version 1): u32 version, u32 unit count, per unit: u64
//    key lo, u64 key hi, bool generic, str symbol, u8 grid, i32 block, i32
//    dynamic shared bytes, i32 elements per thread, i32 rows per block, bool
//    meets, i32 host shared bytes, str host object; then u32 kernel count, per
//    plan kernel: u32 unit.
//
// Every byte read is untrusted: each length is checked against the bytes left
// before anything is allocated for it, each field against its range, and any
// damage throws ArchiveError naming the archive, the unit and the field.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lazyjit::formats {

inline constexpr std::string_view kCudaArchiveTag = "LJCU";
inline constexpr uint32_t kCudaArchiveVersion = 3;
inline constexpr std::string_view kSimArchiveTag = "LJCS";
inline constexpr uint32_t kSimArchiveVersion = 1;

// Damaged, truncated, or of another format version or tag. what():
// "lazyjit: CUDA kernels archive (LJCU) is damaged: unit 1 (fused_3): PTX
// length 5000 exceeds the 120 bytes left (at byte 58 of 178)".
class ArchiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How a kernel is launched (targets/cuda/device_kernel.h's DeviceKernel, as stored).
struct KernelLaunch {
  enum class Grid : uint8_t { Elements = 0, Rows = 1 };
  Grid grid = Grid::Elements;
  int32_t block = 256;              // threads per block: 32 to 1024, a multiple of 32
  int32_t shared_bytes = 0;         // dynamic shared memory per block: 0 to 1 MiB
  int32_t elements_per_thread = 1;  // 1 to 64; 1 for Rows
  int32_t rows_per_block = 1;       // Rows: 1, or block / 32 (warp rows); 1 for Elements
};

// What every unit holds: the kernel cache key it is kept under (exact, or
// shape-generic when `generic`), its function's name (a PTX identifier:
// [A-Za-z_][A-Za-z0-9_]*) and its launch.
struct UnitHead {
  uint64_t key_lo = 0, key_hi = 0;
  bool generic = false;
  std::string symbol;
  KernelLaunch launch;
};

struct CudaUnit : UnitHead {
  std::string ptx;
  std::string cubin;  // an ELF for the archive's arch
};
struct CudaArchive {
  uint32_t version = kCudaArchiveVersion;  // as read (write_cuda_archive writes kCudaArchiveVersion)
  std::string arch;                        // "sm_90"
  uint32_t ptx_isa = 0;                    // 81: PTX ISA 8.1
  std::vector<CudaUnit> units;             // distinct compiled kernels
  std::vector<uint32_t> kernel_units;      // per plan kernel, its unit (equal kernels share one)
};

struct SimUnit : UnitHead {
  bool meets = false;             // shuffles or barriers: a block's threads run together (fibers)
  int32_t host_shared_bytes = 0;  // the block's shared memory on the host: 0 to 1 MiB
  std::string object;             // a relocatable host object file
};
struct SimArchive {
  std::vector<SimUnit> units;
  std::vector<uint32_t> kernel_units;
};

// The bytes of `a`, at kCudaArchiveVersion whatever a.version says. Throws
// std::length_error for a string or list past 2^32 - 1 bytes or entries.
std::string write_cuda_archive(const CudaArchive& a);
// Reads an archive of a version from `oldest_version` to kCudaArchiveVersion
// (a target loads only its own; the cache tool shows older ones too). Throws
// ArchiveError on anything else: another tag or version, a length past the
// bytes left, a field out of range (launch, symbol, arch, a cubin without an
// ELF header, a kernel's unit index), bytes left over at the end.
CudaArchive read_cuda_archive(std::string_view bytes, uint32_t oldest_version = kCudaArchiveVersion);

std::string write_sim_archive(const SimArchive& a);
SimArchive read_sim_archive(std::string_view bytes);

}  // namespace lazyjit::formats
