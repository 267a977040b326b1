// The GPU targets' kernel archives (targets/cuda/kernel_archive.h) on untrusted
// bytes: each truncation, hostile length, field out of range and random damage
// is an ArchiveError naming what is damaged, never a crash, an allocation of a
// hostile length, or an archive read wrong. The byte layout is checked against
// bytes written by hand from the documented format.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "targets/cuda/kernel_archive.h"

namespace lazyjit::formats {
namespace {

using Grid = KernelLaunch::Grid;

CudaArchive two_units() {
  CudaArchive a;
  a.arch = "sm_90";
  a.ptx_isa = 81;
  CudaUnit rows;
  rows.key_lo = 0x1122334455667788ull;
  rows.key_hi = 0x99aabbccddeeff00ull;
  rows.generic = true;
  rows.symbol = "fused_0";
  rows.launch = {Grid::Rows, 128, 0, 1, 4};
  rows.ptx = ".version 8.1\n.target sm_90\n.entry fused_0()\n{\n}\n";
  rows.cubin = std::string("\x7f" "ELF", 4) + std::string(60, '\x01');
  CudaUnit elems;
  elems.key_lo = 7;
  elems.symbol = "fused_1";
  elems.launch = {Grid::Elements, 256, 1024, 4, 1};
  elems.ptx = ".entry fused_1()";
  elems.cubin = std::string("\x7f" "ELF", 4) + "x";
  a.units = {rows, elems};
  a.kernel_units = {0, 1, 1};
  return a;
}

SimArchive sim_units() {
  SimArchive a;
  SimUnit u;
  u.key_lo = 3;
  u.symbol = "fused_2";
  u.launch = {Grid::Rows, 64, 0, 1, 1};
  u.meets = true;
  u.host_shared_bytes = 512;
  u.object = std::string("\x7f" "ELF", 4) + std::string(100, '\0');
  a.units = {u};
  a.kernel_units = {0, 0};
  return a;
}

void expect_same(const UnitHead& a, const UnitHead& b) {
  EXPECT_EQ(a.key_lo, b.key_lo);
  EXPECT_EQ(a.key_hi, b.key_hi);
  EXPECT_EQ(a.generic, b.generic);
  EXPECT_EQ(a.symbol, b.symbol);
  EXPECT_EQ(a.launch.grid, b.launch.grid);
  EXPECT_EQ(a.launch.block, b.launch.block);
  EXPECT_EQ(a.launch.shared_bytes, b.launch.shared_bytes);
  EXPECT_EQ(a.launch.elements_per_thread, b.launch.elements_per_thread);
  EXPECT_EQ(a.launch.rows_per_block, b.launch.rows_per_block);
}

template <class F>
std::string archive_error(F&& f) {
  try {
    f();
  } catch (const ArchiveError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(not an ArchiveError) ") + e.what();
  }
  return "(read)";
}

// Little-endian fields, written by hand (not by the archive's writer).
void u32(std::string& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
}
void u64(std::string& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
}
void str(std::string& b, const std::string& s) {
  u32(b, static_cast<uint32_t>(s.size()));
  b += s;
}

TEST(KernelArchive, CudaBytesAreTheDocumentedLayout) {
  const CudaArchive a = two_units();
  std::string b = "LJCU";
  u32(b, 3);
  str(b, "sm_90");
  u32(b, 81);
  u32(b, 2);
  for (const CudaUnit& u : a.units) {
    u64(b, u.key_lo);
    u64(b, u.key_hi);
    b.push_back(u.generic ? 1 : 0);
    str(b, u.symbol);
    b.push_back(u.launch.grid == Grid::Rows ? 1 : 0);
    u32(b, u.launch.block);
    u32(b, u.launch.shared_bytes);
    u32(b, u.launch.elements_per_thread);
    u32(b, u.launch.rows_per_block);
    str(b, u.ptx);
    str(b, u.cubin);
  }
  u32(b, 3);
  for (uint32_t k : a.kernel_units) u32(b, k);
  EXPECT_EQ(write_cuda_archive(a), b);

  const CudaArchive back = read_cuda_archive(b);
  EXPECT_EQ(back.version, 3u);
  EXPECT_EQ(back.arch, "sm_90");
  EXPECT_EQ(back.ptx_isa, 81u);
  ASSERT_EQ(back.units.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    expect_same(back.units[i], a.units[i]);
    EXPECT_EQ(back.units[i].ptx, a.units[i].ptx);
    EXPECT_EQ(back.units[i].cubin, a.units[i].cubin);
  }
  EXPECT_EQ(back.kernel_units, a.kernel_units);
}

TEST(KernelArchive, SimRoundTrips) {
  const SimArchive a = sim_units();
  const std::string b = write_sim_archive(a);
  EXPECT_EQ(b.substr(0, 8), std::string("LJCS\x01\0\0\0", 8));
  const SimArchive back = read_sim_archive(b);
  ASSERT_EQ(back.units.size(), 1u);
  expect_same(back.units[0], a.units[0]);
  EXPECT_TRUE(back.units[0].meets);
  EXPECT_EQ(back.units[0].host_shared_bytes, 512);
  EXPECT_EQ(back.units[0].object, a.units[0].object);
  EXPECT_EQ(back.kernel_units, a.kernel_units);
}

TEST(KernelArchive, EveryTruncationIsAnArchiveError) {
  const std::string cuda = write_cuda_archive(two_units()), sim = write_sim_archive(sim_units());
  for (size_t n = 0; n < cuda.size(); ++n) {
    std::string e = archive_error([&] { read_cuda_archive(cuda.substr(0, n)); });
    ASSERT_EQ(e.rfind("lazyjit: ", 0), 0u) << "cut at " << n << ": " << e;
    ASSERT_NE(e.find("CUDA kernels archive (LJCU)"), std::string::npos) << e;
  }
  for (size_t n = 0; n < sim.size(); ++n) {
    std::string e = archive_error([&] { read_sim_archive(sim.substr(0, n)); });
    ASSERT_NE(e.find("cuda-sim kernels archive (LJCS)"), std::string::npos) << "cut at " << n << ": " << e;
  }
  EXPECT_NE(archive_error([&] { read_cuda_archive(cuda + "x"); }).find("1 bytes after the last field"),
            std::string::npos);
}

// A length is refused when the bytes left cannot hold it, naming the field
// and the unit: nothing is allocated for it.
TEST(KernelArchive, HostileLengthsAreRefusedByName) {
  const std::string b = write_cuda_archive(two_units());
  const size_t units_at = 4 + 4 + 4 + 5 + 4, unit0 = units_at + 4;
  const size_t symbol0 = unit0 + 17, ptx0 = symbol0 + 4 + 7 + 1 + 16;
  auto with = [&](size_t at, uint32_t v) {
    std::string c = b;
    for (int i = 0; i < 4; ++i) c[at + i] = static_cast<char>(v >> (8 * i));
    return c;
  };
  std::string e = archive_error([&] { read_cuda_archive(with(units_at, 0xffffffffu)); });
  EXPECT_NE(e.find("is damaged: unit count 4294967295 (of at least 46 bytes each) exceeds the "), std::string::npos) << e;
  e = archive_error([&] { read_cuda_archive(with(8, 0xfffffff0u)); });
  EXPECT_NE(e.find("arch length 4294967280 exceeds the "), std::string::npos) << e;
  e = archive_error([&] { read_cuda_archive(with(symbol0, 0x7fffffffu)); });
  EXPECT_NE(e.find("unit 0: symbol length 2147483647 exceeds the "), std::string::npos) << e;
  e = archive_error([&] { read_cuda_archive(with(ptx0, 0xfffffff0u)); });
  EXPECT_NE(e.find("unit 0 (fused_0): PTX length 4294967280 exceeds the "), std::string::npos) << e;
  e = archive_error([&] { read_cuda_archive(with(b.size() - 4 * 4, 0x40000000u)); });
  EXPECT_NE(e.find("kernel count 1073741824 (of at least 4 bytes each) exceeds the 12 bytes left"), std::string::npos)
      << e;
  SimArchive s;
  std::string sb = write_sim_archive(s);
  sb.replace(8, 4, "\xff\xff\xff\x0f");
  e = archive_error([&] { read_sim_archive(sb); });
  EXPECT_NE(e.find("unit count 268435455 (of at least 47 bytes each) exceeds the 4 bytes left"), std::string::npos)
      << e;
}

TEST(KernelArchive, FieldsOutOfRangeAreNamed) {
  auto refused = [](const std::function<void(CudaArchive&)>& change) {
    CudaArchive a = two_units();
    change(a);
    return archive_error([&] { read_cuda_archive(write_cuda_archive(a)); });
  };
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].launch.block = 0; }).find("unit 1 (fused_1): block of 0 threads"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].launch.block = 48; }).find("block of 48 threads"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].launch.block = 2048; }).find("block of 2048 threads"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].launch.shared_bytes = -4; }).find("-4 bytes of shared memory"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].launch.elements_per_thread = 0; }).find("0 elements per thread"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[0].launch.elements_per_thread = 4; })
                .find("4 elements per thread for a row kernel"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[0].launch.rows_per_block = 3; })
                .find("3 rows per block of 128 threads"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].launch.rows_per_block = 8; }).find("8 rows per block"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[0].symbol = "fused\x1b[31m"; }).find("unit 0: symbol is not a PTX identifier"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[0].symbol = ""; }).find("symbol is not a PTX identifier"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.units[1].cubin = "ELF?"; }).find("unit 1 (fused_1): no cubin (no ELF header)"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.arch = "sm_90\n"; }).find("arch is not a GPU architecture"),
            std::string::npos);
  EXPECT_NE(refused([](CudaArchive& a) { a.kernel_units[2] = 2; }).find("plan kernel 2 runs unit 2 of 2"),
            std::string::npos);
  // Bytes the writer never makes: a grid kind, a bool.
  std::string b = write_cuda_archive(two_units());
  const size_t unit0 = 4 + 4 + 4 + 5 + 4 + 4;
  std::string c = b;
  c[unit0 + 16] = 2;
  EXPECT_NE(archive_error([&] { read_cuda_archive(c); }).find("unit 0: generic flag is byte 2, not 0 or 1"),
            std::string::npos);
  c = b;
  c[unit0 + 16 + 1 + 4 + 7] = 5;
  EXPECT_NE(archive_error([&] { read_cuda_archive(c); }).find("unit 0 (fused_0): unknown grid kind 5"),
            std::string::npos);
  SimArchive s = sim_units();
  s.units[0].host_shared_bytes = (1 << 20) + 1;
  EXPECT_NE(archive_error([&] { read_sim_archive(write_sim_archive(s)); }).find("1048577 bytes of host shared memory"),
            std::string::npos);
}

TEST(KernelArchive, OtherTagsAndVersions) {
  std::string b = write_cuda_archive(two_units());
  EXPECT_NE(archive_error([&] { read_sim_archive(b); }).find("not a cuda-sim kernels archive (LJCS)"),
            std::string::npos);
  EXPECT_NE(archive_error([&] { read_cuda_archive(write_sim_archive(sim_units())); })
                .find("not a CUDA kernels archive (LJCU)"),
            std::string::npos);
  std::string v4 = b;
  v4[4] = 4;
  EXPECT_NE(archive_error([&] { read_cuda_archive(v4, 1); }).find("has format version 4; this build reads versions 1 to 3"),
            std::string::npos);
  // Version 2 (no rows per block): refused by a target, read by the cache tool.
  // Written by hand: one element kernel of 4 elements a thread.
  std::string v2 = "LJCU";
  u32(v2, 2);
  str(v2, "sm_80");
  u32(v2, 81);
  u32(v2, 1);
  u64(v2, 1);
  u64(v2, 2);
  v2.push_back(0);
  str(v2, "fused_0");
  v2.push_back(0);
  u32(v2, 256);
  u32(v2, 0);
  u32(v2, 4);
  str(v2, ".entry fused_0");
  str(v2, "\x7f" "ELF");
  u32(v2, 1);
  u32(v2, 0);
  EXPECT_NE(archive_error([&] { read_cuda_archive(v2); }).find("has format version 2; this build reads version 3"),
            std::string::npos);
  CudaArchive a = read_cuda_archive(v2, 1);
  EXPECT_EQ(a.version, 2u);
  ASSERT_EQ(a.units.size(), 1u);
  EXPECT_EQ(a.units[0].launch.elements_per_thread, 4);
  EXPECT_EQ(a.units[0].launch.rows_per_block, 1);
}

// Random damage: each read either fails with an ArchiveError or gives an
// archive whose every field is in range (the reader's checks are all or nothing).
TEST(KernelArchive, RandomDamageIsAnArchiveErrorOrInRange) {
  const std::string cuda = write_cuda_archive(two_units()), sim = write_sim_archive(sim_units());
  std::mt19937 rng(50);
  int refused = 0, read = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool is_cuda = i % 2 == 0;
    std::string b = is_cuda ? cuda : sim;
    if (i % 10 == 9) {  // garbage after a valid header
      for (size_t j = 8; j < b.size(); ++j) b[j] = static_cast<char>(rng());
    } else {
      for (int flips = 1 + rng() % 3; flips > 0; --flips) b[rng() % b.size()] = static_cast<char>(rng());
    }
    try {
      std::vector<const UnitHead*> heads;
      CudaArchive c;
      SimArchive s;
      if (is_cuda) {
        c = read_cuda_archive(b, 1);
        for (const CudaUnit& u : c.units) heads.push_back(&u);
      } else {
        s = read_sim_archive(b);
        for (const SimUnit& u : s.units) heads.push_back(&u);
      }
      for (const UnitHead* h : heads) {
        ASSERT_TRUE(h->launch.block >= 32 && h->launch.block <= 1024 && h->launch.block % 32 == 0);
        ASSERT_TRUE(h->launch.elements_per_thread >= 1 && h->launch.elements_per_thread <= 64);
        ASSERT_TRUE(h->launch.shared_bytes >= 0);
        ASSERT_FALSE(h->symbol.empty());
      }
      for (uint32_t k : is_cuda ? c.kernel_units : s.kernel_units) ASSERT_LT(k, heads.size());
      ++read;
    } catch (const ArchiveError& e) {
      ASSERT_NE(std::string(e.what()).find(" archive (LJC"), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 10000) << read << " read";
}

}  // namespace
}  // namespace lazyjit::formats
