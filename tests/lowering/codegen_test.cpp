// CPU codegen: hand-built kernels compiled by make_cpu_target() and checked
// against double-precision references that follow ATen's semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "lowering/plan.h"
#include "lowering/target.h"
#include "targets/cpu/cpu_target.h"
#include "tests/lowering/test_support.h"

namespace lazyjit::lowering {
namespace {

using ir::Attr;
using ir::OpKind;
using namespace test;
Attr ai(int64_t v) { return Attr{v}; }

Access load(ValueId v, DType t, std::vector<int64_t> strides, int64_t offset = 0) {
  Access a{};
  a.operand = a.value = v;
  a.dtype = t;
  a.strides = std::move(strides);
  a.offset = offset;
  return a;
}
Access scalar(ValueId v, DType t, int32_t slot, size_t rank) {
  Access a = load(v, t, std::vector<int64_t>(rank, 0));
  a.scalar_index = slot;
  return a;
}


// PyTorch's default float tolerances, widened by `scale` for transcendental ops.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, DType t,
                  double scale = 1, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  double atol = 0, rtol = 0;
  switch (t) {
    case DType::Float32: atol = 1e-5; rtol = 1.3e-6 * scale; break;
    case DType::Float64: atol = 1e-7; rtol = 1e-7 * scale; break;
    case DType::Float16: atol = 1e-5; rtol = 1e-3 * scale; break;
    case DType::BFloat16: atol = 1e-5; rtol = 1.6e-2 * scale; break;
    default: break;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " [" << i << "] got " << g << " want nan";
    } else if (std::isinf(w) || atol == 0) {
      EXPECT_EQ(g, w) << what << " [" << i << "]";
    } else {
      EXPECT_LE(std::abs(g - w), atol + rtol * std::abs(w))
          << what << " [" << i << "] got " << g << " want " << w;
    }
  }
}

// Calls kernel k over [begin, end) with buffers in ABI order.
void call(const Plan& p, size_t k, std::vector<Buf*> bufs, const std::vector<int64_t>& scalars,
          int64_t begin, int64_t end) {
  std::vector<void*> ptrs;
  for (Buf* b : bufs) ptrs.push_back(b->bytes.data());
  std::vector<int64_t> dims = kernel_dims(p.kernels.at(k));
  p.kernel_fns.at(k)(ptrs.data(), scalars.data(), begin, end, dims.data());
}

FusedKernel kernel(std::vector<int64_t> sizes, std::vector<uint32_t> nodes, std::vector<Access> loads,
                   std::vector<ValueId> stores, std::string name = "fused_0") {
  FusedKernel k;
  k.sizes = std::move(sizes);
  k.nodes = std::move(nodes);
  k.loads = std::move(loads);
  k.stores = std::move(stores);
  k.name = std::move(name);
  return k;
}

// out = op(inputs...) over rank-1 contiguous tensors; returns the output.
std::vector<double> run_op(OpKind op, DType ct, std::vector<DType> in_t, DType out_t,
                           const std::vector<std::vector<double>>& in, std::vector<Attr> extra = {}) {
  size_t n = in.at(0).size();
  int64_t ni = static_cast<int64_t>(n);
  ir::Graph g;
  std::vector<ValueId> ids;
  std::vector<Access> loads;
  std::vector<Buf> bufs;
  for (size_t i = 0; i < in.size(); ++i) {
    ids.push_back(g.add_input(tt(in_t[i], {ni})));
    loads.push_back(load(ids.back(), in_t[i], {1}));
    bufs.emplace_back(in_t[i], in[i]);
  }
  std::vector<Attr> attrs{dt(ct)};
  attrs.insert(attrs.end(), extra.begin(), extra.end());
  ValueId out = g.add_node1(op, ids, attrs, tt(out_t, {ni}));
  g.add_output(out);
  Plan p;
  p.kernels.push_back(kernel({ni}, {g.value(out).node}, loads, {out}));
  auto code = target().compile(g, p);
  bufs.emplace_back(out_t, n);
  std::vector<Buf*> ptrs;
  for (Buf& b : bufs) ptrs.push_back(&b);
  call(p, 0, ptrs, {}, 0, ni);
  return bufs.back().values();
}

std::vector<double> map1(const std::vector<double>& x, DType out, const std::function<double(double)>& f) {
  std::vector<double> r;
  for (double v : x) r.push_back(round_to(out, f(v)));
  return r;
}
std::vector<double> map2(const std::vector<double>& x, const std::vector<double>& y, DType out,
                         const std::function<double(double, double)>& f) {
  std::vector<double> r;
  for (size_t i = 0; i < x.size(); ++i) r.push_back(round_to(out, f(x[i], y[i])));
  return r;
}

// All pairs of `vals`, as two columns.
std::pair<std::vector<double>, std::vector<double>> pairs(const std::vector<double>& vals) {
  std::vector<double> a, b;
  for (double x : vals)
    for (double y : vals) a.push_back(x), b.push_back(y);
  return {a, b};
}

// --- references (ATen's scalar kernels, in double) ------------------------------
double div_floor_ref(double a, double b) {
  if (b == 0) return a / b;
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  double fl;
  if (div != 0) {
    fl = std::floor(div);
    if (div - fl > 0.5) fl += 1;
  } else {
    fl = std::copysign(0.0, a / b);
  }
  return fl;
}
double remainder_ref(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}
double max_ref(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
double min_ref(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }

struct UnaryCase {
  OpKind op;
  std::function<double(double)> ref;
  double scale;  // tolerance scale
};

std::vector<UnaryCase> unary_float_cases() {
  return {
      {OpKind::Abs, [](double x) { return std::abs(x); }, 1},
      {OpKind::Neg, [](double x) { return -x; }, 1},
      {OpKind::Exp, [](double x) { return std::exp(x); }, 10},
      {OpKind::Log, [](double x) { return std::log(x); }, 10},
      {OpKind::Sqrt, [](double x) { return std::sqrt(x); }, 1},
      {OpKind::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, 2},
      {OpKind::Tanh, [](double x) { return std::tanh(x); }, 10},
      {OpKind::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, 10},
      {OpKind::Relu, [](double x) { return x < 0 ? 0 : x; }, 1},
      {OpKind::Gelu, [](double x) { return 0.5 * x * (1 + std::erf(x * M_SQRT1_2)); }, 10},
      {OpKind::GeluTanh,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
       },
       10},
      {OpKind::Silu, [](double x) { return x / (1 + std::exp(-x)); }, 10},
      {OpKind::Reciprocal, [](double x) { return 1 / x; }, 1},
      {OpKind::Sin, [](double x) { return std::sin(x); }, 10},
      {OpKind::Cos, [](double x) { return std::cos(x); }, 10},
      {OpKind::Log1p, [](double x) { return std::log1p(x); }, 10},
      {OpKind::Expm1, [](double x) { return std::expm1(x); }, 10},
      {OpKind::Erf, [](double x) { return std::erf(x); }, 10},
  };
}

// Inputs for float ops: a ramp long enough to run vectorized and remainder
// iterations, plus the IEEE special values.
std::vector<double> float_inputs() {
  std::vector<double> v;
  for (int i = 0; i < 67; ++i) v.push_back(-5 + i * 0.15);
  for (double s : {0.0, -0.0, 1.0, -1.0, 0.5, kNaN, kInf, -kInf, 1e-3, -1e-3}) v.push_back(s);
  return v;
}

TEST(CpuCodegen, FloatUnaryOps) {
  std::vector<double> x = float_inputs();
  for (DType t : {DType::Float32, DType::Float64}) {
    std::vector<double> xr = map1(x, t, [](double v) { return v; });
    for (const UnaryCase& c : unary_float_cases()) {
      auto got = run_op(c.op, t, {t}, t, {xr});
      expect_close(got, map1(xr, t, c.ref), t, c.scale,
                   std::string(ir::op_name(c.op)) + " " + std::string(ir::dtype_name(t)));
    }
  }
}

TEST(CpuCodegen, FloatBinaryOps) {
  auto [a, b] = pairs({-7.5, -3, -2, -1.5, -0.0, 0, 0.5, 1, 2, 3, 7.25, kNaN, kInf, -kInf});
  struct Case {
    OpKind op;
    std::function<double(double, double)> ref;
  };
  std::vector<Case> cases = {
      {OpKind::Add, [](double x, double y) { return x + y; }},
      {OpKind::Sub, [](double x, double y) { return x - y; }},
      {OpKind::Mul, [](double x, double y) { return x * y; }},
      {OpKind::Div, [](double x, double y) { return x / y; }},
      {OpKind::DivTrunc, [](double x, double y) { return std::trunc(x / y); }},
      {OpKind::DivFloor, div_floor_ref},
      {OpKind::Remainder, remainder_ref},
      {OpKind::Pow, [](double x, double y) { return std::pow(x, y); }},
      {OpKind::Maximum, max_ref},
      {OpKind::Minimum, min_ref},
  };
  for (DType t : {DType::Float32, DType::Float64})
    for (const Case& c : cases)
      expect_close(run_op(c.op, t, {t, t}, t, {a, b}), map2(a, b, t, c.ref), t, 4,
                   std::string(ir::op_name(c.op)) + " " + std::string(ir::dtype_name(t)));
}

// Equal bits, zero signs included (expect_close does not see them).
void expect_bits(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]);
    EXPECT_TRUE(same) << what << " [" << i << "] got " << got[i] << " want " << want[i];
  }
}

// Fma rounds once, as ATen's vec::fmadd (add with alpha, addcmul, lerp); with
// two roundings about a fifth of these elements would differ.
TEST(CpuCodegen, FmaRoundsOnce) {
  std::vector<double> x, y, z;
  for (int i = 0; i < 203; ++i) {  // vector iterations and a remainder
    x.push_back(std::sin(i * 0.7) * 3);
    y.push_back(std::cos(i * 1.3) / 3);
    z.push_back(std::sin(i * 2.1 + 0.5));
  }
  for (double s : {0.0, -0.0, kNaN, kInf, -kInf}) x.push_back(s), y.push_back(1.0), z.push_back(-0.0);
  x.push_back(kInf), y.push_back(0.0), z.push_back(1.0);  // inf * 0: nan
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    std::vector<double> xr = map1(x, t, [](double v) { return v; }), yr = map1(y, t, [](double v) { return v; }),
                        zr = map1(z, t, [](double v) { return v; });
    std::vector<double> want, twice;
    for (size_t i = 0; i < xr.size(); ++i) {
      // bf16 and f16 compute in f32 (ir::opmath_dtype), then round to t.
      double f = t == DType::Float64 ? std::fma(xr[i], yr[i], zr[i])
                                     : std::fmaf(float(xr[i]), float(yr[i]), float(zr[i]));
      want.push_back(round_to(t, f));
      twice.push_back(round_to(t, t == DType::Float64 ? xr[i] * yr[i] + zr[i]
                                                      : double(float(float(xr[i]) * float(yr[i])) + float(zr[i]))));
    }
    auto got = run_op(OpKind::Fma, t, {t, t, t}, t, {xr, yr, zr});
    expect_bits(got, want, "fma " + std::string(ir::dtype_name(t)));
    if (t == DType::Float32 || t == DType::Float64) {
      size_t differ = 0;
      for (size_t i = 0; i < want.size(); ++i) differ += want[i] != twice[i];
      EXPECT_GT(differ, 5u) << "the inputs should tell one rounding from two";
    }
  }
  // Integers: a * b + c, wrapping.
  expect_close(run_op(OpKind::Fma, DType::Int32, {DType::Int32, DType::Int32, DType::Int32}, DType::Int32,
                      {{3, -4, 65536}, {5, 7, 65536}, {1, 2, 3}}),
               {16, -26, 3}, DType::Int32);
}

// LLVM vectorizes llvm.fma, and the other float ops stay unfused: no
// contraction of an fmul and an fadd (their results stay as before).
TEST(CpuCodegen, FmaVectorizesAndNothingElseFuses) {
  const int64_t n = 256;
  ir::Graph g;
  ValueId a = g.add_input(tt(DType::Float32, {n})), b = g.add_input(tt(DType::Float32, {n})),
          c = g.add_input(tt(DType::Float32, {n}));
  ValueId f = g.add_node1(OpKind::Fma, {a, b, c}, {dt(DType::Float32)}, tt(DType::Float32, {n}));
  ValueId m = g.add_node1(OpKind::Mul, {a, b}, {dt(DType::Float32)}, tt(DType::Float32, {n}));
  ValueId s = g.add_node1(OpKind::Add, {m, c}, {dt(DType::Float32)}, tt(DType::Float32, {n}));
  g.add_output(f);
  g.add_output(s);
  Plan p;
  p.kernels.push_back(kernel({n}, {g.value(f).node, g.value(m).node, g.value(s).node},
                             {load(a, DType::Float32, {1}), load(b, DType::Float32, {1}), load(c, DType::Float32, {1})},
                             {f, s}));
  auto code = target().compile(g, p);
  const std::string& ir = code->llvm_ir();
  EXPECT_NE(ir.find("@llvm.fma.v"), std::string::npos) << "fma not vectorized";
  EXPECT_EQ(ir.find("fmuladd"), std::string::npos);
  EXPECT_EQ(ir.find(" contract "), std::string::npos);
}

// Equal operands (+0.0 and -0.0) give the first operand, like ATen's scalar
// loops and its clamp_min/clamp_max; relu keeps -0.0; NaN propagates.
TEST(CpuCodegen, SignedZerosInMaxMinRelu) {
  std::vector<double> a{0.0, -0.0, kNaN, 1.0, -0.0}, b{-0.0, 0.0, 0.0, kNaN, -0.0};
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    std::string name(ir::dtype_name(t));
    expect_bits(run_op(OpKind::Maximum, t, {t, t}, t, {a, b}), {0.0, -0.0, kNaN, kNaN, -0.0}, "max " + name);
    expect_bits(run_op(OpKind::Minimum, t, {t, t}, t, {a, b}), {0.0, -0.0, kNaN, kNaN, -0.0}, "min " + name);
    expect_bits(run_op(OpKind::Relu, t, {t}, t, {{-0.0, 0.0, -2.0, kNaN, 3.0}}), {-0.0, 0.0, 0.0, kNaN, 3.0},
                "relu " + name);
  }
}

TEST(CpuCodegen, Predicates) {
  auto [a, b] = pairs({-2, -0.0, 0, 1, 2.5, kNaN, kInf});
  struct Case {
    OpKind op;
    std::function<double(double, double)> ref;
  };
  std::vector<Case> cases = {
      {OpKind::Eq, [](double x, double y) { return x == y; }},
      {OpKind::Ne, [](double x, double y) { return x != y; }},
      {OpKind::Lt, [](double x, double y) { return x < y; }},
      {OpKind::Le, [](double x, double y) { return x <= y; }},
      {OpKind::Gt, [](double x, double y) { return x > y; }},
      {OpKind::Ge, [](double x, double y) { return x >= y; }},
      {OpKind::LogicalAnd, [](double x, double y) { return x != 0 && y != 0; }},
      {OpKind::LogicalOr, [](double x, double y) { return x != 0 || y != 0; }},
  };
  for (DType t : {DType::Float32, DType::Float64})
    for (const Case& c : cases)
      expect_close(run_op(c.op, t, {t, t}, DType::Bool, {a, b}), map2(a, b, DType::Bool, c.ref),
                   DType::Bool, 1, std::string(ir::op_name(c.op)));
  // Integer and unsigned compares.
  auto [ia, ib] = pairs({-3, -1, 0, 1, 7});
  for (DType t : {DType::Int32, DType::Int64, DType::Int8})
    for (const Case& c : cases)
      expect_close(run_op(c.op, t, {t, t}, DType::Bool, {ia, ib}), map2(ia, ib, DType::Bool, c.ref),
                   DType::Bool, 1, std::string(ir::op_name(c.op)));
  auto [ua, ub] = pairs({0, 1, 127, 128, 255});
  for (const Case& c : cases)
    expect_close(run_op(c.op, DType::UInt8, {DType::UInt8, DType::UInt8}, DType::Bool, {ua, ub}),
                 map2(ua, ub, DType::Bool, c.ref), DType::Bool, 1, "u8 " + std::string(ir::op_name(c.op)));
  // logical_not of floats: NaN is true, so its negation is false.
  std::vector<double> x{0, -0.0, 1, kNaN, -2};
  expect_close(run_op(OpKind::LogicalNot, DType::Float32, {DType::Float32}, DType::Bool, {x}),
               {1, 1, 0, 0, 0}, DType::Bool);
  // A predicate stored as float (the tracer's out dtype decides).
  expect_close(run_op(OpKind::Lt, DType::Int64, {DType::Int64, DType::Int64}, DType::Float32,
                      {{1, 5}, {2, 2}}),
               {1, 0}, DType::Float32);
}

TEST(CpuCodegen, IntegerOps) {
  struct Case {
    OpKind op;
    std::function<double(double, double)> ref;
  };
  std::vector<Case> cases = {
      {OpKind::Add, [](double x, double y) { return x + y; }},
      {OpKind::Sub, [](double x, double y) { return x - y; }},
      {OpKind::Mul, [](double x, double y) { return x * y; }},
      {OpKind::Maximum, [](double x, double y) { return std::max(x, y); }},
      {OpKind::Minimum, [](double x, double y) { return std::min(x, y); }},
      {OpKind::BitAnd, [](double x, double y) { return double(int64_t(x) & int64_t(y)); }},
      {OpKind::BitOr, [](double x, double y) { return double(int64_t(x) | int64_t(y)); }},
      {OpKind::BitXor, [](double x, double y) { return double(int64_t(x) ^ int64_t(y)); }},
  };
  auto [a, b] = pairs({-100, -7, -1, 0, 1, 3, 12, 99});
  for (DType t : {DType::Int32, DType::Int64, DType::Int16})
    for (const Case& c : cases)
      expect_close(run_op(c.op, t, {t, t}, t, {a, b}), map2(a, b, t, c.ref), t, 1,
                   std::string(ir::op_name(c.op)) + " " + std::string(ir::dtype_name(t)));
  // uint8: unsigned max/min, wrapping arithmetic.
  auto [ua, ub] = pairs({0, 1, 100, 200, 255});
  for (const Case& c : cases) {
    auto ref = [&](double x, double y) { return double(uint8_t(int64_t(c.ref(x, y)))); };
    expect_close(run_op(c.op, DType::UInt8, {DType::UInt8, DType::UInt8}, DType::UInt8, {ua, ub}),
                 map2(ua, ub, DType::UInt8, ref), DType::UInt8, 1, "u8 " + std::string(ir::op_name(c.op)));
  }
  // Overflow wraps.
  double imax = std::numeric_limits<int32_t>::max();
  expect_close(run_op(OpKind::Add, DType::Int32, {DType::Int32, DType::Int32}, DType::Int32, {{imax}, {1}}),
               {double(std::numeric_limits<int32_t>::min())}, DType::Int32);
  // Unary: abs, neg, relu.
  std::vector<double> x{-5, -1, 0, 1, 42};
  for (DType t : {DType::Int32, DType::Int64, DType::Int8}) {
    expect_close(run_op(OpKind::Abs, t, {t}, t, {x}), {5, 1, 0, 1, 42}, t);
    expect_close(run_op(OpKind::Neg, t, {t}, t, {x}), {5, 1, 0, -1, -42}, t);
    expect_close(run_op(OpKind::Relu, t, {t}, t, {x}), {0, 0, 0, 1, 42}, t);
  }
  expect_close(run_op(OpKind::Neg, DType::UInt8, {DType::UInt8}, DType::UInt8, {{0, 1, 255}}), {0, 255, 1},
               DType::UInt8);
  expect_close(run_op(OpKind::Relu, DType::UInt8, {DType::UInt8}, DType::UInt8, {{0, 1, 255}}), {0, 1, 255},
               DType::UInt8);
}

TEST(CpuCodegen, BoolOps) {
  auto [a, b] = pairs({0, 1});
  const DType B = DType::Bool;
  expect_close(run_op(OpKind::Add, B, {B, B}, B, {a, b}), {0, 1, 1, 1}, B, 1, "add");
  expect_close(run_op(OpKind::Mul, B, {B, B}, B, {a, b}), {0, 0, 0, 1}, B, 1, "mul");
  expect_close(run_op(OpKind::Maximum, B, {B, B}, B, {a, b}), {0, 1, 1, 1}, B, 1, "max");
  expect_close(run_op(OpKind::Minimum, B, {B, B}, B, {a, b}), {0, 0, 0, 1}, B, 1, "min");
  expect_close(run_op(OpKind::BitXor, B, {B, B}, B, {a, b}), {0, 1, 1, 0}, B, 1, "xor");
  expect_close(run_op(OpKind::BitAnd, B, {B, B}, B, {a, b}), {0, 0, 0, 1}, B, 1, "and");
  expect_close(run_op(OpKind::BitOr, B, {B, B}, B, {a, b}), {0, 1, 1, 1}, B, 1, "or");
  expect_close(run_op(OpKind::Gt, B, {B, B}, B, {a, b}), {0, 0, 1, 0}, B, 1, "gt");
  expect_close(run_op(OpKind::LogicalNot, B, {B}, B, {{0, 1}}), {1, 0}, B, 1, "not");
  expect_close(run_op(OpKind::Abs, B, {B}, B, {{0, 1}}), {0, 1}, B, 1, "abs");
  expect_close(run_op(OpKind::Relu, B, {B}, B, {{0, 1}}), {0, 1}, B, 1, "relu");
  // Bool promoted to int and float.
  expect_close(run_op(OpKind::Add, DType::Int64, {B, DType::Int64}, DType::Int64, {{1, 0}, {5, 5}}), {6, 5},
               DType::Int64);
  expect_close(run_op(OpKind::Mul, DType::Float32, {B, DType::Float32}, DType::Float32, {{1, 0}, {2.5, 2.5}}),
               {2.5, 0}, DType::Float32);
}

TEST(CpuCodegen, Casts) {
  std::vector<double> f{-2.7, -1.0, -0.5, 0, 0.5, 1.9, 100.25};
  auto cast = [&](DType from, DType to, const std::vector<double>& x) {
    return run_op(OpKind::Cast, to, {from}, to, {x});
  };
  // Float to int truncates toward zero.
  for (DType t : {DType::Int8, DType::Int16, DType::Int32, DType::Int64})
    expect_close(cast(DType::Float32, t, f), {-2, -1, 0, 0, 0, 1, 100}, t, 1, "f32->int");
  // uint8 from a negative float wraps like c10 (through int64).
  expect_close(cast(DType::Float64, DType::UInt8, {-1, 3.5, 255}), {255, 3, 255}, DType::UInt8);
  // To bool: nonzero, NaN included.
  expect_close(cast(DType::Float32, DType::Bool, {0, -0.0, 0.1, kNaN}), {0, 0, 1, 1}, DType::Bool);
  expect_close(cast(DType::Int64, DType::Bool, {0, 7, -1}), {0, 1, 1}, DType::Bool);
  // Int to float: signed and unsigned.
  expect_close(cast(DType::Int8, DType::Float32, {-128, 127}), {-128, 127}, DType::Float32);
  expect_close(cast(DType::UInt8, DType::Float64, {200, 255}), {200, 255}, DType::Float64);
  expect_close(cast(DType::Bool, DType::Float32, {0, 1}), {0, 1}, DType::Float32);
  expect_close(cast(DType::Bool, DType::Int32, {0, 1}), {0, 1}, DType::Int32);
  // Int narrowing and widening.
  expect_close(cast(DType::Int32, DType::Int8, {300, -129}), {44, 127}, DType::Int8);
  expect_close(cast(DType::Int8, DType::Int64, {-5}), {-5}, DType::Int64);
  expect_close(cast(DType::UInt8, DType::Int32, {250}), {250}, DType::Int32);
  // Float widths: f64 -> f32 rounds, f32 -> f16 and back.
  expect_close(cast(DType::Float64, DType::Float32, {0.1, 1e40}), {double(0.1f), kInf}, DType::Float32);
  expect_close(cast(DType::Float32, DType::Float16, {0.1, 65504, 1e6, kNaN}),
               {round_to(DType::Float16, 0.1), 65504, kInf, kNaN}, DType::Float16);
  expect_close(cast(DType::Float16, DType::Float32, {0.099975586}), {0.099975586}, DType::Float32);
  // bf16 rounding: nearest-even ties, NaN stays NaN.
  double one = 1.0, ulp = 1.0 / 128;  // bf16 has 7 mantissa bits
  std::vector<double> v{one + ulp / 2, one + ulp * 1.5, one + ulp * 0.75, kNaN, -3.14159, 1e39};
  std::vector<double> want{one, one + 2 * ulp, one + ulp, kNaN, round_to(DType::BFloat16, -3.14159),
                           round_to(DType::BFloat16, 1e39)};
  for (DType from : {DType::Float32, DType::Float64}) {
    auto got = cast(from, DType::BFloat16, v);
    for (size_t i = 0; i < v.size(); ++i)
      if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i]));
      else EXPECT_EQ(got[i], want[i]) << i;
  }
  expect_close(cast(DType::BFloat16, DType::Float32, {1.5, -0.0078125}), {1.5, -0.0078125}, DType::Float32);
  expect_close(cast(DType::Int32, DType::BFloat16, {257}), {256}, DType::BFloat16);
  expect_close(cast(DType::BFloat16, DType::Int32, {-2.5}), {-2}, DType::Int32);
  expect_close(cast(DType::Float16, DType::BFloat16, {1.5}), {1.5}, DType::BFloat16);
}

TEST(CpuCodegen, HalfAndBFloat16Compute) {
  std::vector<double> x = float_inputs();
  for (DType t : {DType::BFloat16, DType::Float16}) {
    std::vector<double> xr = map1(x, t, [](double v) { return v; });
    // The tracer computes half types in float32; bf16/f16 as compute dtypes also work.
    for (DType ct : {DType::Float32, t}) {
      expect_close(run_op(OpKind::Mul, ct, {t, t}, t, {xr, xr}), map2(xr, xr, t, std::multiplies<>()), t);
      expect_close(run_op(OpKind::Exp, ct, {t}, t, {xr}), map1(xr, t, [](double v) { return std::exp(v); }), t, 2);
      expect_close(run_op(OpKind::Tanh, ct, {t}, DType::Float32, {xr}),
                   map1(xr, DType::Float32, [](double v) { return std::tanh(v); }), DType::Float32, 10);
    }
  }
}

TEST(CpuCodegen, WhereClampFull) {
  std::vector<double> c{1, 0, 1, 0}, x{1, 2, 3, 4}, y{-1, -2, -3, -4};
  for (DType t : {DType::Float32, DType::Int64})
    expect_close(run_op(OpKind::Where, t, {DType::Bool, t, t}, t, {c, x, y}), {1, -2, 3, -4}, t);
  // A float condition is converted to bool.
  expect_close(run_op(OpKind::Where, DType::Float64, {DType::Float32, DType::Float64, DType::Float64},
                      DType::Float64, {{0.5, 0, kNaN, 0}, x, y}),
               {1, -2, 3, -4}, DType::Float64);

  std::vector<double> v{-5, -1, 0, 2, 9, kNaN}, lo(v.size(), -1), hi(v.size(), 3);
  auto f = DType::Float32;
  expect_close(run_op(OpKind::Clamp, f, {f, f, f}, f, {v, lo, hi}, {ai(3)}), {-1, -1, 0, 2, 3, kNaN}, f);
  expect_close(run_op(OpKind::Clamp, f, {f, f, f}, f, {v, lo, hi}, {ai(1)}), {-1, -1, 0, 2, 9, kNaN}, f);
  expect_close(run_op(OpKind::Clamp, f, {f, f, f}, f, {v, lo, hi}, {ai(2)}), {-5, -1, 0, 2, 3, kNaN}, f);
  // A NaN bound is ignored.
  std::vector<double> nan(v.size(), kNaN);
  expect_close(run_op(OpKind::Clamp, f, {f, f, f}, f, {v, nan, hi}, {ai(3)}), {-5, -1, 0, 2, 3, kNaN}, f);
  std::vector<double> iv{-5, -1, 0, 2, 9};
  lo.resize(5), hi.resize(5);
  for (DType t : {DType::Int32, DType::Int64})
    expect_close(run_op(OpKind::Clamp, t, {t, t, t}, t, {iv, lo, hi}, {ai(3)}), {-1, -1, 0, 2, 3}, t);
  expect_close(run_op(OpKind::Clamp, DType::UInt8, {DType::UInt8, DType::UInt8, DType::UInt8}, DType::UInt8,
                      {{0, 5, 200}, {3, 3, 3}, {150, 150, 150}}, {ai(3)}),
               {3, 5, 150}, DType::UInt8);
  // Full with a loaded fill value (a 1-element broadcast here).
  expect_close(run_op(OpKind::Full, DType::Int32, {DType::Float64}, DType::Int32, {{2.9, 2.9}}), {2, 2},
               DType::Int32);
}

// out[i,j] = a[i,j] * b[j] + c[i,0], with b and c broadcast (stride 0) and a read
// transposed from a [5,4] buffer.
TEST(CpuCodegen, BroadcastTransposedAndRanges) {
  ir::Graph g;
  const DType f = DType::Float32;
  ValueId a = g.add_input(tt(f, {4, 5}));
  ValueId b = g.add_input(tt(f, {5}));
  ValueId c = g.add_input(tt(f, {4, 1}));
  ValueId m = g.add_node1(OpKind::Mul, {a, b}, {dt(f)}, tt(f, {4, 5}));
  ValueId o = g.add_node1(OpKind::Add, {m, c}, {dt(f)}, tt(f, {4, 5}));
  ValueId o64 = g.add_node1(OpKind::Cast, {o}, {dt(DType::Float64)}, tt(DType::Float64, {4, 5}));
  g.add_output(o);
  g.add_output(o64);
  Plan p;
  p.kernels.push_back(kernel({4, 5}, {g.value(m).node, g.value(o).node, g.value(o64).node},
                             {load(c, f, {1, 0}), load(a, f, {1, 4}), load(b, f, {0, 1})}, {o, o64}));
  auto code = target().compile(g, p);
  ASSERT_EQ(p.kernel_fns.size(), 1u);
  std::vector<double> av(20), bv(5), cv(4);
  for (int i = 0; i < 20; ++i) av[i] = i * 0.5 - 3;
  for (int i = 0; i < 5; ++i) bv[i] = i + 1;
  for (int i = 0; i < 4; ++i) cv[i] = 100 * i;
  Buf A(f, av), B(f, bv), C(f, cv);
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) want.push_back(av[j * 4 + i] * bv[j] + cv[i]);

  Buf O(f, 20), O64(DType::Float64, 20);
  call(p, 0, {&C, &A, &B, &O, &O64}, {}, 0, 4);
  expect_close(O.values(), want, f);
  expect_close(O64.values(), want, DType::Float64);

  // Two disjoint ranges give the same result as one call; an empty range writes nothing.
  Buf O2(f, 20), O642(DType::Float64, 20);
  call(p, 0, {&C, &A, &B, &O2, &O642}, {}, 0, 1);
  call(p, 0, {&C, &A, &B, &O2, &O642}, {}, 1, 4);
  call(p, 0, {&C, &A, &B, &O2, &O642}, {}, 2, 2);
  EXPECT_EQ(O2.bytes, O.bytes);
  EXPECT_EQ(O642.bytes, O64.bytes);
  Buf O3(f, 20), O643(DType::Float64, 20);
  call(p, 0, {&C, &A, &B, &O3, &O643}, {}, 2, 3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(O3.get(i), i / 5 == 2 ? want[i] : 0.0) << i;
  EXPECT_FALSE(code->llvm_ir().empty());
}

// A load with an offset (a view into a larger buffer) and a repeated operand.
TEST(CpuCodegen, OffsetAndRepeatedOperand) {
  ir::Graph g;
  const DType t = DType::Float64;
  ValueId a = g.add_input(tt(t, {3}));
  ValueId s = g.add_node1(OpKind::Mul, {a, a}, {dt(t)}, tt(t, {3}));
  g.add_output(s);
  Plan p;
  p.kernels.push_back(kernel({3}, {g.value(s).node}, {load(a, t, {2}, 1)}, {s}));
  auto code = target().compile(g, p);
  Buf A(t, {9, 1, 9, 2, 9, 3}), S(t, 3);
  call(p, 0, {&A, &S}, {}, 0, 3);
  expect_close(S.values(), {1, 4, 9}, t);
}

TEST(CpuCodegen, ScalarArguments) {
  ir::Graph g;
  const DType f = DType::Float32;
  ValueId x = g.add_input(tt(f, {6}));
  ValueId alpha = g.add_scalar(DType::Float64);  // slot 0: a double
  ValueId k = g.add_scalar(DType::Int64);         // slot 1: an int64
  ValueId flag = g.add_scalar(DType::Bool);       // slot 2: int64, nonzero = true
  ValueId ax = g.add_node1(OpKind::Mul, {x, alpha}, {dt(f)}, tt(f, {6}));
  ValueId axk = g.add_node1(OpKind::Add, {ax, k}, {dt(f)}, tt(f, {6}));
  ValueId r = g.add_node1(OpKind::Where, {flag, axk, x}, {dt(f)}, tt(f, {6}));
  ValueId filled = g.add_node1(OpKind::Full, {k}, {dt(DType::Int32)}, tt(DType::Int32, {6}));
  g.add_output(r);
  g.add_output(filled);
  Plan p;
  p.kernels.push_back(kernel({6},
                             {g.value(ax).node, g.value(axk).node, g.value(r).node, g.value(filled).node},
                             {scalar(alpha, DType::Float64, 0, 1), load(x, f, {1}),
                              scalar(k, DType::Int64, 1, 1), scalar(flag, DType::Bool, 2, 1)},
                             {r, filled}));
  auto code = target().compile(g, p);
  std::vector<double> xv{0, 1, 2, 3, -4, 0.5};
  Buf X(f, xv), R(f, 6), F(DType::Int32, 6);
  double alpha_v = 0.25;
  int64_t alpha_bits;
  std::memcpy(&alpha_bits, &alpha_v, 8);
  call(p, 0, {&X, &R, &F}, {alpha_bits, -3, 7}, 0, 6);
  std::vector<double> want;
  for (double v : xv) want.push_back(v * 0.25 - 3);
  expect_close(R.values(), want, f);
  expect_close(F.values(), std::vector<double>(6, -3), DType::Int32);
  // The same code with other scalar values: no recompilation needed.
  call(p, 0, {&X, &R, &F}, {alpha_bits, 5, 0}, 0, 6);
  expect_close(R.values(), xv, f);
  expect_close(F.values(), std::vector<double>(6, 5), DType::Int32);
}

TEST(CpuCodegen, EmptyAndRankEdgeCases) {
  // An empty plan compiles without LLVM.
  {
    ir::Graph g;
    Plan p;
    auto code = target().compile(g, p);
    ASSERT_NE(code, nullptr);
    EXPECT_TRUE(p.kernel_fns.empty());
  }
  const DType f = DType::Float32;
  // 0 iterations in dim 0; and an empty inner dim, called over all of dim 0.
  for (std::vector<int64_t> sizes : std::vector<std::vector<int64_t>>{{0}, {3, 0}, {2, 0, 4}}) {
    ir::Graph g;
    ValueId x = g.add_input(tt(f, sizes));
    ValueId y = g.add_node1(OpKind::Neg, {x}, {dt(f)}, tt(f, sizes));
    g.add_output(y);
    Plan p;
    p.kernels.push_back(kernel(sizes, {g.value(y).node},
                               {load(x, f, ir::contiguous_strides(sizes))}, {y}));
    auto code = target().compile(g, p);
    float dummy = 42;
    void* bufs[] = {&dummy, &dummy};
    std::vector<int64_t> dims = kernel_dims(p.kernels[0]);
    p.kernel_fns[0](bufs, nullptr, 0, sizes[0], dims.data());
    EXPECT_EQ(dummy, 42);
  }
  // Rank 0 (a single element).
  {
    ir::Graph g;
    ValueId x = g.add_input(tt(f, {}));
    ValueId y = g.add_node1(OpKind::Exp, {x}, {dt(f)}, tt(f, {}));
    g.add_output(y);
    Plan p;
    p.kernels.push_back(kernel({}, {g.value(y).node}, {load(x, f, {})}, {y}));
    auto code = target().compile(g, p);
    Buf X(f, std::vector<double>{1}), Y(f, 1);
    call(p, 0, {&X, &Y}, {}, 0, 1);
    expect_close(Y.values(), {std::exp(1.0)}, f, 10);
  }
  // Rank 1 with one element, and a long rank-1 loop with a tail.
  for (int64_t n : {1, 1003}) {
    std::vector<double> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(i);
    expect_close(run_op(OpKind::Sigmoid, f, {f}, f, {x}),
                 map1(x, f, [](double v) { return 1 / (1 + std::exp(-v)); }), f, 10);
  }
}

// Several kernels per plan, and several live programs with the same kernel names.
TEST(CpuCodegen, MultipleKernelsAndPrograms) {
  const DType f = DType::Float32;
  auto build = [&](ir::Graph& g, Plan& p, double c) {
    ValueId x = g.add_input(tt(f, {8}));
    ValueId s = g.add_scalar(DType::Float64);
    ValueId y = g.add_node1(OpKind::Add, {x, s}, {dt(f)}, tt(f, {8}));
    ValueId z = g.add_node1(OpKind::Mul, {y, y}, {dt(f)}, tt(f, {8}));
    g.add_output(z);
    p.kernels.push_back(kernel({8}, {g.value(y).node}, {load(x, f, {1}), scalar(s, DType::Float64, 0, 1)},
                               {y}, "fused_0"));
    p.kernels.push_back(kernel({8}, {g.value(z).node}, {load(y, f, {1})}, {z}, "fused_1"));
  };
  ir::Graph g1, g2;
  Plan p1, p2;
  build(g1, p1, 1);
  build(g2, p2, 2);
  auto c1 = target().compile(g1, p1);
  auto c2 = target().compile(g2, p2);
  ASSERT_EQ(p1.kernel_fns.size(), 2u);
  auto run = [&](Plan& p, double s) {
    Buf X(f, std::vector<double>(8, 1)), Y(f, 8), Z(f, 8);
    int64_t bits;
    std::memcpy(&bits, &s, 8);
    call(p, 0, {&X, &Y}, {bits}, 0, 8);
    call(p, 1, {&Y, &Z}, {}, 0, 8);
    return Z.get(7);
  };
  EXPECT_EQ(run(p1, 1), 4);
  EXPECT_EQ(run(p2, 2), 9);
  c1.reset();  // freeing one program leaves the other callable
  EXPECT_EQ(run(p2, 3), 16);
  auto c3 = target().compile(g1, p1);
  EXPECT_EQ(run(p1, 0), 1);
}

TEST(CpuCodegen, ConcurrentCompiles) {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        auto got = run_op(OpKind::Add, DType::Int64, {DType::Int64, DType::Int64}, DType::Int64,
                          {{double(t)}, {double(rep)}});
        ok[t] += got[0] == t + rep;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 3);
}

TEST(CpuCodegen, ErrorsNameTheKernel) {
  ir::Graph g;
  ValueId a = g.add_input(tt(DType::Int32, {4}));
  ValueId d = g.add_node1(OpKind::Div, {a, a}, {dt(DType::Int32)}, tt(DType::Int32, {4}));
  g.add_output(d);
  Plan p;
  p.kernels.push_back(kernel({4}, {g.value(d).node}, {load(a, DType::Int32, {1})}, {d}, "fused_7"));
  try {
    target().compile(g, p);
    FAIL() << "int div compiled";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("fused_7"), std::string::npos) << e.what();
  }
  // An operand that is neither loaded nor computed.
  Plan q;
  q.kernels.push_back(kernel({4}, {g.value(d).node}, {}, {d}, "fused_8"));
  EXPECT_THROW(target().compile(g, q), std::runtime_error);
}

TEST(CpuCodegen, FingerprintAndVectorizedIR) {
  std::string fp = target().fingerprint();
  EXPECT_NE(fp.find("llvm 19"), std::string::npos) << fp;
  EXPECT_NE(fp.find(CodegenOptions{}.str()), std::string::npos) << fp;
  EXPECT_NE(make_cpu_target({2, false})->fingerprint(), fp);

  ir::Graph g;
  const DType f = DType::Float32;
  ValueId x = g.add_input(tt(f, {1024}));
  ValueId y = g.add_node1(OpKind::Exp, {x}, {dt(f)}, tt(f, {1024}));
  ValueId z = g.add_node1(OpKind::Tanh, {y}, {dt(f)}, tt(f, {1024}));
  g.add_output(z);
  Plan p;
  p.kernels.push_back(kernel({1024}, {g.value(y).node, g.value(z).node}, {load(x, f, {1})}, {z}));
  auto code = target().compile(g, p);
  const std::string& ir = code->llvm_ir();
  std::string after = ir.substr(ir.find("after optimization"));
  EXPECT_NE(after.find(" x float>"), std::string::npos) << "loop was not vectorized:\n" << after;
  if (fp.find(",libmvec") != std::string::npos) {
    EXPECT_NE(after.find("_ZGV"), std::string::npos) << "no libmvec call:\n" << after;
    // AVX-512 hosts use 512-bit vectors, exp included, unless told 256.
    if (fp.find("+avx512f") != std::string::npos) {
      EXPECT_NE(after.find("<16 x float> @_ZGVeN16v_expf"), std::string::npos) << after;
      CodegenOptions narrow;
      narrow.vector_bits = 256;
      auto t256 = make_cpu_target(narrow);
      EXPECT_NE(t256->fingerprint(), fp);
      Plan p2;
      p2.kernels.push_back(p.kernels[0]);
      auto code256 = t256->compile(g, p2);
      const std::string& ir256 = code256->llvm_ir();
      std::string after256 = ir256.substr(ir256.find("after optimization"));
      EXPECT_EQ(after256.find("<16 x float>"), std::string::npos) << after256;
      EXPECT_NE(after256.find("<8 x float>"), std::string::npos) << after256;
    }
  }
  std::vector<double> xv(1024);
  for (int i = 0; i < 1024; ++i) xv[i] = std::cos(i) * 2;
  Buf X(f, xv), Z(f, 1024);
  call(p, 0, {&X, &Z}, {}, 0, 1024);
  expect_close(Z.values(), map1(xv, f, [](double v) { return std::tanh(std::exp(v)); }), f, 10);
}

// End to end through plan_graph: buffers are found by Access::value.
TEST(CpuCodegen, PlannedGraph) {
  const DType f = DType::Float32;
  ir::Graph g;
  ValueId a = g.add_input(tt(f, {8, 16}));
  ValueId b = g.add_input(tt(DType::BFloat16, {16}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId m = g.add_node1(OpKind::Mul, {a, b}, {dt(f)}, tt(f, {8, 16}));
  ValueId y = g.add_node1(OpKind::Sub, {m, s}, {dt(f)}, tt(f, {8, 16}));
  ValueId r = g.add_node1(OpKind::Relu, {y}, {dt(f)}, tt(f, {8, 16}));
  ValueId c = g.add_node1(OpKind::Cast, {r}, {dt(DType::BFloat16)}, tt(DType::BFloat16, {8, 16}));
  g.add_output(r);
  g.add_output(c);
  Plan p = plan_graph(g);
  auto code = target().compile(g, p);
  ASSERT_EQ(p.kernel_fns.size(), p.kernels.size());

  std::vector<double> av(128), bv(16);
  for (int i = 0; i < 128; ++i) av[i] = std::sin(i) * 3;
  for (int i = 0; i < 16; ++i) bv[i] = round_to(DType::BFloat16, 0.3 * i - 2);
  double sv = 0.7;
  int64_t sbits;
  std::memcpy(&sbits, &sv, 8);
  std::map<ValueId, Buf> bufs{{a, Buf(f, av)}, {b, Buf(DType::BFloat16, bv)}};
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const FusedKernel& k = p.kernels[ki];
    std::vector<Buf*> args;
    for (const Access& l : k.loads)
      if (l.scalar_index < 0) args.push_back(&bufs.at(l.value));
    for (ValueId st : k.stores) {
      int64_t n = 1;
      for (int64_t d : k.sizes) n *= d;
      args.push_back(&bufs.emplace(st, Buf(g.value(st).type.dtype, n)).first->second);
    }
    call(p, ki, args, {sbits}, 0, k.sizes.empty() ? 1 : k.sizes[0]);
  }
  std::vector<double> want;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j) want.push_back(std::max(0.0, av[i * 16 + j] * bv[j] - sv));
  expect_close(bufs.at(r).values(), want, f);
  expect_close(bufs.at(c).values(), map1(want, DType::BFloat16, [](double v) { return v; }), DType::BFloat16);
}

// Unoptimized code and scalar math give the same results.
TEST(CpuCodegen, OtherCodegenOptions) {
  const DType f = DType::Float64;
  std::vector<double> x = float_inputs();
  for (CodegenOptions opts : {CodegenOptions{0, false}, CodegenOptions{1, true}, CodegenOptions{3, false}}) {
    auto t = make_cpu_target(opts);
    EXPECT_NE(t->fingerprint().find(opts.str()), std::string::npos);
    ir::Graph g;
    int64_t n = static_cast<int64_t>(x.size());
    ValueId a = g.add_input(tt(f, {n}));
    ValueId e = g.add_node1(OpKind::Gelu, {a}, {dt(f)}, tt(f, {n}));
    ValueId r = g.add_node1(OpKind::DivFloor, {e, a}, {dt(f)}, tt(f, {n}));
    g.add_output(e);
    g.add_output(r);
    Plan p;
    p.kernels.push_back(kernel({n}, {g.value(e).node, g.value(r).node}, {load(a, f, {1})}, {e, r}));
    auto code = t->compile(g, p);
    Buf A(f, x), E(f, x.size()), R(f, x.size());
    call(p, 0, {&A, &E, &R}, {}, 0, n);
    auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v * M_SQRT1_2)); };
    expect_close(E.values(), map1(x, f, gelu), f, 10, opts.str());
    expect_close(R.values(), map1(x, f, [&](double v) { return div_floor_ref(gelu(v), v); }), f, 10,
                 opts.str());
  }
}

// Cat through plan_graph: each piece of the cat dim reads its operand through a
// shifted load. Every split of the outermost dim into [begin, end) ranges (as
// threads split it) gives the same result, whether the cat dim is that dim or
// an inner one, and whatever the pieces' sizes.
struct CatCase {
  int64_t dim;
  std::vector<int64_t> piece_sizes;  // along `dim`
};

std::vector<double> run_cat(const CatCase& c, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                            std::vector<double>* want) {
  const DType f = DType::Float32;
  const int64_t other = 5;
  auto shape = [&](int64_t n) { return c.dim == 0 ? std::vector<int64_t>{n, other} : std::vector<int64_t>{other, n}; };
  int64_t total = 0;
  for (int64_t n : c.piece_sizes) total += n;
  ir::Graph g;
  std::vector<ValueId> ins;
  std::map<ValueId, Buf> bufs;
  std::vector<std::vector<double>> data;
  for (size_t j = 0; j < c.piece_sizes.size(); ++j) {
    ins.push_back(g.add_input(tt(f, shape(c.piece_sizes[j]))));
    std::vector<double> v(c.piece_sizes[j] * other);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(100 * j + i);
    bufs.emplace(ins.back(), Buf(f, v));
    data.push_back(v);
  }
  // -piece0 joins (a producer: its own kernel), then cat, then * 2.
  ValueId neg = g.add_node1(OpKind::Neg, {ins[0]}, {dt(f)}, tt(f, shape(c.piece_sizes[0])));
  std::vector<ValueId> ops = ins;
  ops[0] = neg;
  ValueId cat = g.add_node1(OpKind::Cat, ops, {dt(f), ai(c.dim)}, tt(f, shape(total)));
  ValueId two = g.add_scalar(DType::Float64);
  ValueId y = g.add_node1(OpKind::Mul, {cat, two}, {dt(f)}, tt(f, shape(total)));
  g.add_output(y);
  EXPECT_EQ(g.verify(), "");
  Plan p = plan_graph(g);
  EXPECT_EQ(p.kernels.size(), 2u) << p.str(g);
  auto code = target().compile(g, p);
  double sv = 2;
  int64_t sbits;
  std::memcpy(&sbits, &sv, 8);
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const FusedKernel& k = p.kernels[ki];
    std::vector<Buf*> args;
    for (const Access& l : k.loads)
      if (l.scalar_index < 0) args.push_back(&bufs.at(l.value));
    int64_t n = 1;
    for (int64_t d : k.sizes) n *= d;
    for (ValueId st : k.stores) args.push_back(&bufs.emplace(st, Buf(g.value(st).type.dtype, n)).first->second);
    if (k.cat_dim < 0) {
      call(p, ki, args, {sbits}, 0, k.sizes[0]);
      continue;
    }
    EXPECT_EQ(k.cat_ends.back(), k.sizes.at(k.cat_dim)) << p.str(g);
    for (auto [b, e] : ranges) call(p, ki, args, {sbits}, b, std::min(e, k.sizes[0]));
  }
  want->clear();
  for (int64_t r = 0; r < (c.dim == 0 ? total : other); ++r)
    for (int64_t col = 0; col < (c.dim == 0 ? other : total); ++col) {
      int64_t at = c.dim == 0 ? r : col, j = 0;
      while (at >= c.piece_sizes[j]) at -= c.piece_sizes[j++];
      int64_t i = c.dim == 0 ? at * other + col : r * c.piece_sizes[j] + at;
      want->push_back((j == 0 ? -1 : 1) * data[j][i] * 2);
    }
  return bufs.at(y).values();
}

TEST(CpuCodegen, CatPiecesUnderEverySplitOfTheOuterDim) {
  for (const CatCase& c : {CatCase{0, {3, 1, 4}}, CatCase{0, {1, 1}}, CatCase{1, {3, 1, 4}}, CatCase{1, {17, 2}}}) {
    SCOPED_TRACE("dim " + std::to_string(c.dim) + " pieces " + std::to_string(c.piece_sizes.size()));
    int64_t outer = 0;
    for (int64_t n : c.piece_sizes) outer += n;
    if (c.dim != 0) outer = 5;
    // One call; then splits at every point (a range inside a piece, across
    // pieces, of one row).
    std::vector<double> want;
    EXPECT_EQ(run_cat(c, {{0, outer}}, &want), want);
    for (int64_t cut = 1; cut < outer; ++cut) EXPECT_EQ(run_cat(c, {{0, cut}, {cut, outer}}, &want), want) << cut;
    std::vector<std::pair<int64_t, int64_t>> rows;
    for (int64_t r = outer; r-- > 0;) rows.push_back({r, r + 1});  // in reverse, one row each
    EXPECT_EQ(run_cat(c, rows, &want), want);
  }
}

}  // namespace
}  // namespace lazyjit::lowering
