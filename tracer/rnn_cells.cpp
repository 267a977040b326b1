// Kernels for ops ATen routes differently for out-of-tree devices than for the
// CPU. The fused RNN cells (used for every device but the CPU, which has no
// kernels for them) are written as ordinary ops, so they are traced and fused
// like any other; their workspace layouts are ours. (The attention backend
// choice, the other such op, is tracer/attention_choice.cpp.)
#include <ATen/ATen.h>
#include <torch/library.h>

namespace lazyjit::tracer {
namespace {

using at::Tensor;

at::Tensor with_bias(Tensor gates, const std::optional<Tensor>& b) {
  return b && b->defined() ? gates + *b : gates;
}

// workspace = [i, f, g, o] (activated gates)
std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                             const Tensor& cx, const std::optional<Tensor>& input_bias,
                                             const std::optional<Tensor>& hidden_bias) {
  auto gates = with_bias(with_bias(input_gates + hidden_gates, input_bias), hidden_bias).chunk(4, 1);
  auto i = gates[0].sigmoid(), f = gates[1].sigmoid(), g = gates[2].tanh(), o = gates[3].sigmoid();
  auto cy = f * cx + i * g;
  auto hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(const std::optional<Tensor>& grad_hy,
                                                      const std::optional<Tensor>& grad_cy, const Tensor& cx,
                                                      const Tensor& cy, const Tensor& workspace, bool has_bias) {
  auto ws = workspace.chunk(4, 1);
  auto &i = ws[0], &f = ws[1], &g = ws[2], &o = ws[3];
  auto tanh_cy = cy.tanh();
  bool has_h = grad_hy && grad_hy->defined(), has_c = grad_cy && grad_cy->defined();
  Tensor gcx = has_c ? *grad_cy : at::zeros_like(cy);
  Tensor go = at::zeros_like(o);
  if (has_h) {
    gcx = gcx + *grad_hy * o * (1 - tanh_cy * tanh_cy);
    go = *grad_hy * tanh_cy * o * (1 - o);
  }
  auto gi = gcx * g * i * (1 - i);
  auto gf = gcx * cx * f * (1 - f);
  auto gg = gcx * i * (1 - g * g);
  auto grad_gates = at::cat({gi, gf, gg, go}, 1);
  return {grad_gates, gcx * f, has_bias ? grad_gates.sum(0) : Tensor()};
}

// workspace = [r, z, n, hx, hn]
std::tuple<Tensor, Tensor> gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                    const std::optional<Tensor>& input_bias,
                                    const std::optional<Tensor>& hidden_bias) {
  auto ig = with_bias(input_gates, input_bias).chunk(3, 1);
  auto hg = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  auto r = (ig[0] + hg[0]).sigmoid();
  auto z = (ig[1] + hg[1]).sigmoid();
  auto n = (ig[2] + r * hg[2]).tanh();
  auto hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hg[2]}, 1)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> gru_cell_backward(const Tensor& grad_hy, const Tensor& workspace,
                                                                     bool has_bias) {
  auto ws = workspace.chunk(5, 1);
  auto &r = ws[0], &z = ws[1], &n = ws[2], &hx = ws[3], &hn = ws[4];
  auto grad_hx = grad_hy * z;
  auto gn = grad_hy * (1 - z) * (1 - n * n);
  auto gz = grad_hy * (hx - n) * z * (1 - z);
  auto gr = gn * hn * r * (1 - r);
  auto grad_input = at::cat({gr, gz, gn}, 1);
  auto grad_hidden = at::cat({gr, gz, gn * r}, 1);
  return {grad_input, grad_hidden, grad_hx, has_bias ? grad_input.sum(0) : Tensor(),
          has_bias ? grad_hidden.sum(0) : Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", &lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", &lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", &gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", &gru_cell_backward);
}

}  // namespace lazyjit::tracer
