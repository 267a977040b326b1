// Row-reduction kernels: softmax, log_softmax, layer_norm, rms_norm, var and
// plain row reductions, built by hand as the tracer decomposes them, planned by
// plan_graph into ONE row kernel each, compiled by make_cpu_target() and checked
// against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include "lowering/plan.h"
#include "lowering/target.h"
#include "targets/cpu/cpu_target.h"
#include "tests/lowering/test_support.h"

namespace lazyjit::lowering {
namespace {

using ir::Attr;
using ir::OpKind;
using namespace test;
constexpr DType F32 = DType::Float32;

std::vector<double> round_all(DType t, std::vector<double> v) {
  for (double& x : v) x = round_to(t, x);
  return v;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " [" << i << "] got " << g << " want nan";
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " [" << i << "]";
    } else {
      EXPECT_LE(std::abs(g - w), atol + rtol * std::abs(w)) << what << " [" << i << "] got " << g << " want " << w;
    }
  }
}

int64_t f64_bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// --- graphs ------------------------------------------------------------------------
// A row problem: input sizes and how many trailing dims to reduce.
struct Shape {
  std::vector<int64_t> sizes;
  int k;
  int64_t rows() const {
    int64_t r = 1;
    for (size_t d = 0; d + k < sizes.size(); ++d) r *= sizes[d];
    return r;
  }
  int64_t cols() const {
    int64_t c = 1;
    for (size_t d = sizes.size() - k; d < sizes.size(); ++d) c *= sizes[d];
    return c;
  }
  std::vector<int64_t> row_sizes() const {
    std::vector<int64_t> r = sizes;
    for (size_t d = sizes.size() - k; d < sizes.size(); ++d) r[d] = 1;
    return r;
  }
  std::vector<int64_t> col_sizes() const {  // a weight over the reduced dims
    return std::vector<int64_t>(sizes.end() - k, sizes.end());
  }
  std::vector<int64_t> dims() const {
    std::vector<int64_t> d;
    for (size_t i = sizes.size() - k; i < sizes.size(); ++i) d.push_back(static_cast<int64_t>(i));
    return d;
  }
  std::string str() const {
    std::string s = "[";
    for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
    return s + "] k=" + std::to_string(k);
  }
};

std::vector<Shape> shapes() {
  return {{{7, 33}, 1}, {{4, 3, 17}, 1}, {{4, 3, 17}, 2}, {{1, 1000}, 1}, {{5, 0}, 1}, {{1, 1}, 1},
          {{2, 1, 9}, 2}, {{0, 5}, 1}};
}

// Graph helpers in the shape of what the tracer records.
struct G {
  ir::Graph g;
  Shape s;
  DType t = F32;
  ValueId full_op(OpKind op, std::vector<ValueId> in) {
    return g.add_node1(op, std::move(in), {dt(t)}, tt(t, s.sizes));
  }
  ValueId row_op(OpKind op, std::vector<ValueId> in, DType rt = F32) {
    return g.add_node1(op, std::move(in), {dt(rt)}, tt(rt, s.row_sizes()));
  }
  ValueId reduce(OpKind op, ValueId x, DType acc = F32, DType out = F32) {
    return g.add_node1(op, {x}, {dt(acc), Attr{s.dims()}}, tt(out, s.row_sizes()));
  }
};

// Runs every step of `p` (kernels only, unless `aten` runs the others) with
// inputs by value id; each kernel is called over its rows in `parts` ranges.
using AtenFn = std::function<void(const ir::Node&, std::map<ValueId, Buf>&)>;
std::map<ValueId, Buf> run_plan(const ir::Graph& g, Plan& p, std::map<ValueId, Buf> bufs,
                                const std::vector<int64_t>& scalars, int parts = 1,
                                const AtenFn& aten = nullptr) {
  auto code = target().compile(g, p);
  EXPECT_EQ(p.kernel_fns.size(), p.kernels.size());
  for (const Step& st : p.steps) {
    if (st.kind != Step::Kind::Kernel) {
      if (!aten) {
        ADD_FAILURE() << "unexpected library step";
        continue;
      }
      aten(g.nodes()[st.node], bufs);
      continue;
    }
    const FusedKernel& k = p.kernels[st.kernel];
    std::vector<void*> args;
    for (const Access& l : k.loads)
      if (l.scalar_index < 0) args.push_back(bufs.at(l.value).bytes.data());
    for (ValueId v : k.stores) {
      const auto& type = g.value(v).type;
      args.push_back(bufs.emplace(v, Buf(type.dtype, type.numel())).first->second.bytes.data());
    }
    int64_t outer = k.sizes.empty() ? 1 : k.sizes[0];
    int64_t at = 0;
    std::vector<int64_t> dims = kernel_dims(k);
    for (int i = 1; i <= parts; ++i) {
      int64_t next = outer * i / parts;
      if (next > at || i == parts) p.kernel_fns[st.kernel](args.data(), scalars.data(), at, next, dims.data());
      at = next;
    }
  }
  return bufs;
}

std::vector<double> make_input(int64_t n, double scale = 3, double phase = 0) {
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = round_to(F32, std::sin(0.7 * i + phase) * scale + 0.25);
  return x;
}

// Per-row reference over the rows of a [R, C] row-major buffer.
std::vector<double> per_row(const Shape& s, const std::vector<double>& x,
                            const std::function<double(const double*, int64_t)>& f) {
  std::vector<double> r;
  for (int64_t i = 0; i < s.rows(); ++i) r.push_back(f(x.data() + i * s.cols(), s.cols()));
  return r;
}
std::vector<double> per_elem(const Shape& s, const std::vector<double>& x,
                             const std::function<double(const double*, int64_t, int64_t)>& f) {
  std::vector<double> r;
  for (int64_t i = 0; i < s.rows(); ++i)
    for (int64_t j = 0; j < s.cols(); ++j) r.push_back(f(x.data() + i * s.cols(), s.cols(), j));
  return r;
}
double ref_sum(const double* x, int64_t n) {
  double a = 0;
  for (int64_t i = 0; i < n; ++i) a += x[i];
  return a;
}
double ref_max(const double* x, int64_t n) {
  double a = -kInf;
  for (int64_t i = 0; i < n; ++i) a = std::isnan(x[i]) || std::isnan(a) ? kNaN : std::max(a, x[i]);
  return a;
}
double ref_min(const double* x, int64_t n) {
  double a = kInf;
  for (int64_t i = 0; i < n; ++i) a = std::isnan(x[i]) || std::isnan(a) ? kNaN : std::min(a, x[i]);
  return a;
}

// One row kernel whose sizes are [rows, cols] (size-1 dims dropped, except
// that a row kernel keeps one row and one col dim).
void expect_one_row_kernel(const ir::Graph& g, const Plan& p, const Shape& s) {
  ASSERT_EQ(p.steps.size(), 1u) << p.str(g) << g.str();
  ASSERT_EQ(p.kernels.size(), 1u);
  const FusedKernel& k = p.kernels[0];
  EXPECT_TRUE(k.row);
  EXPECT_EQ(k.reduce_rank, 1);
  std::vector<int64_t> want{s.rows(), s.cols()};
  if (s.rows() == 0) want = {0, s.cols()};
  EXPECT_EQ(k.sizes, want) << s.str();
  EXPECT_EQ(k.row_space.size(), k.nodes.size());
}

constexpr double kAtol = 1e-5, kRtol = 1e-5;

// --- tests -------------------------------------------------------------------------

TEST(RowReduce, SumMeanAmaxAmin) {
  for (const Shape& s : shapes()) {
    std::map<ValueId, std::vector<double>> whole;  // one call over all rows
    for (int parts : {1, 2, 3}) {
      G b{{}, s};
      ValueId x = b.g.add_input(tt(F32, s.sizes));
      ValueId inv = b.g.add_scalar(DType::Float64, true);
      ValueId sum = b.reduce(OpKind::ReduceSum, x);
      ValueId mean = b.row_op(OpKind::Mul, {sum, inv});
      ValueId mx = b.reduce(OpKind::ReduceMax, x);
      ValueId mn = b.reduce(OpKind::ReduceMin, x);
      for (ValueId o : {sum, mean, mx, mn}) b.g.add_output(o);
      ASSERT_EQ(b.g.verify(), "");
      Plan p = plan_graph(b.g);
      expect_one_row_kernel(b.g, p, s);
      EXPECT_EQ(p.kernels[0].stores, (std::vector<ValueId>{sum, mean, mx, mn}));
      if (s.cols() != 1) {  // else the row space is the full space, and mean a full-space node
        EXPECT_EQ(p.kernels[0].row_space, (std::vector<bool>{true, true, true, true}));
      }

      std::vector<double> xv = make_input(s.rows() * s.cols());
      if (s.rows() > 2 && s.cols() > 3) {  // NaN rows: one NaN in row 1, all-NaN row 2
        xv[1 * s.cols() + 3] = kNaN;
        for (int64_t j = 0; j < s.cols(); ++j) xv[2 * s.cols() + j] = kNaN;
        xv[0 * s.cols() + 1] = kInf;
      }
      double invn = 1.0 / static_cast<double>(s.cols());
      auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {f64_bits(invn)}, parts);
      size_t R = s.rows();
      std::string what = s.str() + " parts=" + std::to_string(parts);
      auto want_sum = per_row(s, xv, ref_sum);
      expect_close(out.at(sum).values(R), want_sum, kAtol, kRtol, "sum " + what);
      std::vector<double> want_mean;
      for (double v : want_sum) want_mean.push_back(v * invn);
      expect_close(out.at(mean).values(R), want_mean, kAtol, kRtol, "mean " + what);
      expect_close(out.at(mx).values(R), per_row(s, xv, ref_max), 0, 0, "amax " + what);
      expect_close(out.at(mn).values(R), per_row(s, xv, ref_min), 0, 0, "amin " + what);
      for (ValueId v : {sum, mean, mx, mn}) {  // splitting the rows changes nothing
        if (parts == 1) whole[v] = out.at(v).values(R);
        else expect_close(out.at(v).values(R), whole[v], 0, 0, what + " vs one call");
      }
    }
  }
}

ValueId softmax(G& b, ValueId x, bool log) {
  ValueId m = b.reduce(OpKind::ReduceMax, x);
  ValueId d = b.full_op(OpKind::Sub, {x, m});
  ValueId e = b.full_op(OpKind::Exp, {d});
  ValueId s = b.reduce(OpKind::ReduceSum, e);
  if (!log) return b.full_op(OpKind::Div, {e, s});
  ValueId l = b.row_op(OpKind::Log, {s});
  return b.full_op(OpKind::Sub, {d, l});
}

std::vector<double> ref_softmax(const Shape& s, const std::vector<double>& xv, bool log) {
  return per_elem(s, xv, [&](const double* r, int64_t n, int64_t j) {
    double m = ref_max(r, n), z = 0;
    for (int64_t i = 0; i < n; ++i) z += std::exp(r[i] - m);
    return log ? r[j] - m - std::log(z) : std::exp(r[j] - m) / z;
  });
}

TEST(RowReduce, SoftmaxAndLogSoftmaxAreOneKernel) {
  for (bool log : {false, true}) {
    for (const Shape& s : shapes()) {
      std::vector<double> whole;  // the result of one call over all rows
      for (int parts : {1, 2, 3}) {
        G b{{}, s};
        ValueId x = b.g.add_input(tt(F32, s.sizes));
        ValueId y = softmax(b, x, log);
        b.g.add_output(y);
        ASSERT_EQ(b.g.verify(), "");
        Plan p = plan_graph(b.g);
        expect_one_row_kernel(b.g, p, s);
        const FusedKernel& k = p.kernels[0];
        EXPECT_EQ(k.stores, std::vector<ValueId>{y});  // nothing else leaves the kernel
        ASSERT_EQ(k.loads.size(), 1u);
        EXPECT_EQ(k.loads[0].value, x);

        std::vector<double> xv = make_input(s.rows() * s.cols(), 6);
        if (s.rows() > 1 && s.cols() > 3) xv[s.cols() + 2] = kNaN;  // makes all of row 1 NaN
        auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {}, parts);
        std::string what = std::string(log ? "log_softmax " : "softmax ") + s.str() + " parts=" +
                           std::to_string(parts);
        std::vector<double> got = out.at(y).values(xv.size());
        expect_close(got, ref_softmax(s, xv, log), kAtol, 1e-5, what);
        // Bitwise: every row runs the same code, whatever [begin, end) is.
        if (parts == 1) whole = got;
        else expect_close(got, whole, 0, 0, what + " vs one call");
      }
    }
  }
}

// native_layer_norm as decomposed: h = x + residual; mean = sum(h) / N;
// d = h - mean; var = sum(d * d) / N; rstd = rsqrt(var + eps);
// y = d * rstd * weight + bias. Outputs y, mean, rstd.
TEST(RowReduce, LayerNormWithResidualIsOneKernel) {
  for (const Shape& s : shapes()) {
    std::map<ValueId, std::vector<double>> whole;  // one call over all rows
    for (int parts : {1, 2, 3}) {
      G b{{}, s};
      ValueId x = b.g.add_input(tt(F32, s.sizes));
      ValueId res = b.g.add_input(tt(F32, s.sizes));
      ValueId w = b.g.add_input(tt(F32, s.col_sizes()));
      ValueId bias = b.g.add_input(tt(F32, s.col_sizes()));
      ValueId inv = b.g.add_scalar(DType::Float64, true);
      ValueId eps = b.g.add_scalar(DType::Float64, true);
      ValueId h = b.full_op(OpKind::Add, {x, res});
      ValueId sum = b.reduce(OpKind::ReduceSum, h);
      ValueId mean = b.row_op(OpKind::Mul, {sum, inv});
      ValueId d = b.full_op(OpKind::Sub, {h, mean});
      ValueId sq = b.full_op(OpKind::Mul, {d, d});
      ValueId ss = b.reduce(OpKind::ReduceSum, sq);
      ValueId var = b.row_op(OpKind::Mul, {ss, inv});
      ValueId ve = b.row_op(OpKind::Add, {var, eps});
      ValueId rstd = b.row_op(OpKind::Rsqrt, {ve});
      ValueId nrm = b.full_op(OpKind::Mul, {d, rstd});
      ValueId wy = b.full_op(OpKind::Mul, {nrm, w});
      ValueId y = b.full_op(OpKind::Add, {wy, bias});
      b.g.add_output(y);
      b.g.add_output(mean);
      b.g.add_output(rstd);
      b.g.add_output(h);  // the residual stream is an output too
      ASSERT_EQ(b.g.verify(), "");
      Plan p = plan_graph(b.g);
      expect_one_row_kernel(b.g, p, s);
      const FusedKernel& k = p.kernels[0];
      EXPECT_EQ(k.nodes.size(), 12u);
      EXPECT_EQ(k.stores, (std::vector<ValueId>{h, mean, rstd, y}));
      if (s.cols() != 1) {
        EXPECT_EQ(k.row_space, (std::vector<bool>{false, true, true, false, false, true, true, true,
                                                  true, false, false, false}));
      }

      int64_t n = s.rows() * s.cols();
      std::vector<double> xv = make_input(n, 2), rv = make_input(n, 0.5, 1.3);
      std::vector<double> wv = make_input(s.cols(), 1, 0.4), bv = make_input(s.cols(), 0.3, 2.1);
      double invn = 1.0 / static_cast<double>(s.cols()), epsv = 1e-5;
      auto out = run_plan(b.g, p,
                          {{x, Buf(F32, xv)}, {res, Buf(F32, rv)}, {w, Buf(F32, wv)}, {bias, Buf(F32, bv)}},
                          {f64_bits(invn), f64_bits(epsv)}, parts);
      std::vector<double> hv(n);
      for (int64_t i = 0; i < n; ++i) hv[i] = round_to(F32, xv[i] + rv[i]);
      auto mean_of = [&](const double* r, int64_t c) { return ref_sum(r, c) * invn; };
      auto rstd_of = [&](const double* r, int64_t c) {
        double m = mean_of(r, c), v = 0;
        for (int64_t i = 0; i < c; ++i) v += (r[i] - m) * (r[i] - m);
        return 1 / std::sqrt(v * invn + epsv);
      };
      std::string what = "layer_norm " + s.str() + " parts=" + std::to_string(parts);
      expect_close(out.at(h).values(n), hv, 0, 0, what + " h");
      expect_close(out.at(mean).values(s.rows()), per_row(s, hv, mean_of), kAtol, kRtol, what + " mean");
      // rstd ~ 1/sigma amplifies the variance's rounding.
      expect_close(out.at(rstd).values(s.rows()), per_row(s, hv, rstd_of), kAtol, 1e-4, what + " rstd");
      expect_close(out.at(y).values(n), per_elem(s, hv, [&](const double* r, int64_t c, int64_t j) {
                     return (r[j] - mean_of(r, c)) * rstd_of(r, c) * wv[j] + bv[j];
                   }), 1e-4, 1e-4, what + " y");
      for (auto [v, len] : {std::pair{y, n}, {mean, s.rows()}, {rstd, s.rows()}}) {  // bitwise
        if (parts == 1) whole[v] = out.at(v).values(len);
        else expect_close(out.at(v).values(len), whole[v], 0, 0, what + " vs one call");
      }
    }
  }
}

// rms_norm: y = x * rsqrt(mean(x * x) + eps) * weight, in bf16 with f32 math,
// and in f32.
TEST(RowReduce, RmsNormIsOneKernel) {
  for (DType t : {F32, DType::BFloat16}) {
    for (const Shape& s : shapes()) {
      G b{{}, s, t};
      ValueId x = b.g.add_input(tt(t, s.sizes));
      ValueId w = b.g.add_input(tt(t, s.col_sizes()));
      ValueId inv = b.g.add_scalar(DType::Float64, true);
      ValueId eps = b.g.add_scalar(DType::Float64, true);
      ValueId xf = b.g.add_node1(OpKind::Cast, {x}, {dt(F32)}, tt(F32, s.sizes));
      ValueId sq = b.g.add_node1(OpKind::Mul, {xf, xf}, {dt(F32)}, tt(F32, s.sizes));
      ValueId ss = b.reduce(OpKind::ReduceSum, sq);
      ValueId ms = b.row_op(OpKind::Mul, {ss, inv});
      ValueId r = b.row_op(OpKind::Rsqrt, {b.row_op(OpKind::Add, {ms, eps})});
      ValueId nf = b.g.add_node1(OpKind::Mul, {xf, r}, {dt(F32)}, tt(F32, s.sizes));
      ValueId nt = b.full_op(OpKind::Cast, {nf});
      ValueId y = b.full_op(OpKind::Mul, {nt, w});
      b.g.add_output(y);
      ASSERT_EQ(b.g.verify(), "");
      Plan p = plan_graph(b.g);
      expect_one_row_kernel(b.g, p, s);
      EXPECT_EQ(p.kernels[0].stores, std::vector<ValueId>{y});

      int64_t n = s.rows() * s.cols();
      std::vector<double> xv = round_all(t, make_input(n, 2)), wv = round_all(t, make_input(s.cols(), 1, 0.4));
      double invn = 1.0 / static_cast<double>(s.cols()), epsv = 1e-6;
      auto out = run_plan(b.g, p, {{x, Buf(t, xv)}, {w, Buf(t, wv)}}, {f64_bits(invn), f64_bits(epsv)}, 2);
      auto want = per_elem(s, xv, [&](const double* row, int64_t c, int64_t j) {
        double q = 0;
        for (int64_t i = 0; i < c; ++i) q += row[i] * row[i];
        double nrm = round_to(t, row[j] / std::sqrt(q * invn + epsv));
        return round_to(t, nrm * wv[j]);
      });
      double tol = t == F32 ? 1e-5 : 1.6e-2;
      expect_close(out.at(y).values(n), want, 1e-5, tol, std::string(ir::dtype_name(t)) + " rms_norm " + s.str());
    }
  }
}

// var (unbiased) and std of rows, reading an input through a transposed view.
TEST(RowReduce, VarianceOfRows) {
  for (const Shape& s : shapes()) {
    G b{{}, s};
    ValueId x = b.g.add_input(tt(F32, s.sizes));
    ValueId inv = b.g.add_scalar(DType::Float64, true);
    ValueId inv1 = b.g.add_scalar(DType::Float64, true);
    ValueId mean = b.row_op(OpKind::Mul, {b.reduce(OpKind::ReduceSum, x), inv});
    ValueId d = b.full_op(OpKind::Sub, {x, mean});
    ValueId var = b.row_op(OpKind::Mul, {b.reduce(OpKind::ReduceSum, b.full_op(OpKind::Mul, {d, d})), inv1});
    ValueId sd = b.row_op(OpKind::Sqrt, {var});
    b.g.add_output(var);
    b.g.add_output(sd);
    Plan p = plan_graph(b.g);
    expect_one_row_kernel(b.g, p, s);
    EXPECT_EQ(p.kernels[0].stores, (std::vector<ValueId>{var, sd}));
    std::vector<double> xv = make_input(s.rows() * s.cols(), 4, 0.3);
    double c = static_cast<double>(s.cols());
    auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {f64_bits(1 / c), f64_bits(1 / (c - 1))});
    auto var_of = [&](const double* r, int64_t n) {
      double m = ref_sum(r, n) / c, v = 0;
      for (int64_t i = 0; i < n; ++i) v += (r[i] - m) * (r[i] - m);
      return v / (c - 1);
    };
    auto want = per_row(s, xv, var_of);
    if (s.cols() == 0)  // 0 * (1 / -1)
      for (double& v : want) v = -0.0;
    expect_close(out.at(var).values(s.rows()), want, kAtol, kRtol, "var " + s.str());
    std::vector<double> want_sd;
    for (double v : want) want_sd.push_back(s.cols() == 1 ? kNaN : std::sqrt(v));
    if (s.cols() != 1) expect_close(out.at(sd).values(s.rows()), want_sd, kAtol, kRtol, "std " + s.str());
  }
}

// Reads through folded views: a transposed input (rows strided) and a column
// bias broadcast over the rows.
TEST(RowReduce, StridedAndBroadcastLoads) {
  ir::Graph g;
  Shape s{{6, 10}, 1};
  ValueId x = g.add_input(tt(F32, {10, 6}));
  ValueId rb = g.add_input(tt(F32, {6, 1}));  // a row-space weight
  ValueId xt = g.add_node1(OpKind::AsStrided, {x}, {Attr{std::vector<int64_t>{6, 10}, true},
                                                   Attr{std::vector<int64_t>{1, 6}, true}, Attr{int64_t{0}, true}},
                           tt(F32, {6, 10}));
  ValueId sum = g.add_node1(OpKind::ReduceSum, {xt}, {dt(F32), Attr{std::vector<int64_t>{1}}}, tt(F32, {6, 1}));
  ValueId sc = g.add_node1(OpKind::Mul, {sum, rb}, {dt(F32)}, tt(F32, {6, 1}));
  ValueId y = g.add_node1(OpKind::Sub, {xt, sc}, {dt(F32)}, tt(F32, {6, 10}));
  g.add_output(y);
  ASSERT_EQ(g.verify(), "");
  Plan p = plan_graph(g);
  expect_one_row_kernel(g, p, s);
  const FusedKernel& k = p.kernels[0];
  EXPECT_EQ(k.loads[k.load_of(xt)].strides, (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(k.loads[k.load_of(rb)].strides, (std::vector<int64_t>{1, 0}));
  std::vector<double> xv = make_input(60), rv = make_input(6, 1, 0.2);
  auto out = run_plan(g, p, {{x, Buf(F32, xv)}, {rb, Buf(F32, rv)}}, {}, 2);
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) {
    double acc = 0;
    for (int j = 0; j < 10; ++j) acc += xv[j * 6 + i];
    double scv = round_to(F32, round_to(F32, acc) * rv[i]);
    for (int j = 0; j < 10; ++j) want.push_back(xv[j * 6 + i] - scv);
  }
  expect_close(out.at(y).values(60), want, kAtol, kRtol, "strided");
}

// A permuted view whose row dims and col dims do not merge: two row loops and
// two col loops, split over the outer row dim.
TEST(RowReduce, UncoalescableRowsAndCols) {
  ir::Graph g;
  Shape s{{3, 4, 6, 5}, 2};
  ValueId x = g.add_input(tt(F32, {4, 3, 5, 6}));  // strides 90, 30, 6, 1
  ValueId v = g.add_node1(OpKind::AsStrided, {x}, {Attr{std::vector<int64_t>{3, 4, 6, 5}, true},
                                                  Attr{std::vector<int64_t>{30, 90, 1, 6}, true},
                                                  Attr{int64_t{0}, true}},
                          tt(F32, s.sizes));
  G b{std::move(g), s};
  ValueId y = softmax(b, v, false);
  ValueId sum = b.reduce(OpKind::ReduceSum, v);
  b.g.add_output(y);
  b.g.add_output(sum);
  ASSERT_EQ(b.g.verify(), "");
  Plan p = plan_graph(b.g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(b.g);
  const FusedKernel& k = p.kernels[0];
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{3, 4, 6, 5}));
  EXPECT_EQ(k.reduce_rank, 2);
  EXPECT_EQ(k.loads[k.load_of(v)].strides, (std::vector<int64_t>{30, 90, 1, 6}));
  std::vector<double> xv = make_input(360, 4);
  std::vector<double> vv;  // the view, contiguous
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 4; ++c)
      for (int d = 0; d < 6; ++d)
        for (int e = 0; e < 5; ++e) vv.push_back(xv[a * 30 + c * 90 + d + e * 6]);
  for (int parts : {1, 2}) {
    auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {}, parts);
    expect_close(out.at(y).values(360), ref_softmax(s, vv, false), kAtol, 1e-5, "softmax of view");
    expect_close(out.at(sum).values(12), per_row(s, vv, ref_sum), kAtol, kRtol, "sum of view");
  }
}

// Accumulate dtypes: f64 in f64, ints in i64, f16 in f32; int max/min.
TEST(RowReduce, AccumulateDtypes) {
  {  // f16: summing 4099 ones in half would stop at 2048; accumulated in f32.
    Shape s{{3, 4099}, 1};
    G b{{}, s, DType::Float16};
    ValueId x = b.g.add_input(tt(DType::Float16, s.sizes));
    ValueId sum = b.reduce(OpKind::ReduceSum, x, F32, DType::Float16);
    ValueId sum32 = b.reduce(OpKind::ReduceSum, x, F32, F32);
    b.g.add_output(sum);
    b.g.add_output(sum32);
    Plan p = plan_graph(b.g);
    expect_one_row_kernel(b.g, p, s);
    std::vector<double> xv(3 * 4099, 1.0);
    auto out = run_plan(b.g, p, {{x, Buf(DType::Float16, xv)}}, {});
    expect_close(out.at(sum32).values(3), {4099, 4099, 4099}, 0, 0, "f16 sum in f32");
    expect_close(out.at(sum).values(3), std::vector<double>(3, 4100), 0, 0, "f16 sum");
  }
  Shape s{{3, 257}, 1};
  {
    G b{{}, s, DType::Float64};
    ValueId x = b.g.add_input(tt(DType::Float64, s.sizes));
    ValueId sum = b.reduce(OpKind::ReduceSum, x, DType::Float64, DType::Float64);
    b.g.add_output(sum);
    Plan p = plan_graph(b.g);
    std::vector<double> xv = make_input(3 * 257);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] += 1e-9 * i;
    auto out = run_plan(b.g, p, {{x, Buf(DType::Float64, xv)}}, {});
    expect_close(out.at(sum).values(3), per_row(s, xv, ref_sum), 1e-12, 1e-12, "f64 sum");
  }
  {
    G b{{}, s, DType::Int32};
    ValueId x = b.g.add_input(tt(DType::Int32, s.sizes));
    ValueId sum = b.reduce(OpKind::ReduceSum, x, DType::Int64, DType::Int64);
    ValueId mx = b.reduce(OpKind::ReduceMax, x, DType::Int32, DType::Int32);
    ValueId mn = b.reduce(OpKind::ReduceMin, x, DType::Int32, DType::Int32);
    b.g.add_output(sum);
    b.g.add_output(mx);
    b.g.add_output(mn);
    Plan p = plan_graph(b.g);
    expect_one_row_kernel(b.g, p, s);
    std::vector<double> xv(3 * 257);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = (i * 2654435761u) % 2000000000 - 1000000000.0;
    auto out = run_plan(b.g, p, {{x, Buf(DType::Int32, xv)}}, {});
    expect_close(out.at(sum).values(3), per_row(s, xv, ref_sum), 0, 0, "i32 sum in i64");
    expect_close(out.at(mx).values(3), per_row(s, xv, ref_max), 0, 0, "i32 max");
    expect_close(out.at(mn).values(3), per_row(s, xv, ref_min), 0, 0, "i32 min");
  }
  {  // bool: any/all as max/min, count as an i64 sum.
    G b{{}, s, DType::Bool};
    ValueId x = b.g.add_input(tt(DType::Bool, s.sizes));
    ValueId cnt = b.reduce(OpKind::ReduceSum, x, DType::Int64, DType::Int64);
    ValueId any = b.reduce(OpKind::ReduceMax, x, DType::Bool, DType::Bool);
    ValueId all = b.reduce(OpKind::ReduceMin, x, DType::Bool, DType::Bool);
    for (ValueId o : {cnt, any, all}) b.g.add_output(o);
    Plan p = plan_graph(b.g);
    std::vector<double> xv(3 * 257, 1);
    for (int j = 0; j < 257; ++j) xv[j] = 0;
    for (int j = 0; j < 257; j += 3) xv[257 + j] = 0;
    auto out = run_plan(b.g, p, {{x, Buf(DType::Bool, xv)}}, {});
    expect_close(out.at(cnt).values(3), {0, 257 - 86, 257}, 0, 0, "bool count");
    expect_close(out.at(any).values(3), {0, 1, 1}, 0, 0, "bool any");
    expect_close(out.at(all).values(3), {0, 0, 1}, 0, 0, "bool all");
  }
}

// A 0-d reduction over no dims is a one-element row.
TEST(RowReduce, ZeroDim) {
  ir::Graph g;
  ValueId x = g.add_input(tt(F32, {}));
  ValueId s = g.add_node1(OpKind::ReduceSum, {x}, {dt(F32), Attr{std::vector<int64_t>{}}}, tt(F32, {}));
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(F32), Attr{std::vector<int64_t>{}}}, tt(F32, {}));
  g.add_output(s);
  g.add_output(m);
  ASSERT_EQ(g.verify(), "");
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].sizes, (std::vector<int64_t>{1, 1}));
  auto out = run_plan(g, p, {{x, Buf(F32, std::vector<double>{-2.5})}}, {});
  EXPECT_EQ(out.at(s).get(0), -2.5);
  EXPECT_EQ(out.at(m).get(0), -2.5);
}

// A reduction result read by a library step: the row kernel stores it, the
// library step runs, and the consumer is a later plain kernel.
TEST(RowReduce, ReductionFeedingALibraryStep) {
  Shape s{{7, 33}, 1};
  G b{{}, s};
  ValueId x = b.g.add_input(tt(F32, s.sizes));
  ValueId m = b.reduce(OpKind::ReduceMax, x);
  ValueId e = b.full_op(OpKind::Exp, {b.full_op(OpKind::Sub, {x, m})});
  ValueId lib = b.g.add_node(OpKind::Aten, {m}, {{std::string("aten::neg")}, {ir::OperandRef{0}}},
                             {tt(F32, s.row_sizes())})[0];
  ValueId y = b.full_op(OpKind::Add, {e, lib});
  b.g.add_output(y);
  ASSERT_EQ(b.g.verify(), "");
  Plan p = plan_graph(b.g);
  ASSERT_EQ(p.steps.size(), 3u) << p.str(b.g);
  EXPECT_EQ(p.steps[0].kind, Step::Kind::Kernel);
  EXPECT_EQ(p.steps[1].kind, Step::Kind::Aten);
  EXPECT_EQ(p.steps[2].kind, Step::Kind::Kernel);
  const FusedKernel& k0 = p.kernels[p.steps[0].kernel];
  const FusedKernel& k1 = p.kernels[p.steps[2].kernel];
  EXPECT_TRUE(k0.row);
  EXPECT_EQ(k0.stores, (std::vector<ValueId>{m, e}));
  EXPECT_FALSE(k1.row);
  EXPECT_EQ(k1.sizes, (std::vector<int64_t>{7, 33}));
  EXPECT_EQ(k1.loads[k1.load_of(lib)].strides, (std::vector<int64_t>{1, 0}));

  std::vector<double> xv = make_input(7 * 33);
  auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {}, 2, [&](const ir::Node& n, std::map<ValueId, Buf>& bufs) {
    Buf r(F32, 7);
    for (int i = 0; i < 7; ++i) r.set(i, -bufs.at(n.operands[0]).get(i));
    bufs.emplace(n.outputs[0], r);
  });
  std::vector<double> want = per_elem(s, xv, [](const double* r, int64_t c, int64_t j) {
    double mx = ref_max(r, c);
    return round_to(F32, std::exp(r[j] - mx)) - mx;
  });
  expect_close(out.at(y).values(7 * 33), want, kAtol, 1e-5, "lib step");
}

// Elementwise work after a softmax on the same space joins its kernel, and an
// unrelated small kernel in between does not split it.
TEST(RowReduce, ConsumersJoinAndProducersConvert) {
  Shape s{{4, 3, 17}, 2};
  G b{{}, s};
  ValueId x = b.g.add_input(tt(F32, s.sizes));
  ValueId z = b.g.add_input(tt(F32, {5}));
  ValueId pre = b.full_op(OpKind::Mul, {x, x});  // a plain kernel, turned into the row kernel
  ValueId other = b.g.add_node1(OpKind::Neg, {z}, {dt(F32)}, tt(F32, {5}));
  ValueId sm = softmax(b, pre, false);
  ValueId post = b.full_op(OpKind::Mul, {sm, x});
  b.g.add_output(post);
  b.g.add_output(other);
  Plan p = plan_graph(b.g);
  ASSERT_EQ(p.kernels.size(), 2u) << p.str(b.g);
  const FusedKernel& k = p.kernels[0];
  EXPECT_TRUE(k.row);
  EXPECT_EQ(k.nodes.size(), 7u);
  EXPECT_EQ(k.stores, std::vector<ValueId>{post});
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{4, 51}));
  EXPECT_FALSE(p.kernels[1].row);

  std::vector<double> xv = make_input(4 * 51, 1.5);
  auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}, {z, Buf(F32, make_input(5))}}, {});
  std::vector<double> sq;
  for (double v : xv) sq.push_back(round_to(F32, v * v));
  auto want = ref_softmax(s, sq, false);
  for (size_t i = 0; i < want.size(); ++i) want[i] *= xv[i];
  expect_close(out.at(post).values(want.size()), want, kAtol, 1e-5, "softmax consumers");

  // Without fusion every node is its own kernel, reductions included.
  PlanOptions o;
  o.fuse = false;
  Plan q = plan_graph(b.g, o);
  EXPECT_EQ(q.kernels.size(), 8u);
  auto out2 = run_plan(b.g, q, {{x, Buf(F32, xv)}, {z, Buf(F32, make_input(5))}}, {});
  expect_close(out2.at(post).values(want.size()), want, kAtol, 1e-5, "unfused softmax");
}

// Reductions over different dims, or of different inputs' spaces, are
// separate kernels.
TEST(RowReduce, DifferentReductionsSplit) {
  ir::Graph g;
  ValueId x = g.add_input(tt(F32, {4, 3, 5}));
  ValueId a = g.add_node1(OpKind::ReduceSum, {x}, {dt(F32), Attr{std::vector<int64_t>{2}}}, tt(F32, {4, 3, 1}));
  ValueId c = g.add_node1(OpKind::ReduceSum, {x}, {dt(F32), Attr{std::vector<int64_t>{1, 2}}}, tt(F32, {4, 1, 1}));
  ValueId d = g.add_node1(OpKind::ReduceMax, {a}, {dt(F32), Attr{std::vector<int64_t>{1, 2}}}, tt(F32, {4, 1, 1}));
  g.add_output(c);
  g.add_output(d);
  ASSERT_EQ(g.verify(), "");
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 3u) << p.str(g);
  std::vector<double> xv = make_input(60);
  auto out = run_plan(g, p, {{x, Buf(F32, xv)}}, {});
  for (int i = 0; i < 4; ++i) {
    double tot = 0, mx = -kInf;
    for (int j = 0; j < 3; ++j) {
      double r = 0;
      for (int l = 0; l < 5; ++l) r += xv[i * 15 + j * 5 + l];
      tot += r;
      mx = std::max(mx, round_to(F32, r));
    }
    EXPECT_NEAR(out.at(c).get(i), tot, 1e-5);
    EXPECT_NEAR(out.at(d).get(i), mx, 1e-5);
  }
}

TEST(RowReduce, ReductionLoopsVectorize) {
  G b{{}, Shape{{16, 1024}, 1}};
  ValueId x = b.g.add_input(tt(F32, b.s.sizes));
  ValueId y = softmax(b, x, false);
  b.g.add_output(y);
  Plan p = plan_graph(b.g);
  auto code = target().compile(b.g, p);
  const std::string& ir = code->llvm_ir();
  std::string after = ir.substr(ir.find("after optimization"));
  EXPECT_NE(after.find("reduce.fadd"), std::string::npos) << "sum not vectorized:\n" << after;
  EXPECT_NE(after.find("reduce.fmaximum"), std::string::npos) << "max not vectorized:\n" << after;
  std::string before = ir.substr(0, ir.find("after optimization"));
  EXPECT_EQ(before.find("fast "), std::string::npos);  // only reassoc nsz, on the sum
  // exp(x - max) is computed once per element: kept in a row scratch array by
  // the sum's loop, read back by the output's.
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  size_t exps = count(before, "call float @llvm.exp.f32(") + count(before, "call float @expf(");
  EXPECT_EQ(exps, 1u) << before;
  // One element per col; shape-generic code has room for the most cols any
  // row keeping one array can have (kRowScratchBytes / 8).
  const std::string scratch = target().shapes() != Shapes::Off ? "%scratch = alloca [8192 x float]"
                                                               : "%scratch = alloca [1024 x float]";
  EXPECT_NE(before.find(scratch), std::string::npos) << before;
}

// --- long rows --------------------------------------------------------------------
// Sums whose error does not grow with the row (row_schedule.h, SumBlocks): ATen's
// cascade_sum loses ~0.45 on ten million 0.1f; a sequential accumulator lost 1500.

// Neumaier's compensated sum in long double: exact to far below a double's ulp
// (a plain long double sum of millions is not).
long double exact_sum(const double* x, int64_t n) {
  long double s = 0, c = 0;
  for (int64_t i = 0; i < n; ++i) {
    long double t = s + x[i];
    c += std::abs(s) >= std::abs(x[i]) ? (s - t) + x[i] : (x[i] - t) + s;
    s = t;
  }
  return s + c;
}

double ulp_f32(double v) {
  float f = static_cast<float>(std::abs(v));
  return std::nextafter(f, std::numeric_limits<float>::infinity()) - f;
}

// Rows of ten million 0.1f, of a sin wave around 0.25 and of values of both
// signs and mixed magnitudes: each sum within one f32 ulp of the exact sum (plus
// 1e-9 of the sum of magnitudes), the same bits however the rows are split.
TEST(LongRowReduce, FloatSumsAreExactToAnUlp) {
  Shape s{{3, 10'000'019}, 1};
  G b{{}, s};
  ValueId x = b.g.add_input(tt(F32, s.sizes));
  ValueId inv = b.g.add_scalar(DType::Float64, true);
  ValueId sum = b.reduce(OpKind::ReduceSum, x);
  ValueId mean = b.row_op(OpKind::Mul, {sum, inv});
  b.g.add_output(sum);
  b.g.add_output(mean);
  Plan p = plan_graph(b.g);
  expect_one_row_kernel(b.g, p, s);
  const int64_t C = s.cols();
  std::vector<double> xv(3 * C);
  for (int64_t j = 0; j < C; ++j) {
    xv[j] = round_to(F32, 0.1);
    xv[C + j] = round_to(F32, std::sin(0.7 * j) * 3 + 0.25);
    xv[2 * C + j] = round_to(F32, std::sin(1.3 * j) * std::pow(10.0, j % 7 - 3));
  }
  double invn = 1.0 / static_cast<double>(C);
  std::vector<double> whole_sum;
  for (int parts : {1, 2, 3}) {
    auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {f64_bits(invn)}, parts);
    std::vector<double> got = out.at(sum).values(3), got_mean = out.at(mean).values(3);
    for (int r = 0; r < 3; ++r) {
      const double* row = xv.data() + r * C;
      double want = static_cast<double>(exact_sum(row, C)), mags = 0;
      for (int64_t j = 0; j < C; ++j) mags += std::abs(row[j]);
      EXPECT_LE(std::abs(got[r] - want), ulp_f32(want) + 1e-9 * mags) << "row " << r << " got " << got[r]
                                                                       << " want " << want;
      double want_mean = static_cast<double>(want * invn);
      EXPECT_LE(std::abs(got_mean[r] - want_mean), 2 * ulp_f32(want_mean) + 1e-9 * mags * invn)
          << "mean of row " << r;
    }
    if (parts == 1) whole_sum = got;
    else expect_close(got, whole_sum, 0, 0, "sum vs one call, parts=" + std::to_string(parts));
  }
}

// torch.ones(1).expand(2**31).sum(): 2^31 reads of one element through stride 0.
// Per-lane f32 accumulators stop growing at 2^24; blocks of 4096 sum exactly.
TEST(LongRowReduce, BroadcastOneSummedTwoTo31TimesIsExact) {
  const int64_t n = int64_t{1} << 31;
  ir::Graph g;
  ValueId x = g.add_input(tt(F32, {1, 1}));
  ValueId v = g.add_node1(OpKind::AsStrided, {x}, {Attr{std::vector<int64_t>{1, n}, true},
                                                  Attr{std::vector<int64_t>{0, 0}, true}, Attr{int64_t{0}, true}},
                          tt(F32, {1, n}));
  ValueId sum = g.add_node1(OpKind::ReduceSum, {v}, {dt(F32), Attr{std::vector<int64_t>{1}}}, tt(F32, {1, 1}));
  g.add_output(sum);
  ASSERT_EQ(g.verify(), "");
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  EXPECT_EQ(p.kernels[0].loads[0].strides, (std::vector<int64_t>{0, 0}));
  auto out = run_plan(g, p, {{x, Buf(F32, std::vector<double>{1.0})}}, {});
  EXPECT_EQ(out.at(sum).get(0), 2147483648.0);
}

// float64 sums: within 2 ulp of the exact sum, plus 1e-17 of the sum of
// magnitudes where the values cancel (mixed signs and magnitudes).
TEST(LongRowReduce, DoubleSumsAreExactToUlps) {
  Shape s{{2, 5'000'011}, 1};
  G b{{}, s, DType::Float64};
  ValueId x = b.g.add_input(tt(DType::Float64, s.sizes));
  ValueId sum = b.reduce(OpKind::ReduceSum, x, DType::Float64, DType::Float64);
  b.g.add_output(sum);
  Plan p = plan_graph(b.g);
  const int64_t C = s.cols();
  std::vector<double> xv(2 * C);
  for (int64_t j = 0; j < C; ++j) {
    xv[j] = 0.1 + 1e-9 * static_cast<double>(j % 1000);
    xv[C + j] = std::sin(1.3 * j) * std::pow(10.0, j % 9 - 4);
  }
  auto out = run_plan(b.g, p, {{x, Buf(DType::Float64, xv)}}, {}, 2);
  for (int r = 0; r < 2; ++r) {
    double want = static_cast<double>(exact_sum(xv.data() + r * C, C)), mags = 0;
    for (int64_t j = 0; j < C; ++j) mags += std::abs(xv[r * C + j]);
    double ulp = std::nextafter(std::abs(want), kInf) - std::abs(want);
    EXPECT_LE(std::abs(out.at(sum).get(r) - want), 2 * ulp + 1e-17 * mags) << "row " << r;
  }
}

// NaN and inf in long rows, in whichever block they fall: inf stays inf, inf and
// -inf make NaN, a NaN stays NaN, and f32 overflow across blocks is inf.
TEST(LongRowReduce, NanAndInfPropagateAcrossBlocks) {
  Shape s{{5, 3 * kSumBlockCols + 5}, 1};
  G b{{}, s};
  ValueId x = b.g.add_input(tt(F32, s.sizes));
  ValueId sum = b.reduce(OpKind::ReduceSum, x);
  b.g.add_output(sum);
  Plan p = plan_graph(b.g);
  ASSERT_TRUE(p.kernels[0].schedule.steps[0].blocks);
  const int64_t C = s.cols();
  std::vector<double> xv(5 * C, 1.0);
  xv[0 * C + 2 * kSumBlockCols + 7] = kInf;
  xv[1 * C + 5] = kInf;
  xv[1 * C + C - 1] = -kInf;
  xv[2 * C + kSumBlockCols] = kNaN;
  xv[3 * C + 1] = 3e38;
  xv[3 * C + kSumBlockCols + 1] = 3e38;
  xv[4 * C + 2] = -kInf;
  auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {});
  expect_close(out.at(sum).values(5), {kInf, kNaN, kNaN, kInf, -kInf}, 0, 0, "long row nan/inf");
}

// Half-precision inputs accumulate in f32 on long rows too: 2^25 f16 ones (past
// 2^24, where f32 lanes would stall) sum exactly; cast back to f16 it is inf.
TEST(LongRowReduce, HalfSumsAccumulateInFloat) {
  const int64_t n = int64_t{1} << 25;
  ir::Graph g;
  ValueId x = g.add_input(tt(DType::Float16, {1, 1}));
  ValueId v = g.add_node1(OpKind::AsStrided, {x}, {Attr{std::vector<int64_t>{1, n}, true},
                                                  Attr{std::vector<int64_t>{0, 0}, true}, Attr{int64_t{0}, true}},
                          tt(DType::Float16, {1, n}));
  auto reduce = [&](DType out) {
    return g.add_node1(OpKind::ReduceSum, {v}, {dt(F32), Attr{std::vector<int64_t>{1}}}, tt(out, {1, 1}));
  };
  ValueId s32 = reduce(F32), s16 = reduce(DType::Float16);
  g.add_output(s32);
  g.add_output(s16);
  Plan p = plan_graph(g);
  auto out = run_plan(g, p, {{x, Buf(DType::Float16, std::vector<double>{1.0})}}, {});
  EXPECT_EQ(out.at(s32).get(0), static_cast<double>(n));
  EXPECT_EQ(out.at(s16).get(0), kInf);
}

// softmax and layer_norm over rows of millions: the outputs of each softmax row
// sum to 1, and both match float64 references elementwise as on short rows.
TEST(LongRowReduce, SoftmaxAndLayerNormOfLongRows) {
  Shape s{{2, 4'000'037}, 1};
  const int64_t C = s.cols(), n = 2 * C;
  std::vector<double> xv = make_input(n, 6);
  for (int parts : {1, 2}) {
    G b{{}, s};
    ValueId x = b.g.add_input(tt(F32, s.sizes));
    ValueId y = softmax(b, x, false);
    b.g.add_output(y);
    Plan p = plan_graph(b.g);
    std::vector<double> got = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {}, parts).at(y).values(n);
    for (int r = 0; r < 2; ++r) {
      const double* row = xv.data() + r * C;
      double m = ref_max(row, C), z = 0;
      for (int64_t j = 0; j < C; ++j) z += std::exp(row[j] - m);
      long double total = 0;
      double worst = 0;
      for (int64_t j = 0; j < C; ++j) {
        total += got[r * C + j];
        double want = std::exp(row[j] - m) / z;
        worst = std::max(worst, std::abs(got[r * C + j] - want) / want);
      }
      EXPECT_LE(std::abs(static_cast<double>(total) - 1), 1e-6) << "softmax row " << r << " parts " << parts;
      EXPECT_LE(worst, 2e-6) << "softmax row " << r;
    }
  }
  // layer_norm without affine: mean, rstd and y against float64.
  G b{{}, s};
  ValueId x = b.g.add_input(tt(F32, s.sizes));
  ValueId inv = b.g.add_scalar(DType::Float64, true);
  ValueId eps = b.g.add_scalar(DType::Float64, true);
  ValueId mean = b.row_op(OpKind::Mul, {b.reduce(OpKind::ReduceSum, x), inv});
  ValueId d = b.full_op(OpKind::Sub, {x, mean});
  ValueId var = b.row_op(OpKind::Mul, {b.reduce(OpKind::ReduceSum, b.full_op(OpKind::Mul, {d, d})), inv});
  ValueId rstd = b.row_op(OpKind::Rsqrt, {b.row_op(OpKind::Add, {var, eps})});
  ValueId y = b.full_op(OpKind::Mul, {d, rstd});
  for (ValueId o : {y, mean, rstd}) b.g.add_output(o);
  Plan p = plan_graph(b.g);
  std::vector<double> lv = make_input(n, 2, 0.5);
  double invn = 1.0 / static_cast<double>(C), epsv = 1e-5;
  auto out = run_plan(b.g, p, {{x, Buf(F32, lv)}}, {f64_bits(invn), f64_bits(epsv)});
  for (int r = 0; r < 2; ++r) {
    const double* row = lv.data() + r * C;
    double m = static_cast<double>(exact_sum(row, C)) * invn, v = 0;
    for (int64_t j = 0; j < C; ++j) v += (row[j] - m) * (row[j] - m);
    double rs = 1 / std::sqrt(v * invn + epsv), worst = 0;
    for (int64_t j = 0; j < C; ++j) worst = std::max(worst, std::abs(out.at(y).get(r * C + j) - (row[j] - m) * rs));
    EXPECT_LE(std::abs(out.at(mean).get(r) - m), 1e-7 * (1 + std::abs(m))) << "mean row " << r;
    EXPECT_LE(std::abs(out.at(rstd).get(r) - rs), 2e-6 * rs) << "rstd row " << r;
    EXPECT_LE(worst, 2e-6) << "y row " << r;
  }
}

// Blocks spanning two col dims that do not merge (inner dim 3, chunks of the
// 5000-long one) and chunking the inner dim (3 x 5000 read transposed).
TEST(LongRowReduce, BlocksOverUncoalescedColDims) {
  struct View {
    std::vector<int64_t> sizes, strides;
  };
  for (const View& vw : {View{{2, 5000, 3}, {5000, 1, 10000}}, View{{2, 3, 5000}, {5000, 10000, 1}}}) {
    ir::Graph g;
    ValueId x = g.add_input(tt(F32, {3, 2, 5000}));
    ValueId v = g.add_node1(OpKind::AsStrided, {x}, {Attr{vw.sizes, true}, Attr{vw.strides, true}, Attr{int64_t{0}, true}},
                            tt(F32, vw.sizes));
    Shape s{vw.sizes, 2};
    G b{std::move(g), s};
    ValueId sum = b.reduce(OpKind::ReduceSum, v);
    ValueId y = softmax(b, v, false);
    b.g.add_output(sum);
    b.g.add_output(y);
    Plan p = plan_graph(b.g);
    ASSERT_EQ(p.kernels.size(), 1u) << p.str(b.g);
    EXPECT_EQ(p.kernels[0].sizes, vw.sizes);
    std::vector<double> xv = make_input(30000, 2), vv;  // the view, contiguous
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < vw.sizes[1]; ++j)
        for (int64_t l = 0; l < vw.sizes[2]; ++l) vv.push_back(xv[i * vw.strides[0] + j * vw.strides[1] + l * vw.strides[2]]);
    auto out = run_plan(b.g, p, {{x, Buf(F32, xv)}}, {}, 2);
    std::string what = "view " + s.str();
    expect_close(out.at(sum).values(2), per_row(s, vv, ref_sum), 1e-4, 1e-6, "sum " + what);
    std::vector<double> want(vv.size());
    for (int64_t i = 0; i < 2; ++i) {
      const double* row = vv.data() + i * 15000;
      double m = ref_max(row, 15000), z = 0;
      for (int64_t j = 0; j < 15000; ++j) z += std::exp(row[j] - m);
      for (int64_t j = 0; j < 15000; ++j) want[i * 15000 + j] = std::exp(row[j] - m) / z;
    }
    expect_close(out.at(y).values(vv.size()), want, 1e-9, 2e-6, "softmax " + what);
  }
}

}  // namespace
}  // namespace lazyjit::lowering
