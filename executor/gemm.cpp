#include "executor/gemm.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <chrono>
#include <optional>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "executor/small_gemm.h"

namespace lazyjit::executor {

namespace {

// Below this many multiply-adds oneDNN's per-call setup (~10 us) outweighs its
// faster inner loops (a [1,256]x[256,688] decode GEMM: 27 us against MKL's 16).
constexpr int64_t kMinMacs = int64_t{1} << 23;

// Row-major or column-major without gaps or overlap: a layout oneDNN reads as
// a plain memory descriptor.
bool plain(const at::Tensor& t) {
  return (t.stride(1) == 1 && t.stride(0) >= t.size(1)) || (t.stride(0) == 1 && t.stride(1) >= t.size(0));
}

// oneDNN's AVX-512 code: where the x86 wheels' MKL runs AVX2 on an AMD CPU, a
// column-major mat1 is faster through oneDNN too.
bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// A column-major mat1 oneDNN copies to row-major first: up to this many
// elements (16 MiB of float32) that copy is cheap and short-lived; a bigger one
// (the tied lm_head's gradient of a 50k vocabulary, g^T [50257, 512]: 103 MB)
// would raise a training step's peak memory by its size for a 1.21x GEMM
// (bench/results/gemm.md).
constexpr int64_t kMaxColumnMajorMat1 = int64_t{1} << 22;

// mat1 row-major (activations, gradients of outputs); mat2 either way (a
// Linear's weight is read transposed in the forward, as it is in the input's
// gradient). A column-major mat1 (g^T @ x, a weight's gradient) on a CPU with
// AVX-512: oneDNN took 0.48-0.51x of MKL's time on a GPT-2-small training step's
// layer weight gradients (bench/results/gemm.md); without AVX-512 it stays MKL
// (0.87x the other way, bench/results/gemm_avx2.md).
bool fits_onednn(const at::Tensor& a, const at::Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const bool row_major = a.stride(1) == 1 && a.stride(0) >= k;
  const bool column_major = cpu_has_avx512() && a.numel() <= kMaxColumnMajorMat1 && plain(a);
  return m * k * n >= kMinMacs && (row_major || column_major) && plain(b);
}

// 1 to max_rows rows of a, each contiguous; mat2 = w^T with w's rows
// contiguous (a Linear's weight).
bool fits_small(const at::Tensor& a, const at::Tensor& b, int64_t max_rows = kSmallGemmMaxRows) {
  const int64_t m = a.size(0), k = a.size(1);
  return m <= max_rows && a.stride(1) == 1 && (m == 1 || a.stride(0) >= k) && b.stride(0) == 1 &&
         b.stride(1) >= k;
}

bool is_one(const c10::IValue& v) { return v.isScalar() && v.toScalar().equal(1); }

// The operands of an mm or addmm step that a GEMM path may take: 2-D CPU
// tensors of `dtype`, no empty dim, and for addmm a contiguous 1-D bias of
// `dtype` with beta = alpha = 1 (bias undefined for mm). nullopt: ATen's op runs.
struct Operands {
  at::Tensor a, b, bias;
};

std::optional<Operands> float_operands(Gemm kind, const torch::jit::Stack& stack,
                                       at::ScalarType dtype = at::kFloat) {
  // mm(self, mat2); addmm(self = bias, mat1, mat2, beta, alpha)
  const size_t first = kind == Gemm::Mm ? 0 : 1;
  if (stack.size() != (kind == Gemm::Mm ? 2u : 5u) || !stack[first].isTensor() || !stack[first + 1].isTensor())
    return std::nullopt;
  Operands o{stack[first].toTensor(), stack[first + 1].toTensor(), {}};
  const at::Tensor &a = o.a, &b = o.b;
  if (a.dim() != 2 || b.dim() != 2 || a.scalar_type() != dtype || b.scalar_type() != dtype ||
      !a.device().is_cpu() || !b.device().is_cpu() || a.size(1) != b.size(0) || a.size(0) == 0 || a.size(1) == 0 ||
      b.size(1) == 0)
    return std::nullopt;
  if (kind == Gemm::Addmm) {
    if (!stack[0].isTensor() || !is_one(stack[3]) || !is_one(stack[4])) return std::nullopt;
    o.bias = stack[0].toTensor();
    const at::Tensor& c = o.bias;
    if (c.dim() != 1 || c.size(0) != b.size(1) || c.scalar_type() != dtype || !c.is_contiguous() ||
        !c.device().is_cpu())
      return std::nullopt;
  }
  return o;
}

// The CPU multiplies bfloat16 natively (AVX512-BF16 dot products or AMX tiles):
// there a bf16 GEMM runs ~1.7-2x a float32 one (the bench's shapes, measured
// standalone: 256x512x1376 1921 us -> 1027 us, both operands converted). Without
// it oneDNN would emulate bf16, slower than float32: the opt-in is ignored.
bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  return has;
}

// AMX tiles: there oneDNN's own reduced-precision float32 math (the fpmath mode
// ATen sets from the same switch) runs the GEMM on bf16 tiles straight from the
// float32 operands, as eager's mm under the switch does: 2.1-2.4x faster than
// converting both operands to bfloat16 here first, and the output stays float32
// (measured standalone, 256x512x512: 288 us converted, 121 us float32 in).
bool cpu_has_amx_bf16() {
  static const bool has = __builtin_cpu_supports("amx-bf16");
  return has;
}

}  // namespace

bool bf16_gemms_allowed() {
  return cpu_has_bf16() && at::globalContext().float32Precision(at::Float32Backend::MKLDNN, at::Float32Op::MATMUL) ==
                               at::Float32Precision::BF16;
}

Gemm gemm_kind(const std::string& op_name) {
  if (op_name == "aten::mm") return Gemm::Mm;
  if (op_name == "aten::addmm") return Gemm::Addmm;
  if (op_name == "aten::bmm") return Gemm::Bmm;
  return Gemm::None;
}

namespace {

void run_small(const Operands& o, torch::jit::Stack& stack) {
  const at::Tensor &a = o.a, &b = o.b;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const float* bias = o.bias.defined() ? o.bias.const_data_ptr<float>() : nullptr;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled())
    span.emplace("execute", "small GEMM", debug::TraceArgs{{"m", m}, {"k", k}, {"n", n}, {"bias", bias != nullptr}});
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor y = at::empty({m, n}, a.options());
  small_gemm(a.const_data_ptr<float>(), a.stride(0), b.const_data_ptr<float>(), b.stride(1), bias,
             y.mutable_data_ptr<float>(), m, n, k, at::get_num_threads());
  stack.assign(1, std::move(y));
  // Counted as a timing ("small gemm" in lazyjit.metrics()["timings"]).
  debug::Metrics::get().time("small gemm",
                             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

// run_small in bfloat16 (small_gemm_bf16): bf16 out, as ATen's op gives.
void run_small_bf16(const Operands& o, torch::jit::Stack& stack) {
  const at::Tensor &a = o.a, &b = o.b;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  auto bits = [](const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.const_data_ptr<at::BFloat16>()); };
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled())
    span.emplace("execute", "small GEMM bf16",
                 debug::TraceArgs{{"m", m}, {"k", k}, {"n", n}, {"bias", o.bias.defined()}});
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor y = at::empty({m, n}, a.options());
  small_gemm_bf16(bits(a), a.stride(0), bits(b), b.stride(1), o.bias.defined() ? bits(o.bias) : nullptr,
                  reinterpret_cast<uint16_t*>(y.mutable_data_ptr<at::BFloat16>()), m, n, k, at::get_num_threads());
  stack.assign(1, std::move(y));
  // Counted as timings: "small gemm" (every run of the small kernels) and
  // "small gemm bf16" (those in bfloat16).
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  debug::Metrics::get().time("small gemm", ms);
  debug::Metrics::get().time("small gemm bf16", ms);
}

// False when oneDNN raised: the stack is untouched.
bool run_onednn(const Operands& o, torch::jit::Stack& stack) {
  const at::Tensor &a = o.a, &b = o.b;
  const c10::IValue bias = o.bias.defined() ? c10::IValue(o.bias) : c10::IValue();
  static const c10::OperatorHandle linear =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  const bool bf16 = bf16_gemms_allowed();
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled())
    span.emplace("execute", "oneDNN inner product",
                 debug::TraceArgs{{"m", a.size(0)},
                                  {"k", a.size(1)},
                                  {"n", b.size(1)},
                                  {"bias", bias.isTensor()},
                                  {"bf16", bf16}});
  const auto t0 = std::chrono::steady_clock::now();
  // Y = X W^T (+ B) with W = mat2^T: [n, k], a view, whichever way mat2 is laid out.
  // bf16 with AMX: float32 operands; oneDNN rounds them to bfloat16 on its tiles,
  // sums in float32 and writes float32. bf16 without AMX (AVX512-BF16 only, where
  // that mode was not used): operands rounded to bfloat16 here (the weight each
  // call: a cached copy saved 5% at the bench's shapes, not worth a cache that
  // must notice in-place updates), products summed in float32 by oneDNN, the
  // result rounded to bfloat16 (the op's output dtype) and widened back to float32.
  // A weight with gaps between its rows (a slice of a wider one) oneDNN multiplies
  // in float32 despite the mode (measured); it is converted too. (So does a GEMM
  // with a tiny K, e.g. 3, which still counts as a bf16 one below.)
  const at::Tensor w = b.t();
  const bool convert = bf16 && !(cpu_has_amx_bf16() && (w.is_contiguous() || b.is_contiguous()));
  auto narrow = [&](const at::Tensor& t) { return convert ? t.to(at::kBFloat16) : t; };
  torch::jit::Stack call{narrow(a),
                         narrow(w),
                         bias.isTensor() ? c10::IValue(narrow(bias.toTensor())) : bias,
                         std::string("none"),
                         c10::List<std::optional<at::Scalar>>(),
                         c10::IValue()};
  try {
    linear.callBoxed(&call);
  } catch (const c10::Error&) {
    return false;  // ATen's own op runs it, or raises eager's error
  }
  at::Tensor y = call.at(0).toTensor();
  stack.assign(1, convert ? y.to(at::kFloat) : std::move(y));
  // Counted as timings ("onednn gemm", and "onednn gemm bf16" for those in
  // bfloat16, in lazyjit.metrics()["timings"]).
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  debug::Metrics::get().time("onednn gemm", ms);
  if (bf16) debug::Metrics::get().time("onednn gemm bf16", ms);
  return true;
}

}  // namespace

namespace {
std::atomic<bool> small_gemm_enabled{true};
}  // namespace

void set_small_gemm_enabled(bool on) { small_gemm_enabled.store(on, std::memory_order_relaxed); }

namespace {

// A bmm of one batch (bmm(a, b), a [1, M, K], b [1, K, N]) as the mm of its two
// matrices, the result [1, M, N] (contiguous, as bmm's). A Linear on a slice
// that cannot be folded into one matrix records one (the last token's hidden
// state of a prefill through lm_head: matmul expands the weight to
// [1, K, N]); ATen's bmm hands that transposed weight to oneDNN only after a
// contiguous copy (mkldnn_matmul: ~117 MB per call for a [65536, 896] bf16
// lm_head, longer than the whole rest of the prefill), where its mm reads the
// weight in place, and mm takes the small GEMM kernels. float32 and bfloat16
// CPU tensors; nullopt for others (ATen's bmm runs).
std::optional<at::Tensor> run_one_batch_bmm(torch::jit::Stack& stack) {
  if (stack.size() != 2 || !stack[0].isTensor() || !stack[1].isTensor()) return std::nullopt;
  const at::Tensor &a = stack[0].toTensor(), &b = stack[1].toTensor();
  if (a.dim() != 3 || b.dim() != 3 || a.size(0) != 1 || b.size(0) != 1 || a.size(2) != b.size(1) ||
      a.scalar_type() != b.scalar_type() || (a.scalar_type() != at::kFloat && a.scalar_type() != at::kBFloat16) ||
      !a.device().is_cpu() || !b.device().is_cpu())
    return std::nullopt;
  torch::jit::Stack mm{a.select(0, 0), b.select(0, 0)};
  if (!run_fast_gemm(Gemm::Mm, mm)) {
    static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
    op.callBoxed(&mm);
  }
  return mm.at(0).toTensor().unsqueeze(0);
}

}  // namespace

bool run_fast_gemm(Gemm kind, torch::jit::Stack& stack) {
  if (kind == Gemm::Bmm) {
    std::optional<at::Tensor> y = run_one_batch_bmm(stack);
    if (!y) return false;
    stack.assign(1, std::move(*y));
    return true;
  }
  // LAZYJIT_SMALL_GEMM=off keeps ATen's op (MKL), e.g. to compare or bisect.
  const bool small = small_gemm_enabled.load(std::memory_order_relaxed) && small_gemm_supported();
  if (small) {
    // bfloat16: 1 to 8 rows against a Linear's weight (decoding) run the small
    // GEMM kernel; every other bf16 GEMM, ATen's op (oneDNN, as eager).
    if (std::optional<Operands> o = float_operands(kind, stack, at::kBFloat16)) {
      if (!fits_small(o->a, o->b, kSmallGemmBf16MaxRows)) return false;
      run_small_bf16(*o, stack);
      return true;
    }
  }
  const std::optional<Operands> o = float_operands(kind, stack);
  if (!o) return false;
  if (small && fits_small(o->a, o->b)) {
    run_small(*o, stack);
    return true;
  }
  static const bool mkldnn_built = at::hasMKLDNN();
  return mkldnn_built && at::globalContext().userEnabledMkldnn() && fits_onednn(o->a, o->b) && run_onednn(*o, stack);
}

}  // namespace lazyjit::executor
