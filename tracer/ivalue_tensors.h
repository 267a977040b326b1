// The tensors inside a boxed argument or result: a Tensor, a Tensor[], a
// Tensor?[] (None elements are skipped) or any other list holding tensors.
#pragma once
#include <ATen/core/ivalue.h>

#include <optional>
#include <vector>

namespace lazyjit::tracer {

// Calls f(const at::Tensor&) on each tensor in `v`, undefined ones included.
template <class F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor()) f(e.toTensor());
  }
}

// `v` with each tensor t replaced by f(t), keeping its kind: a Tensor[] stays a
// Tensor[] and a Tensor?[] keeps its Nones. Anything else is returned as is.
template <class F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> l;
    for (const at::Tensor& t : v.toTensorVector()) l.push_back(f(t));
    return l;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> l;
    for (const c10::IValue& e : v.toListRef())
      l.push_back(e.isNone() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(f(e.toTensor())));
    return l;
  }
  return v;
}

}  // namespace lazyjit::tracer
