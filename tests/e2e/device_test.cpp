// End to end through libtorch: the lazyjit device from C++, with eager as oracle.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "tracer/lazyjit.h"

namespace {

int64_t counter(const char* name) { return lazyjit::metrics().counters.at(name); }

class Lazyjit : public ::testing::Test {
 protected:
  void SetUp() override {
    lazyjit::set_mode(lazyjit::Mode::Lazy);
    lazyjit::clear_cache();
    lazyjit::reset_metrics();
    torch::manual_seed(0);
  }
  void TearDown() override { lazyjit::set_mode(lazyjit::Mode::Lazy); }
};

torch::Tensor lz(const torch::Tensor& t) { return t.to(lazyjit::device()); }

// PyTorch's float32 tolerances; same shape and dtype required.
::testing::AssertionResult close(const torch::Tensor& got, const torch::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure() << "shape/dtype " << got.sizes() << got.scalar_type()
                                         << " vs " << want.sizes() << want.scalar_type();
  if (torch::allclose(got.to(torch::kDouble), want.to(torch::kDouble), 1.3e-6, 1e-5, /*equal_nan=*/true))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |diff| "
                                       << (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
}
#define EXPECT_CLOSE(a, b) EXPECT_TRUE(close((a), (b)))

}  // namespace

TEST_F(Lazyjit, RoundTripEveryDtype) {
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kInt8,
                  torch::kInt16, torch::kInt, torch::kLong, torch::kByte, torch::kBool}) {
    auto x = (torch::randn({3, 5}) * 10).to(dt);
    auto y = lz(x);
    EXPECT_EQ(y.device().type(), c10::DeviceType::PrivateUse1);
    EXPECT_EQ(y.scalar_type(), dt);
    EXPECT_TRUE(torch::equal(y.cpu(), x)) << dt;
  }
}

TEST_F(Lazyjit, RecordsWithoutRunningUntilSync) {
  auto x = torch::randn({4, 6});
  auto y = (lz(x) * 2.5 + 1).sigmoid().sum(1);
  EXPECT_EQ(y.sizes(), torch::IntArrayRef({4}));  // shape known at once
  EXPECT_EQ(counter("graphs_executed"), 0);
  lazyjit::sync();
  EXPECT_EQ(counter("graphs_executed"), 1);
  EXPECT_CLOSE(y.cpu(), (x * 2.5 + 1).sigmoid().sum(1));
}

TEST_F(Lazyjit, FusedChainMatchesEager) {
  auto x = torch::randn({33, 65}), b = torch::randn({65});
  auto f = [](const torch::Tensor& x, const torch::Tensor& b) {
    auto y = x + b;
    return 0.5 * y * (1 + torch::tanh(0.7978845608 * (y + 0.044715 * y * y * y)));
  };
  EXPECT_CLOSE(f(lz(x), lz(b)).cpu(), f(x, b));
  EXPECT_EQ(counter("compiles"), 1);
}

TEST_F(Lazyjit, RepeatingAStepHitsTheCacheAndANewShapeCompilesOnce) {
  auto w = lz(torch::randn({16, 16}));
  auto step = [&](int64_t batch) {
    auto x = torch::randn({batch, 16});
    auto y = torch::relu(torch::mm(lz(x), w) + 1).cpu();
    EXPECT_CLOSE(y, torch::relu(torch::mm(x, w.cpu()) + 1));
  };
  step(8);
  step(8);
  EXPECT_EQ(counter("cache_misses"), 1);
  EXPECT_EQ(counter("cache_hits"), 1);
  step(9);
  step(9);
  EXPECT_EQ(counter("cache_misses"), 2);
  EXPECT_EQ(counter("cache_hits"), 2);
  EXPECT_EQ(lazyjit::metrics().cache_misses.at("new shapes for a known graph"), 1);
}

TEST_F(Lazyjit, ChangingAScalarDoesNotRecompile) {
  auto x = torch::randn({10});
  for (double lr : {0.1, 0.01, 0.001}) EXPECT_CLOSE((lz(x) * lr).cpu(), x * lr);
  EXPECT_EQ(counter("cache_misses"), 1);
  EXPECT_EQ(counter("cache_hits"), 2);
}

TEST_F(Lazyjit, DeviceMismatchRaisesPyTorchsError) {
  auto a = lz(torch::randn({3})), b = torch::randn({3});
  try {
    (void)(a + b);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Expected all tensors to be on the same device"), std::string::npos);
  }
  // A 0-d CPU tensor is allowed, as on CUDA.
  EXPECT_CLOSE((a * torch::tensor(3.0)).cpu(), a.cpu() * 3);
}

TEST_F(Lazyjit, InPlaceThroughAViewUpdatesTheBase) {
  auto x = torch::randn({4, 6});
  auto lx = lz(x);
  lx.select(0, 1).mul_(10);
  lx.t().narrow(0, 2, 2).add_(1);
  x.select(0, 1).mul_(10);
  x.t().narrow(0, 2, 2).add_(1);
  EXPECT_CLOSE(lx.cpu(), x);
}

TEST_F(Lazyjit, UnloweredOpsRunThroughTheirCpuKernel) {
  auto x = torch::randn({20});
  auto nz = torch::nonzero(lz(x) > 0);  // data-dependent size: cuts the graph
  EXPECT_CLOSE(nz.cpu(), torch::nonzero(x > 0));
  EXPECT_EQ(lazyjit::metrics().fallbacks.at("aten::nonzero"), 1);
}

TEST_F(Lazyjit, StepModeCallsHooksOncePerOpInOrderAndMatchesLazy) {
  auto x = torch::randn({5, 5});
  auto f = [](const torch::Tensor& t) { return (t * 2).relu() + t; };
  auto lazy = f(lz(x)).cpu();
  std::vector<std::string> ops;
  std::vector<torch::Tensor> mul_out;
  auto h = lazyjit::add_op_hook([&](const lazyjit::OpEvent& e) {
    ops.push_back(e.op);
    if (e.op == "aten::mul.Tensor") mul_out.push_back(e.outputs.at(0).toTensor());
  });
  lazyjit::set_mode("step");
  auto lx = lz(x);
  ops.clear();
  auto step = f(lx);
  EXPECT_EQ(ops, (std::vector<std::string>{"aten::mul.Tensor", "aten::relu", "aten::add.Tensor"}));
  ASSERT_EQ(mul_out.size(), 1u);
  EXPECT_CLOSE(mul_out[0], x * 2);
  EXPECT_CLOSE(step.cpu(), lazy);
  EXPECT_CLOSE(lazy, f(x));
  h.remove();
  ops.clear();
  (void)f(lx);
  EXPECT_TRUE(ops.empty());
}

TEST_F(Lazyjit, MatmulStepsMatchEager) {
  auto a = torch::randn({3, 7, 5}), b = torch::randn({3, 5, 4}), bias = torch::randn({4});
  EXPECT_CLOSE(torch::bmm(lz(a), lz(b)).cpu(), torch::bmm(a, b));
  auto m = torch::randn({7, 5}), w = torch::randn({4, 5});
  EXPECT_CLOSE(torch::linear(lz(m), lz(w), lz(bias)).cpu(), torch::linear(m, w, bias));
  EXPECT_CLOSE(torch::addmm(lz(bias), lz(m), lz(w).t()).cpu(), torch::addmm(bias, m, w.t()));
}

TEST_F(Lazyjit, MetricsReportIsReadable) {
  (lz(torch::ones({2})) + 1).cpu();
  std::string r = lazyjit::metrics_report();
  for (const char* k : {"ops_traced", "graphs_executed", "compiles", "cache_hits", "cache_misses", "syncs"})
    EXPECT_NE(r.find(k), std::string::npos) << k;
}

TEST_F(Lazyjit, SyncsAndFallbacksNameTheCallersFileAndLine) {
  auto x = lz(torch::randn({8}));
  auto y = (x + 1).cpu();  // the sync
  (void)y;
  auto nz = torch::nonzero(x);  // a fallback
  (void)nz;
  auto m = lazyjit::metrics();
  ASSERT_EQ(m.syncs.size(), 1u);
  EXPECT_NE(m.syncs.begin()->first.find("device_test.cpp:"), std::string::npos) << m.syncs.begin()->first;
  ASSERT_EQ(m.fallback_sites.size(), 1u);
  EXPECT_NE(m.fallback_sites.begin()->first.find("aten::nonzero: needs data @ "), std::string::npos);
  EXPECT_NE(m.fallback_sites.begin()->first.find("device_test.cpp:"), std::string::npos);
}

// Each thread records a graph of its own: two threads training separate
// models, backward() included (autograd runs it on its own device thread),
// make one graph per step each and compile what one thread compiles.
TEST_F(Lazyjit, ThreadsTrainingSeparateModelsRecordSeparateGraphs) {
  auto step = [](const torch::Tensor& w, const torch::Tensor& x) {
    auto wl = w.to(lazyjit::device()).requires_grad_();
    auto loss = torch::tanh(torch::mm(x.to(lazyjit::device()), wl)).pow(2).mean();
    loss.backward();
    return std::make_pair(loss.item<float>(), wl.grad().cpu());
  };
  std::vector<torch::Tensor> ws{torch::randn({16, 8}), torch::randn({16, 8})};
  std::vector<torch::Tensor> xs{torch::randn({4, 16}), torch::randn({4, 16})};
  std::vector<std::pair<float, torch::Tensor>> got(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&, i] { got[i] = step(ws[i], xs[i]); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter("graphs_executed"), 2);
  EXPECT_EQ(counter("compiles"), 1);
  for (int i = 0; i < 2; ++i) {
    auto w = ws[i].clone().requires_grad_();
    auto loss = torch::tanh(torch::mm(xs[i], w)).pow(2).mean();
    loss.backward();
    EXPECT_NEAR(got[i].first, loss.item<float>(), 1e-5);
    EXPECT_CLOSE(got[i].second, w.grad());
  }
}

// A tensor one thread recorded is computed when another thread reads it, and
// a write by the other thread is seen by the first.
TEST_F(Lazyjit, ATensorRecordedInOneThreadIsReadAndWrittenInAnother) {
  auto x = torch::randn({5, 7});
  auto y = lz(x).exp();  // pending in this thread's graph
  auto before = y * 2;
  torch::Tensor seen;
  std::thread([&] {
    seen = (y + 1).cpu();
    y.mul_(3);
  }).join();
  EXPECT_CLOSE(seen, x.exp() + 1);
  EXPECT_CLOSE(before.cpu(), x.exp() * 2);
  EXPECT_CLOSE(y.cpu(), x.exp() * 3);
}
