// The debug mode from C++ (issue: "a debug mode that finds the bug"): step-mode
// regions, lazy op hooks, NaN pinning, strict regions and the compiled-vs-eager
// check, with eager as the oracle. CheckGraphs.FindsAPlantedFault runs only
// with LAZYJIT_FAULT=mul (ctest runs it so, as e2e_fault_mul).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tracer/lazyjit.h"

namespace {

torch::Tensor lz(const torch::Tensor& t) { return t.to(lazyjit::device()); }

bool close(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::allclose(a.to(torch::kDouble), b.to(torch::kDouble), 1e-5, 1e-6);
}

bool faulty() {
  const char* f = std::getenv("LAZYJIT_FAULT");
  return f && *f;
}

}  // namespace

TEST(StepRegion, EqualsLazyAndRunsHooksOnlyInside) {
  if (faulty()) GTEST_SKIP() << "LAZYJIT_FAULT is set";
  auto x = torch::randn({4, 8});
  int step_ops = 0;
  lazyjit::HookHandle h = lazyjit::add_op_hook([&](const lazyjit::OpEvent& e) {
    ++step_ops;
    EXPECT_FALSE(e.lazy);
    EXPECT_EQ(e.index, -1);
    EXPECT_GE(e.duration_ms, 0);
  });
  auto lazy = ((lz(x) * 2).tanh() + 1).cpu();
  EXPECT_EQ(step_ops, 0);
  lazyjit::step_region_enter();
  EXPECT_EQ(lazyjit::mode(), lazyjit::Mode::Step);
  auto stepped = ((lz(x) * 2).tanh() + 1).cpu();
  lazyjit::step_region_exit();
  h.remove();
  EXPECT_EQ(lazyjit::mode(), lazyjit::Mode::Lazy);
  EXPECT_GE(step_ops, 3);
  EXPECT_TRUE(close(stepped, (x * 2).tanh() + 1));
  EXPECT_TRUE(close(lazy, stepped));
}

TEST(LazyHooks, SeeEachOpOfACompiledGraphWithItsValues) {
  if (faulty()) GTEST_SKIP() << "LAZYJIT_FAULT is set";
  auto x = torch::randn({4, 8}), w = torch::randn({8, 8});
  std::vector<lazyjit::OpEvent> seen;
  lazyjit::HookHandle h = lazyjit::add_op_hook([&](const lazyjit::OpEvent& e) { seen.push_back(e); }, /*lazy=*/true);
  auto y = (torch::relu(lz(x) * 3).mm(lz(w))).cpu();
  h.remove();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].op, "aten::mul.Tensor");
  EXPECT_EQ(seen[1].op, "aten::relu");
  EXPECT_EQ(seen[2].op, "aten::mm");
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_TRUE(seen[i].lazy);
    if (i) EXPECT_GT(seen[i].index, seen[i - 1].index);
    EXPECT_GE(seen[i].kernel_ms, seen[i].duration_ms);
  }
  EXPECT_EQ(seen[0].kernel.rfind("fused_", 0), 0u) << seen[0].kernel;
  EXPECT_TRUE(close(seen[1].outputs.at(0).toTensor(), torch::relu(x * 3)));
  EXPECT_TRUE(close(seen[2].inputs.at(0).toTensor(), torch::relu(x * 3)));
  EXPECT_TRUE(close(y, torch::relu(x * 3).mm(w)));
}

TEST(DebugNans, NamesTheOpThatMadeTheNan) {
  if (faulty()) GTEST_SKIP() << "LAZYJIT_FAULT is set";
  lazyjit::debug_nans(true);
  auto x = torch::tensor({1.0f, -1.0f, 2.0f});
  auto y = (torch::log(lz(x)) * 2 + 1);
  try {
    y.cpu();
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("log (op #"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 NaN"), std::string::npos) << msg;
  }
  lazyjit::debug_nans(false);
  EXPECT_TRUE(torch::allclose(y.cpu(), torch::log(x) * 2 + 1, 1e-5, 1e-6, /*equal_nan=*/true));
}

TEST(Strict, RaisesOnAnImplicitSyncAndNotOnAnExplicitOne) {
  if (faulty()) GTEST_SKIP() << "LAZYJIT_FAULT is set";
  auto x = lz(torch::ones({3}));
  auto warm = (x + 1).cpu();  // compiled before the region
  lazyjit::strict_enter();
  auto y = x + 1;
  EXPECT_THROW(y.cpu(), std::exception);
  lazyjit::sync();  // explicit: allowed, and a cache hit
  lazyjit::strict_exit();
  EXPECT_TRUE(close(y.cpu(), torch::full({3}, 2.0f)));
}

TEST(CheckGraphs, NoFalseAlarmOnCorrectCode) {
  if (faulty()) GTEST_SKIP() << "LAZYJIT_FAULT is set";
  std::string dir = (std::filesystem::temp_directory_path() / "lazyjit_cpp_check_ok").string();
  std::filesystem::remove_all(dir);
  lazyjit::check_graphs(true, dir);
  auto x = torch::randn({8, 32});
  auto got = torch::softmax(torch::tanh(lz(x)) * 3, -1).sum(-1).cpu();
  lazyjit::check_graphs(false);
  EXPECT_TRUE(close(got, torch::softmax(torch::tanh(x) * 3, -1).sum(-1)));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(CheckGraphs, FindsAPlantedFault) {
  const char* f = std::getenv("LAZYJIT_FAULT");
  if (!f || std::string(f) != "mul") GTEST_SKIP() << "runs with LAZYJIT_FAULT=mul (ctest: e2e_fault_mul)";
  std::string dir = (std::filesystem::temp_directory_path() / "lazyjit_cpp_check_fault").string();
  std::filesystem::remove_all(dir);
  lazyjit::check_graphs(true, dir);
  auto x = torch::rand({4, 16}) + 0.5;
  auto y = (lz(x) * 3 + 1).exp();
  try {
    y.cpu();
    ADD_FAILURE() << "the planted fault was not found";
  } catch (const lazyjit::CheckError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("mul (op #"), std::string::npos) << msg;
    EXPECT_NE(msg.find("generated kernel fused_"), std::string::npos) << msg;
  }
  lazyjit::check_graphs(false);
  ASSERT_TRUE(std::filesystem::exists(dir));
  std::string repro = std::filesystem::directory_iterator(dir)->path().string();
  std::string again = lazyjit::run_repro(repro);
  EXPECT_NE(again.find("mul (op #"), std::string::npos) << again;
}
