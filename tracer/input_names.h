// The names a user's code gives a graph's inputs (`x`, `model.layers[0].weight`,
// `batch['ids']`), for recompile explanations (runtime/recompile_explainer.h).
// The Python module registers a provider that lists the tensors the calling
// frames hold, with their names; a graph input is named by the first of them
// that shares its storage. Asked only when a graph compiles, never per op.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace lazyjit::tracer {

struct LazyStorage;

// (name, tensor) pairs, innermost frame first; empty when not known.
using NamedTensors = std::function<std::vector<std::pair<std::string, at::Tensor>>()>;
void set_input_name_provider(NamedTensors provider);

// The name of each storage (null: "") among the provider's tensors, "" for
// those it does not hold.
std::vector<std::string> input_names(const std::vector<const LazyStorage*>& storages);

}  // namespace lazyjit::tracer
