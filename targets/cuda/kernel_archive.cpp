#include "targets/cuda/kernel_archive.h"

namespace lazyjit::formats {

namespace {

// Fixed-width little-endian integers and u32-length-prefixed strings, as
// graph_ir/bytes.h's ByteWriter writes them.
class Writer {
 public:
  void tag(std::string_view t, uint32_t version) {
    out_.append(t);
    u32(version);
  }
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { le(v, 4); }
  void i32(int32_t v) { le(static_cast<uint32_t>(v), 4); }
  void u64(uint64_t v) { le(v, 8); }
  void count(size_t n) {
    if (n > UINT32_MAX)
      throw std::length_error("lazyjit: a kernel archive list or string of " + std::to_string(n) +
                              " entries does not fit its u32 length");
    u32(static_cast<uint32_t>(n));
  }
  void str(std::string_view s) {
    count(s.size());
    out_.append(s);
  }
  void head(const UnitHead& u) {
    u64(u.key_lo);
    u64(u.key_hi);
    u8(u.generic ? 1 : 0);
    str(u.symbol);
    u8(static_cast<uint8_t>(u.launch.grid));
    i32(u.launch.block);
    i32(u.launch.shared_bytes);
    i32(u.launch.elements_per_thread);
    i32(u.launch.rows_per_block);
  }
  void units_of(const std::vector<uint32_t>& v) {
    count(v.size());
    for (uint32_t x : v) u32(x);
  }
  std::string take() { return std::move(out_); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Reads untrusted bytes. Every failure throws ArchiveError "<archive> is
// damaged: <where>: <what> (at byte N of M)", `where` naming the unit.
class Reader {
 public:
  Reader(std::string_view bytes, std::string archive) : b_(bytes), archive_(std::move(archive)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ArchiveError("lazyjit: " + archive_ + " is damaged: " + (where_.empty() ? "" : where_ + ": ") + what +
                       " (at byte " + std::to_string(pos_) + " of " + std::to_string(b_.size()) + ")");
  }
  void at(std::string where) { where_ = std::move(where); }

  // The tag, then a version from `oldest` to `newest`; returns it.
  uint32_t header(std::string_view tag, uint32_t oldest, uint32_t newest) {
    if (b_.size() < tag.size() || b_.substr(0, tag.size()) != tag)
      throw ArchiveError("lazyjit: not a " + archive_ + ": it does not open with the tag '" + std::string(tag) + "'");
    pos_ = tag.size();
    uint32_t v = u32("format version");
    if (v < oldest || v > newest)
      throw ArchiveError("lazyjit: " + archive_ + " has format version " + std::to_string(v) +
                         "; this build reads " +
                         (oldest == newest ? "version " + std::to_string(newest)
                                           : "versions " + std::to_string(oldest) + " to " + std::to_string(newest)));
    return v;
  }
  uint8_t u8(const char* field) { return static_cast<uint8_t>(le(1, field)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(le(4, field)); }
  int32_t i32(const char* field) { return static_cast<int32_t>(static_cast<uint32_t>(le(4, field))); }
  uint64_t u64(const char* field) { return le(8, field); }
  bool boolean(const char* field) {
    uint8_t v = u8(field);
    if (v > 1) fail(std::string(field) + " is byte " + std::to_string(v) + ", not 0 or 1");
    return v == 1;
  }
  // A length of entries of at least `min_bytes` each, refused unless the bytes
  // left can hold them: no length makes a reader allocate more than the input.
  size_t count(size_t min_bytes, const char* field) {
    uint32_t n = u32(field);
    if (n > remaining() / min_bytes)
      fail(std::string(field) + " " + std::to_string(n) + (min_bytes > 1 ? " (of at least " + std::to_string(min_bytes) + " bytes each)" : "") +
           " exceeds the " + std::to_string(remaining()) + " bytes left");
    return n;
  }
  std::string str(const char* field) {
    size_t n = count(1, field);
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A unit's common fields; `per_thread`, `rows_field`: whether the format has
  // elements per thread and rows per block (else 1).
  void head(UnitHead& u, bool per_thread, bool rows_field) {
    u.key_lo = u64("key");
    u.key_hi = u64("key");
    u.generic = boolean("generic flag");
    u.symbol = str("symbol length");
    if (!is_identifier(u.symbol)) fail("symbol is not a PTX identifier");
    at(where_ + " (" + u.symbol + ")");
    uint8_t grid = u8("grid kind");
    if (grid > 1) fail("unknown grid kind " + std::to_string(grid));
    KernelLaunch& l = u.launch;
    l.grid = static_cast<KernelLaunch::Grid>(grid);
    l.block = i32("block");
    if (l.block < 32 || l.block > 1024 || l.block % 32)
      fail("block of " + std::to_string(l.block) + " threads (32 to 1024, a multiple of 32)");
    l.shared_bytes = i32("shared bytes");
    if (l.shared_bytes < 0 || l.shared_bytes > kMaxShared)
      fail(std::to_string(l.shared_bytes) + " bytes of shared memory (0 to 1 MiB)");
    l.elements_per_thread = per_thread ? i32("elements per thread") : 1;
    const bool rows = l.grid == KernelLaunch::Grid::Rows;
    if (l.elements_per_thread < 1 || l.elements_per_thread > 64 || (rows && l.elements_per_thread != 1))
      fail(std::to_string(l.elements_per_thread) + " elements per thread" + (rows ? " for a row kernel" : ""));
    l.rows_per_block = rows_field ? i32("rows per block") : 1;
    if (rows ? l.rows_per_block != 1 && l.rows_per_block * 32 != l.block : l.rows_per_block != 1)
      fail(std::to_string(l.rows_per_block) + " rows per block of " + std::to_string(l.block) + " threads");
  }
  std::vector<uint32_t> kernel_units(size_t units) {
    at("");
    std::vector<uint32_t> of(count(4, "kernel count"));
    for (size_t i = 0; i < of.size(); ++i) {
      of[i] = u32("kernel unit");
      if (of[i] >= units)
        fail("plan kernel " + std::to_string(i) + " runs unit " + std::to_string(of[i]) + " of " +
             std::to_string(units));
    }
    if (remaining()) fail(std::to_string(remaining()) + " bytes after the last field");
    return of;
  }
  size_t remaining() const { return b_.size() - pos_; }

  static constexpr int32_t kMaxShared = 1 << 20;

 private:
  uint64_t le(int n, const char* field) {
    if (remaining() < static_cast<size_t>(n))
      fail(std::string(field) + " (" + std::to_string(n) + " bytes) runs past the end");
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  static bool is_identifier(const std::string& s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
    for (char c : s)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
  }

  std::string_view b_;
  std::string archive_;
  std::string where_;
  size_t pos_ = 0;
};

// The fixed fields of a unit (all but the strings' bytes): key 16, generic 1,
// symbol length 4, grid 1, block and shared bytes 8, then per format.
constexpr size_t kHeadBytes = 16 + 1 + 4 + 1 + 8;

}  // namespace

std::string write_cuda_archive(const CudaArchive& a) {
  Writer w;
  w.tag(kCudaArchiveTag, kCudaArchiveVersion);
  w.str(a.arch);
  w.u32(a.ptx_isa);
  w.count(a.units.size());
  for (const CudaUnit& u : a.units) {
    w.head(u);
    w.str(u.ptx);
    w.str(u.cubin);
  }
  w.units_of(a.kernel_units);
  return w.take();
}

CudaArchive read_cuda_archive(std::string_view bytes, uint32_t oldest_version) {
  Reader r(bytes, "CUDA kernels archive (" + std::string(kCudaArchiveTag) + ")");
  CudaArchive a;
  a.version = r.header(kCudaArchiveTag, oldest_version, kCudaArchiveVersion);
  a.arch = r.str("arch length");
  // "sm_90", "sm_90a": what the target compares with its own, and the tool prints.
  if (a.arch.size() < 4 || a.arch.size() > 16 || a.arch.compare(0, 3, "sm_") != 0 ||
      a.arch.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz_") != std::string::npos)
    r.fail("arch is not a GPU architecture (sm_<N>)");
  a.ptx_isa = r.u32("PTX ISA");
  // Version 1: no elements per thread; 2: no rows per block; + PTX and cubin lengths.
  const size_t unit_bytes = kHeadBytes + (a.version >= 2 ? 4 : 0) + (a.version >= 3 ? 4 : 0) + 4 + 4;
  a.units.resize(r.count(unit_bytes, "unit count"));
  for (size_t i = 0; i < a.units.size(); ++i) {
    CudaUnit& u = a.units[i];
    r.at("unit " + std::to_string(i));
    r.head(u, a.version >= 2, a.version >= 3);
    u.ptx = r.str("PTX length");
    u.cubin = r.str("cubin length");
    if (u.cubin.size() < 4 || u.cubin.compare(0, 4, "\x7f" "ELF") != 0) r.fail("no cubin (no ELF header)");
  }
  a.kernel_units = r.kernel_units(a.units.size());
  return a;
}

std::string write_sim_archive(const SimArchive& a) {
  Writer w;
  w.tag(kSimArchiveTag, kSimArchiveVersion);
  w.count(a.units.size());
  for (const SimUnit& u : a.units) {
    w.head(u);
    w.u8(u.meets ? 1 : 0);
    w.i32(u.host_shared_bytes);
    w.str(u.object);
  }
  w.units_of(a.kernel_units);
  return w.take();
}

SimArchive read_sim_archive(std::string_view bytes) {
  Reader r(bytes, "cuda-sim kernels archive (" + std::string(kSimArchiveTag) + ")");
  r.header(kSimArchiveTag, kSimArchiveVersion, kSimArchiveVersion);
  SimArchive a;
  // + elements per thread, rows per block, meets, host shared bytes, object length.
  a.units.resize(r.count(kHeadBytes + 4 + 4 + 1 + 4 + 4, "unit count"));
  for (size_t i = 0; i < a.units.size(); ++i) {
    SimUnit& u = a.units[i];
    r.at("unit " + std::to_string(i));
    r.head(u, true, true);
    u.meets = r.boolean("meets flag");
    u.host_shared_bytes = r.i32("host shared bytes");
    if (u.host_shared_bytes < 0 || u.host_shared_bytes > Reader::kMaxShared)
      r.fail(std::to_string(u.host_shared_bytes) + " bytes of host shared memory (0 to 1 MiB)");
    u.object = r.str("object length");
  }
  a.kernel_units = r.kernel_units(a.units.size());
  return a;
}

}  // namespace lazyjit::formats
