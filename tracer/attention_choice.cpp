// Which kernel scaled_dot_product_attention takes on the lazyjit device. ATen's
// composite asks _fused_sdp_choice_stub for the device of the query (here
// PrivateUse1) and, for a device that is not CUDA, calls:
//   math      -> _scaled_dot_product_attention_math (ordinary ops: traced, fused)
//   flash     -> _scaled_dot_product_flash_attention_for_cpu (a CPU kernel only)
//   efficient -> convert_boolean_attn_mask + preprocess_mask (ordinary ops), then
//                _scaled_dot_product_efficient_attention (CUDA and Meta kernels;
//                autograd's formula is _scaled_dot_product_efficient_attention_backward)
//   cudnn     -> _scaled_dot_product_cudnn_attention (CUDA only, its own mask rules)
//   overrideable -> _scaled_dot_product_fused_attention_overrideable (unimplemented)
// Each fused op is recorded as one library (Aten) step and runs where programs
// run. So:
//  - the CPU target answers the CPU's choice (flash, run by the CPU's kernel);
//  - the CUDA target answers from CUDA's own choice, asked on stand-in CUDA
//    tensors with the lazy tensors' geometry (torch.backends.cuda.enable_*_sdp
//    and the GPU's abilities count), mapped to what the CUDA executor can run:
//    efficient stays efficient; flash and cudnn become efficient when CUDA
//    would also take efficient for these inputs, else math; math stays math.
//    The mask and scale then go into ATen's memory-efficient kernel itself.
//  - A query whose key length does not keep the mask's rows aligned in the
//    graph takes math (see aligned_mask_rows).
// Test hook: LAZYJIT_TEST_SDP_CHOICE=math|flash|efficient|cudnn stands in for
// CUDA's choice on any target (CUDA is taken to answer that backend while its
// torch.backends flag is on, else efficient while that flag is on, else math),
// so the CUDA route is traced and checked without a GPU
// (tests/python/test_attention_route.py registers CPU kernels for the
// efficient ops).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "env/env.h"
#include "runtime/backend.h"
#include "tracer/lazy_storage.h"

namespace lazyjit::tracer {
namespace {

using at::SDPBackend;
using at::Tensor;

struct SdpArgs {
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const std::optional<Tensor>& mask;
  double dropout_p;
  bool is_causal;
  std::optional<double> scale;
  bool enable_gqa;
};

// LAZYJIT_TEST_SDP_CHOICE, read at each call (tests switch it in a process).
std::optional<SDPBackend> test_choice() {
  const std::string s = env::get("LAZYJIT_TEST_SDP_CHOICE");
  if (s.empty()) return std::nullopt;
  if (s == "math") return SDPBackend::math;
  if (s == "flash") return SDPBackend::flash_attention;
  if (s == "efficient") return SDPBackend::efficient_attention;
  if (s == "cudnn") return SDPBackend::cudnn_attention;
  TORCH_CHECK(false, "lazyjit: LAZYJIT_TEST_SDP_CHOICE=", s,
              " is not an attention backend (math, flash, efficient or cudnn)");
}

bool enabled(SDPBackend b) {
  const at::Context& c = at::globalContext();
  switch (b) {
    case SDPBackend::flash_attention: return c.userEnabledFlashSDP();
    case SDPBackend::efficient_attention: return c.userEnabledMemEfficientSDP();
    case SDPBackend::cudnn_attention: return c.userEnabledCuDNNSDP();
    default: return true;
  }
}

// What the test hook says CUDA answers: `b` while its flag is on, then the
// next of CUDA's default order that is on.
SDPBackend hooked_choice(SDPBackend b) {
  if (enabled(b)) return b;
  return enabled(SDPBackend::efficient_attention) ? SDPBackend::efficient_attention : SDPBackend::math;
}

// A CUDA tensor with `t`'s sizes, strides, dtype and requires_grad and no
// memory: all _fused_sdp_choice reads is metadata.
Tensor cuda_stand_in(const Tensor& t, c10::Device cuda) {
  Tensor s = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(cuda));
  s.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  if (t.requires_grad()) s.set_requires_grad(true);
  return s;
}

SDPBackend cuda_choice(const SdpArgs& a) {
  if (auto b = test_choice()) return hooked_choice(*b);
  const c10::Device cuda = data_device();
  std::optional<Tensor> mask;
  if (a.mask && a.mask->defined()) mask = cuda_stand_in(*a.mask, cuda);
  return static_cast<SDPBackend>(at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(runtime::backend().library_key()), cuda_stand_in(a.q, cuda), cuda_stand_in(a.k, cuda),
      cuda_stand_in(a.v, cuda), mask, a.dropout_p, a.is_causal, a.scale, a.enable_gqa));
}

// Turns off the flash and cuDNN backends (process-wide flags, as
// torch.backends.cuda sets them) for its lifetime; restores them however the
// scope ends.
class FlashAndCudnnOff {
 public:
  FlashAndCudnnOff() {
    at::Context& c = at::globalContext();
    c.setSDPUseFlash(false);
    c.setSDPUseCuDNN(false);
  }
  ~FlashAndCudnnOff() {
    at::Context& c = at::globalContext();
    c.setSDPUseFlash(flash_);
    c.setSDPUseCuDNN(cudnn_);
  }
  FlashAndCudnnOff(const FlashAndCudnnOff&) = delete;
  FlashAndCudnnOff& operator=(const FlashAndCudnnOff&) = delete;

 private:
  const bool flash_ = at::globalContext().userEnabledFlashSDP();
  const bool cudnn_ = at::globalContext().userEnabledCuDNNSDP();
};

// The memory-efficient kernel wants the mask's row, head and batch strides at
// multiples of its alignment (16 bytes: 4 float or 8 half elements; it raises
// "attn_bias is not correctly aligned" otherwise). ATen pads the mask's last
// dim to 16 for it (preprocess_mask), but the graph holds the padded slice as a
// dense [B, H, L, S] value, whose row stride is S. A key length that is a
// multiple of 16 keeps every stride aligned; otherwise math, which is correct
// for any S.
bool aligned_mask_rows(const SdpArgs& a) {
  return !(a.mask && a.mask->defined()) || a.k.dim() < 2 || a.k.size(-2) % 16 == 0;
}

// CUDA's answer mapped to what the lazyjit device records and the CUDA
// executor runs.
SDPBackend cuda_target_choice(const SdpArgs& a) {
  const SDPBackend first = cuda_choice(a);
  SDPBackend b = first;
  if (first == SDPBackend::flash_attention || first == SDPBackend::cudnn_attention) {
    FlashAndCudnnOff off;
    try {
      b = cuda_choice(a);  // efficient when CUDA would also take it here
    } catch (const c10::Error&) {
      b = SDPBackend::math;  // nothing left but flash or cuDNN (math turned off too)
    }
  }
  if (b != SDPBackend::efficient_attention || !aligned_mask_rows(a)) return SDPBackend::math;
  return b;
}

int64_t sdp_choice(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask,
                   double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const SdpArgs a{q, k, v, mask, dropout_p, is_causal, scale, enable_gqa};
  if (!runtime::backend().data_on_host() || test_choice())
    return static_cast<int64_t>(cuda_target_choice(a));
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), q, k, v, mask,
                                                dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace lazyjit::tracer

// The composite asks the stub directly; torch._fused_sdp_choice asks the op.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &lazyjit::tracer::sdp_choice)
}  // namespace at::native

namespace lazyjit::tracer {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", &sdp_choice); }

}  // namespace lazyjit::tracer
