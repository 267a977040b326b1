#include "tracer/input_names.h"

#include <mutex>
#include <unordered_map>

#include "tracer/lazy_storage.h"

namespace lazyjit::tracer {

namespace {
std::mutex g_mu;
NamedTensors g_provider;
}  // namespace

void set_input_name_provider(NamedTensors provider) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_provider = std::move(provider);
}

std::vector<std::string> input_names(const std::vector<const LazyStorage*>& storages) {
  std::vector<std::string> names(storages.size());
  NamedTensors provider;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    provider = g_provider;
  }
  if (!provider) return names;
  std::unordered_map<const LazyStorage*, const std::string*> by_storage;
  std::vector<std::pair<std::string, at::Tensor>> named;
  try {
    named = provider();
  } catch (const std::exception&) {  // names are a courtesy: an explanation goes on without them
    return names;
  }
  for (const auto& [name, t] : named) {
    // A tensor on the device without a lazyjit storage of its own (a wrapper
    // subclass such as DTensor, a tensor with no storage) names nothing.
    if (!t.defined() || !is_lazy(t) || !t.has_storage()) continue;
    const auto* s = static_cast<const LazyStorage*>(t.storage().data_ptr().get_context());
    if (s)
      by_storage.emplace(s, &name);  // the innermost name wins
  }
  for (size_t i = 0; i < storages.size(); ++i)
    if (auto it = by_storage.find(storages[i]); storages[i] && it != by_storage.end()) names[i] = *it->second;
  return names;
}

}  // namespace lazyjit::tracer
