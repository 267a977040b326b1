// `lazyjit-cache show` on a cache entry holding a CUDA program, built without a
// GPU: the CUDA target with CudaOptions::arch named compiles a plan to PTX
// and cubins (ptxas from the nvidia-cuda-nvcc wheel, or the CUDA toolkit), the
// program is written into a temporary cache by cache::DiskStore with the
// manifest the runtime's disk tier writes (runtime/disk_tier.cpp), and the
// built tool (LAZYJIT_CACHE_TOOL, the lazyjit-cache target) is run on it.
//
// SASS needs nvdisasm or cuobjdump (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin,
// the tool's own rule): where one is installed (the GPU machine's CUDA
// toolkit) the tests assert the SASS, elsewhere the note naming what to
// install. The GPU check (scripts/gpu_check.sh) builds and runs every
// cuda*tests target, so the SASS path runs there.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cache/cache_key.h"
#include "cache/disk_store.h"
#include "graph_ir/hash.h"
#include "lowering/plan.h"
#include "lowering/program.h"
#include "lowering/program_bytes.h"
#include "targets/cuda_sim/sim_target.h"
#include "lowering/target.h"
#include "targets/cuda/cuda_target.h"
#include "tests/cache/disk_test_util.h"

#ifndef LAZYJIT_CACHE_TOOL
#error "LAZYJIT_CACHE_TOOL (the built lazyjit-cache) must be defined by the build"
#endif

namespace lazyjit {
namespace {

using nlohmann::json;
using ir::Attr;
using ir::DType;
using ir::OpKind;
using ir::ValueId;

ir::TensorType tt(DType t, std::vector<int64_t> sizes) { return {t, sizes, ir::contiguous_strides(sizes)}; }
Attr dt(DType t) { return Attr{static_cast<int64_t>(t)}; }

// softmax over the last dim of x[8,64] (a Rows kernel) and tanh(y) * y of
// y[1000] (an Elements kernel): two kernels, one of each launch shape.
ir::Graph two_kernels() {
  const DType t = DType::Float32;
  ir::Graph g;
  auto full = tt(t, {8, 64}), row = tt(t, {8, 1}), flat = tt(t, {1000});
  ValueId x = g.add_input(full);
  Attr red{std::vector<int64_t>{1}};
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(t), red}, row);
  ValueId e = g.add_node1(OpKind::Exp, {g.add_node1(OpKind::Sub, {x, m}, {dt(t)}, full)}, {dt(t)}, full);
  ValueId s = g.add_node1(OpKind::ReduceSum, {e}, {dt(t), red}, row);
  g.add_output(g.add_node1(OpKind::Div, {e, s}, {dt(t)}, full));
  ValueId y = g.add_input(flat);
  g.add_output(g.add_node1(OpKind::Mul, {g.add_node1(OpKind::Tanh, {y}, {dt(t)}, flat), y}, {dt(t)}, flat));
  return g;
}

// Code whose object is given bytes (another's, cut short or changed): an entry
// whose checksums hold but whose LJCU archive is damaged.
class RawCode : public lowering::CompiledCode {
 public:
  RawCode(std::string object, size_t keep = std::string::npos) : object_(object.substr(0, keep)) {}
  std::string object() const override { return object_; }
  const std::string& llvm_ir() const override { return none_; }

 private:
  std::string object_, none_;
};

json type_json(const ir::TensorType& t) {
  return {{"dtype", ir::dtype_name(t.dtype)}, {"sizes", t.sizes}, {"strides", t.strides}};
}

// Writes `p` into `dir` as the runtime's disk tier would; returns its key.
std::string write_entry(const std::string& dir, const lowering::Program& p, const std::string& fingerprint,
                        uint64_t shape_salt) {
  std::string warning;
  auto store = cache::DiskStore::open(cache::DiskStoreOptions{dir}, &warning);
  EXPECT_TRUE(store) << warning;
  if (!store) return "";
  cache::CacheKey key = cache::CacheKey::make(p.graph.hashes(), ir::hash64(fingerprint.data(), fingerprint.size()));
  key.shape ^= shape_salt;
  const ir::Graph& g = p.graph;
  json inputs = json::array(), outputs = json::array();
  for (ValueId v : g.inputs()) inputs.push_back(type_json(g.value(v).type));
  for (ValueId v : g.outputs()) outputs.push_back(type_json(g.value(v).type));
  char hex[40];
  json parts;
  parts["structure"] = key.structure.hex();
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)key.shape);
  parts["shape"] = hex;
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)key.target);
  parts["target"] = hex;
  json m = {
      {"format", 1},
      {"kind", "program"},
      {"key_parts", parts},
      {"code_fingerprint", fingerprint},
      {"target", {{"codegen", "cuda"}}},
      {"libtorch_version", "test"},
      {"created", 1.7e9},
      {"compile_ms", p.compile_ms},
      {"site", "tests/tools/cuda_cache_show_test.cpp"},
      {"ops", g.nodes().size() - g.inputs().size() - g.scalars().size()},
      {"kernels", p.plan.kernels.size()},
      {"aten_steps", 0},
      {"scalars", g.scalars().size()},
      {"inputs", inputs},
      {"outputs", outputs},
      {"object_bytes", p.code ? p.code->object().size() : 0},
      {"ir", g.str()},
      {"plan", p.plan.str(g)},
  };
  EXPECT_TRUE(store->put(key.str(), m.dump(), lowering::program_to_bytes(p)));
  return key.str();
}

struct ToolRun {
  int status = -1;  // the wait status
  std::string out;  // stdout and stderr
  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};
ToolRun run_tool(const std::string& args) {
  ToolRun r;
  std::string cmd = std::string("'") + LAZYJIT_CACHE_TOOL + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// Where the tool looks for a SASS disassembler (object_code.h: find_sass_tool).
std::string sass_tool() {
  std::vector<std::string> dirs;
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) dirs.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) dirs.push_back(std::string(home) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  for (const char* name : {"nvdisasm", "cuobjdump"})
    for (const std::string& d : dirs) {
      std::string f = d + "/" + name;
      struct stat st;
      if (::stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(f.c_str(), X_OK) == 0) return f;
    }
  return "";
}

// One CUDA program, compiled once, in a cache of its own, plus a copy of it
// whose kernel archive is truncated.
class CudaCacheShow : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cache::testing::TempDir();
    lowering::CudaOptions o;
    o.arch = "sm_90";
    std::unique_ptr<lowering::Target> target;
    try {
      target = lowering::make_cuda_target(o);
    } catch (const std::exception& e) {
      error_ = std::string("make_cuda_target(sm_90, load=false): ") + e.what() +
               " (run scripts/setup.sh: it installs the nvidia-cuda-nvcc and nvidia-nvvm wheels)";
      return;
    }
    lowering::Program p;
    p.graph = two_kernels();
    p.plan = lowering::plan_graph(p.graph);
    for (const auto& k : p.plan.kernels) {
      symbols_.push_back(k.name);
      grid_of_[k.name] = k.reduce_rank > 0 ? "rows" : "elements";
      block_of_[k.name] = k.launch.block;  // the plan's launch shape (lowering/launch_shape.h)
      rows_of_[k.name] = k.row ? k.launch.rows_per_block() : 1;
    }
    p.code = target->compile(p.graph, p.plan);
    p.compile_ms = 12.5;
    object_ = p.code->object();
    key_ = write_entry(dir_->cache(), p, target->fingerprint(), 0);
    // The same program, its archive cut in the middle of the first unit's PTX.
    p.code = std::make_unique<RawCode>(object_, 120);
    damaged_key_ = write_entry(dir_->cache(), p, target->fingerprint(), 0x1111111100000000ull);
    // Every length intact, the first unit's block 0 threads (which no target
    // launches); then its PTX length 2^32 - 16 (past the archive's end). Laid
    // out as targets/cuda/kernel_archive.h documents: "LJCU", u32 version, str
    // arch, u32 PTX ISA, u32 units; a unit: u64 key lo and hi, u8 generic,
    // str symbol, u8 grid, i32 block, i32 shared bytes, i32 elements per
    // thread, i32 rows per block, str PTX.
    const size_t unit = 4 + 4 + (4 + 5) + 4 + 4, symbol = unit + 16 + 1;
    const size_t block = symbol + 4 + le32(object_, symbol) + 1, ptx = block + 4 * 4;
    bad_block_ = object_;
    bad_block_.replace(block, 4, std::string(4, '\0'));
    p.code = std::make_unique<RawCode>(bad_block_);
    bad_block_key_ = write_entry(dir_->cache(), p, target->fingerprint(), 0x2222222200000000ull);
    std::string hostile = object_;
    hostile.replace(ptx, 4, "\xf0\xff\xff\xff");
    p.code = std::make_unique<RawCode>(hostile);
    hostile_key_ = write_entry(dir_->cache(), p, target->fingerprint(), 0x3333333300000000ull);
    target_ = target.release();
    // The same graph on cuda-sim: an LJCS archive of host object files.
    auto sim = lowering::make_cuda_sim_target();
    p.plan = lowering::plan_graph(p.graph);
    p.code = sim->compile(p.graph, p.plan);
    sim_key_ = write_entry(dir_->cache(), p, sim->fingerprint(), 0);
  }
  static void TearDownTestSuite() {
    // To look at the entries by hand: LAZYJIT_TEST_KEEP_CACHE=<new dir> keeps a copy.
    if (const char* keep = std::getenv("LAZYJIT_TEST_KEEP_CACHE"); keep && *keep && dir_) {
      std::error_code ec;
      std::filesystem::copy(dir_->cache(), keep, std::filesystem::copy_options::recursive, ec);
      std::fprintf(stderr, "kept the test cache in %s%s\n", keep, ec ? (": " + ec.message()).c_str() : "");
    }
    delete dir_;
    dir_ = nullptr;
    delete target_;
    target_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(error_, "");
    ASSERT_FALSE(key_.empty());
    ASSERT_EQ(symbols_.size(), 2u) << "the test graph should plan into a softmax and an elementwise kernel";
  }
  static std::string show(const std::string& key, const std::string& flags, int want_code = 0) {
    ToolRun r = run_tool("--dir '" + dir_->cache() + "' show " + key + " " + flags);
    EXPECT_TRUE(r.exited()) << "lazyjit-cache did not exit (a crash?): status " << r.status << "\n" << r.out;
    EXPECT_EQ(r.code(), want_code) << r.out;
    return r.out;
  }

  static inline cache::testing::TempDir* dir_ = nullptr;
  static uint32_t le32(const std::string& b, size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b.at(at + i));
    return v;
  }
  static inline lowering::Target* target_ = nullptr;
  static inline std::string error_, key_, damaged_key_, object_, bad_block_, bad_block_key_, hostile_key_, sim_key_;
  static inline std::vector<std::string> symbols_;
  static inline std::map<std::string, std::string> grid_of_;  // symbol -> "rows" or "elements"
  static inline std::map<std::string, int> block_of_, rows_of_;  // symbol -> block, rows a block
  // symbol -> elements a thread: the softmax's rows 1, the contiguous float32
  // elementwise kernel 4 (vectorized, targets/cuda/kernel_emitter.h).
  static int per_thread(const std::string& symbol) { return grid_of_[symbol] == "rows" ? 1 : 4; }
};

TEST_F(CudaCacheShow, TableNamesEachKernelsLaunchShapeAndArch) {
  std::string out = show(key_, "");
  EXPECT_NE(out.find("== CUDA kernels"), std::string::npos) << out;
  EXPECT_NE(out.find("target      cuda sm_90, PTX ISA 8.1; 2 plan kernels, 2 compiled"), std::string::npos) << out;
  const std::string table = out.substr(std::min(out.find("== CUDA kernels"), out.size()));
  for (const std::string& s : symbols_) {
    size_t at = table.find("\n" + s + " ");
    ASSERT_NE(at, std::string::npos) << s << "\n" << out;
    std::string row = table.substr(at + 1, table.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find(" " + grid_of_[s] + " "), std::string::npos) << row;
    EXPECT_NE(row.find(" " + std::to_string(block_of_[s]) + " "), std::string::npos) << "the plan's block\n" << row;
    if (grid_of_[s] == "rows") {
      EXPECT_EQ(rows_of_[s], 4) << "8 rows of 64: one warp a row, 4 a block";
      EXPECT_NE(row.find(" 4 (warp) "), std::string::npos) << row;
    }
    EXPECT_TRUE(std::regex_search(row, std::regex(" 0 B +" + std::to_string(per_thread(s)) + " ")))
        << "elements per thread after the shared bytes\n" << table;
  }
  EXPECT_NE(table.find("PER THREAD"), std::string::npos) << table;
  EXPECT_NE(table.find("ROWS/BLOCK"), std::string::npos) << table;
  EXPECT_EQ(out.find(".entry"), std::string::npos) << "PTX only with --asm\n" << out;
}

TEST_F(CudaCacheShow, AsmPrintsPtxAndSassOrSaysWhatToInstall) {
  std::string out = show(key_, "--asm");
  const std::string tool = sass_tool();
  size_t at = out.find("== assembly");
  ASSERT_NE(at, std::string::npos) << out;
  std::string listing = out.substr(at);
  for (const std::string& s : symbols_) {
    EXPECT_NE(listing.find("== kernel " + s), std::string::npos) << listing;
    EXPECT_NE(listing.find(".entry " + s), std::string::npos) << listing;
  }
  for (const std::string& s : symbols_)
    EXPECT_NE(listing.find("== kernel " + s + " (shape-generic): sm_90, PTX ISA 8.1, grid " + grid_of_[s] +
                           ", block " + std::to_string(block_of_[s]) + ", shared 0 B, " +
                           std::to_string(per_thread(s)) + " per thread" +
                           (grid_of_[s] == "rows" ? ", 4 rows a block (one warp a row)" : "") + "\n"),
              std::string::npos)
        << s << "\n" << listing;
  EXPECT_NE(listing.find(".target sm_90"), std::string::npos) << listing;
  if (tool.empty()) {
    EXPECT_NE(listing.find("SASS not shown: no nvdisasm or cuobjdump found"), std::string::npos) << listing;
    EXPECT_NE(listing.find("nvidia-cuda-nvdisasm"), std::string::npos) << "the note names what to install\n"
                                                                       << listing;
  } else {
    // Every kernel's SASS, from the cubin by the toolkit's disassembler.
    EXPECT_EQ(listing.find("SASS not shown"), std::string::npos) << tool << "\n" << listing;
    size_t first = listing.find("-- SASS (");
    ASSERT_NE(first, std::string::npos) << tool << "\n" << listing;
    EXPECT_NE(listing.find("-- SASS (", first + 1), std::string::npos) << "one SASS section per kernel\n" << listing;
    EXPECT_NE(listing.find("EXIT", first), std::string::npos) << "SASS instructions\n" << listing;
  }
}

TEST_F(CudaCacheShow, JsonHasKernelsPtxAndSassOrANote) {
  std::string out = show(key_, "--asm --json");
  json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["schema"], "lazyjit-cache/show/1");
  ASSERT_TRUE(j.contains("cuda")) << out;
  const json& c = j["cuda"];
  EXPECT_EQ(c["arch"], "sm_90");
  EXPECT_EQ(c["ptx_isa"], "8.1");
  ASSERT_EQ(c["kernels"].size(), 2u) << c.dump(2);
  EXPECT_EQ(c["plan_kernels"].size(), 2u);
  std::set<std::string> grids;
  for (const json& k : c["kernels"]) {
    std::string symbol = k["symbol"];
    EXPECT_NE(k["ptx"].get<std::string>().find(".entry " + symbol), std::string::npos) << symbol;
    EXPECT_EQ(k["block"], block_of_[symbol]);
    EXPECT_EQ(k["rows_per_block"], rows_of_[symbol]) << symbol;
    EXPECT_EQ(k["elements_per_thread"], per_thread(symbol)) << symbol;
    EXPECT_EQ(k["arch"], "sm_90");
    EXPECT_GT(k["cubin_bytes"].get<size_t>(), 0u);
    grids.insert(k["grid"].get<std::string>());
    EXPECT_EQ(k["grid"], grid_of_[symbol]) << symbol;
  }
  EXPECT_EQ(grids, (std::set<std::string>{"elements", "rows"}));
  EXPECT_TRUE(j["asm"].is_string());
  if (sass_tool().empty()) {
    EXPECT_TRUE(c["sass_tool"].is_null());
    for (const json& k : c["kernels"]) EXPECT_TRUE(k["sass"].is_null());
    ASSERT_TRUE(j.contains("notes")) << out;
    EXPECT_NE(j["notes"].dump().find("no nvdisasm or cuobjdump found"), std::string::npos) << j["notes"].dump();
  } else {
    EXPECT_TRUE(c["sass_tool"].is_string());
    for (const json& k : c["kernels"]) {
      ASSERT_TRUE(k["sass"].is_string()) << j.dump(2).substr(0, 4000);
      EXPECT_NE(k["sass"].get<std::string>().find("EXIT"), std::string::npos) << k["sass"];
    }
    EXPECT_FALSE(j.contains("notes")) << j["notes"].dump();
  }
  // Without --asm: the launch shapes, not the code.
  json plain = json::parse(show(key_, "--json"), nullptr, false);
  ASSERT_TRUE(plain.is_object());
  ASSERT_EQ(plain["cuda"]["kernels"].size(), 2u);
  EXPECT_FALSE(plain["cuda"]["kernels"][0].contains("ptx"));
  EXPECT_FALSE(plain.contains("asm"));
}

TEST_F(CudaCacheShow, TruncatedArchiveIsAClearErrorNotACrash) {
  ASSERT_FALSE(damaged_key_.empty());
  for (const char* flags : {"", "--asm"}) {
    std::string out = show(damaged_key_, flags);
    // Cut mid-PTX: the PTX's length runs past the archive's 120 bytes.
    EXPECT_NE(out.find("CUDA kernels archive (LJCU) is damaged: "), std::string::npos) << flags << "\n" << out;
    EXPECT_NE(out.find(" of 120)"), std::string::npos) << "says where the archive ends\n" << out;
    EXPECT_NE(out.find("== IR"), std::string::npos) << "the rest of the entry still shows\n" << out;
  }
  json j = json::parse(show(damaged_key_, "--asm --json"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_NE(j["cuda"]["error"].get<std::string>().find("is damaged"), std::string::npos) << j["cuda"].dump();
  EXPECT_TRUE(j["asm"].is_null());
  ASSERT_EQ(j["notes"].size(), 1u) << j["notes"].dump();
}

// The tool reads an archive as the targets load it (targets/cuda/kernel_archive.h):
// launch data no target would launch is damage, named, not a table to trust;
// a length past the end is refused before anything is allocated for it.
TEST_F(CudaCacheShow, WhatTheTargetRefusesTheToolCallsDamaged) {
  ASSERT_FALSE(bad_block_key_.empty());
  lowering::Plan plan = lowering::plan_graph(two_kernels());
  std::string refused = "(loaded)";
  try {
    target_->load(bad_block_, plan);
  } catch (const std::exception& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("unit 0 (" + symbols_[0] + "): block of 0 threads"), std::string::npos) << refused;
  std::string out = show(bad_block_key_, "");
  EXPECT_NE(out.find("CUDA kernels archive (LJCU) is damaged: unit 0 (" + symbols_[0] + "): block of 0 threads"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("PER THREAD"), std::string::npos) << "no table of what the archive claims\n" << out;
  out = show(hostile_key_, "--asm");
  EXPECT_NE(out.find("is damaged: unit 0 (" + symbols_[0] + "): PTX length 4294967280 exceeds the "),
            std::string::npos)
      << out;
}

// A cuda-sim entry's kernels are host object files in an LJCS archive: --asm
// disassembles them as a CPU entry's (before, the archive was taken for a
// damaged CPU one: "object code is not a kernel archive").
TEST_F(CudaCacheShow, AsmOfACudaSimEntryDisassemblesItsHostObjects) {
  ASSERT_FALSE(sim_key_.empty());
  std::string out = show(sim_key_, "--asm");
  EXPECT_EQ(out.find("not a kernel archive"), std::string::npos) << out;
  EXPECT_EQ(out.find("is damaged"), std::string::npos) << out;
  const bool objdump = std::system("command -v llvm-objdump-19 >/dev/null || command -v llvm-objdump >/dev/null || "
                                   "command -v objdump >/dev/null") == 0;
  for (const std::string& s : symbols_)
    if (objdump) EXPECT_NE(out.find("== kernel " + s), std::string::npos) << s << "\n" << out;
  if (objdump) EXPECT_NE(out.find("Disassembly of section"), std::string::npos) << out;
  else EXPECT_NE(out.find("no disassembler found"), std::string::npos) << out;
}

}  // namespace
}  // namespace lazyjit
