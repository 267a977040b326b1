// Programs are artifacts: a compiled program written to bytes and read back
// (object code linked, no LLVM codegen) runs bitwise equal to the original, for
// plans with fused elementwise kernels, row kernels and ATen library steps.
// Eager ATen is the oracle for what the program computes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "debug/metrics.h"
#include "executor/executable.h"
#include "lowering/program_bytes.h"
#include "lowering/target.h"
#include "targets/cpu/cpu_target.h"
#include "runtime/runtime.h"
#include "test_graphs.h"
#include "tests/executor/cpu_execution.h"

using namespace lazyjit;
using namespace test_graphs;

namespace {

// Bytes back to a program, linked into a target of the test's own: the
// runtime's only way from bytes to a program is a verified cache entry
// (runtime/program_entry.h); these tests check the bytes themselves.
std::shared_ptr<const lowering::Program> from_bytes(const std::string& bytes) {
  static std::unique_ptr<lowering::Target> target = lowering::make_cpu_target();
  return lowering::program_from_bytes(bytes, *target);
}

struct Case {
  ir::Graph g;
  executor::Bindings b;
  ValueId z, u, mm;
};

// mm = x @ w (an ATen step); z = gelu(softmax(mm) * alpha) (a row kernel);
// u = tanh(x + x) (an elementwise kernel). alpha is a scalar argument.
Case make_case() {
  Case c;
  ir::Graph& g = c.g;
  ValueId x = g.add_input(f32({64, 256}));
  ValueId w = g.add_input(f32({256, 96}));
  ValueId alpha = g.add_scalar(DType::Float64);
  c.mm = g.add_node(OpKind::Aten, {x, w}, {Attr{std::string("aten::mm")}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}},
                    {f32({64, 96})})[0];
  Attr dims{std::vector<int64_t>{1}};
  ValueId m = g.add_node1(OpKind::ReduceMax, {c.mm}, {dt(DType::Float32), dims}, f32({64, 1}));
  ValueId d = g.add_node1(OpKind::Sub, {c.mm, m}, {dt(DType::Float32)}, f32({64, 96}));
  ValueId e = g.add_node1(OpKind::Exp, {d}, {dt(DType::Float32)}, f32({64, 96}));
  ValueId s = g.add_node1(OpKind::ReduceSum, {e}, {dt(DType::Float32), dims}, f32({64, 1}));
  ValueId y = g.add_node1(OpKind::Div, {e, s}, {dt(DType::Float32)}, f32({64, 96}));
  ValueId ya = g.add_node1(OpKind::Mul, {y, alpha}, {dt(DType::Float32)}, f32({64, 96}));
  c.z = g.add_node1(OpKind::Gelu, {ya}, {dt(DType::Float32)}, f32({64, 96}));
  ValueId xx = g.add_node1(OpKind::Add, {x, x}, {dt(DType::Float32)}, f32({64, 256}));
  c.u = g.add_node1(OpKind::Tanh, {xx}, {dt(DType::Float32)}, f32({64, 256}));
  g.add_output(c.z);
  g.add_output(c.u);
  g.add_output(c.mm);
  torch::manual_seed(0);
  double a = 1.75;
  int64_t slot;
  std::memcpy(&slot, &a, sizeof slot);
  c.b = executor::Bindings{{torch::randn({64, 256}), torch::randn({256, 96}) * 0.1}, {slot}};
  return c;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace

TEST(ProgramBytes, RoundTripRunsBitwiseEqualWithoutCodegen) {
  Case c = make_case();
  auto p = rt().compile(std::move(c.g), "roundtrip");
  // The plan holds every kind of step the claim is about.
  int row = 0, plain = 0, aten = 0;
  for (const auto& k : p->plan.kernels) (k.row ? row : plain)++;
  for (const auto& s : p->plan.steps) aten += s.kind == lowering::Step::Kind::Aten;
  ASSERT_GE(row, 1);
  ASSERT_GE(plain, 1);
  ASSERT_GE(aten, 1);

  const at::Tensor x0 = c.b.inputs[0].clone(), w0 = c.b.inputs[1].clone();
  // Eager's reference before the run too: a rare failure (under ctest -j2) had
  // eager's tanh, not the kernel's, one element off; this tells whether the run
  // changed what eager computes afterwards.
  const at::Tensor u_before = at::tanh(x0 * 2);
  executor::Executable e1(p, cpu_execution());
  auto out1 = e1.run(c.b, 2).outputs;
  EXPECT_TRUE(bitwise_equal(c.b.inputs[0], x0) && bitwise_equal(c.b.inputs[1], w0)) << "the run wrote an input";

  // Eager is the oracle for what it computes.
  at::Tensor mm = at::mm(x0, w0);
  auto diff = [](const at::Tensor& a, const at::Tensor& b) {
    at::Tensor d = (a - b).abs().flatten();
    int64_t i = d.argmax().item<int64_t>();
    return "max |diff| " + std::to_string(d[i].item<float>()) + " at flat " + std::to_string(i) + ": " +
           std::to_string(a.flatten()[i].item<float>()) + " vs " + std::to_string(b.flatten()[i].item<float>());
  };
  at::Tensor z_ref = at::gelu(at::softmax(mm, 1) * 1.75), u_ref = at::tanh(x0 * 2);
  EXPECT_TRUE(at::allclose(out1[0], z_ref, 1e-5, 1e-6)) << diff(out1[0], z_ref);
  EXPECT_TRUE(at::allclose(out1[1], u_ref, 1e-5, 1e-6)) << diff(out1[1], u_ref);
  EXPECT_TRUE(bitwise_equal(u_before, u_ref)) << "eager's tanh before and after the run: " << diff(u_before, u_ref);
  EXPECT_TRUE(bitwise_equal(out1[2], mm));

  std::string bytes = rt().to_bytes(*p);
  int64_t compiles = debug::Metrics::get().value(debug::Counter::Compiles);
  auto p2 = from_bytes(bytes);
  EXPECT_EQ(debug::Metrics::get().value(debug::Counter::Compiles), compiles) << "reading bytes ran codegen";
  EXPECT_TRUE(p2->code->llvm_ir().empty());
  EXPECT_EQ(p2->plan.str(p2->graph), p->plan.str(p->graph));
  EXPECT_EQ(p2->graph.hashes(), p->graph.hashes());
  EXPECT_EQ(rt().to_bytes(*p2), bytes);

  executor::Executable e2(p2, cpu_execution());
  auto out2 = e2.run(c.b, 2).outputs;
  ASSERT_EQ(out2.size(), out1.size());
  for (size_t i = 0; i < out1.size(); ++i) EXPECT_TRUE(bitwise_equal(out1[i], out2[i])) << "output " << i;

  // Two live copies of one program do not clash in the JIT (each links alone),
  // and each outlives the other's release.
  auto p3 = from_bytes(bytes);
  p2.reset();
  auto out3 = executor::Executable(p3, cpu_execution()).run(c.b, 1).outputs;
  for (size_t i = 0; i < out1.size(); ++i) EXPECT_TRUE(bitwise_equal(out1[i], out3[i])) << "output " << i;
}

TEST(ProgramBytes, DamagedBytesAreRefusedNeverRun) {
  Case c = make_case();
  auto p = rt().compile(std::move(c.g), "damaged");
  std::string bytes = rt().to_bytes(*p);
  for (size_t cut : {size_t{0}, size_t{7}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(from_bytes(bytes.substr(0, cut)), std::runtime_error) << "cut at " << cut;
  // One flipped bit anywhere, the object code included, is caught before linking.
  for (size_t at : {size_t{0}, size_t{5}, bytes.size() / 3, bytes.size() - 100, bytes.size() - 9}) {
    std::string bad = bytes;
    bad[at] ^= 0x10;
    EXPECT_THROW(from_bytes(bad), std::runtime_error) << "flip at " << at;
  }
}

TEST(ProgramBytes, ProgramWithoutKernelsRoundTrips) {
  ir::Graph g;
  ValueId x = g.add_input(f32({8, 8}));
  ValueId w = g.add_input(f32({8, 8}));
  ValueId mm = g.add_node(OpKind::Aten, {x, w}, {Attr{std::string("aten::mm")}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}},
                          {f32({8, 8})})[0];
  g.add_output(mm);
  auto p = rt().compile(std::move(g), "nokernels");
  EXPECT_TRUE(p->plan.kernels.empty());
  auto p2 = from_bytes(rt().to_bytes(*p));
  executor::Bindings b{{torch::randn({8, 8}), torch::randn({8, 8})}, {}};
  EXPECT_TRUE(bitwise_equal(executor::Executable(p2, cpu_execution()).run(b, 1).outputs[0], at::mm(b.inputs[0], b.inputs[1])));
}
