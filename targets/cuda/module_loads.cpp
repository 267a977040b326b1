#include "targets/cuda/module_loads.h"

#include <map>
#include <stdexcept>

namespace lazyjit::executor {

ModuleLoads::ModuleLoads(const lowering::DeviceKernel& dk) : image_(dk.image), symbol_(dk.symbol) {}

void* ModuleLoads::function(int device, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Loaded& l : loaded_)
    if (l.device == device) return l.function;
  if (image_.empty())
    throw std::runtime_error("lazyjit: CUDA kernel " + symbol_ + " has no image to load on device " +
                             std::to_string(device));
  try {
    std::shared_ptr<cuda_driver::Module> m = cuda_driver::load_module(std::string(image_), stream);
    void* f = m->function(symbol_);
    loaded_.push_back(Loaded{device, std::move(m), f});
    return f;
  } catch (const std::exception& e) {
    throw std::runtime_error("lazyjit: CUDA kernel " + symbol_ + " not loaded on device " + std::to_string(device) +
                             ": " + e.what());
  }
}

std::vector<int> ModuleLoads::devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> d;
  for (const Loaded& l : loaded_) d.push_back(l.device);
  return d;
}

std::shared_ptr<ModuleLoads> module_loads(const lowering::DeviceKernel& dk) {
  // By the image's address: while a ModuleLoads lives, a thunk holding it
  // lives, and so its program's code, which owns the image; an address reused
  // by another image finds only an expired entry.
  if (dk.image.empty()) return std::make_shared<ModuleLoads>(dk);  // its first run says it has none
  static std::mutex mu;
  static std::map<std::pair<const char*, size_t>, std::weak_ptr<ModuleLoads>> by_image;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = by_image.begin(); it != by_image.end();) it = it->second.expired() ? by_image.erase(it) : ++it;
  std::weak_ptr<ModuleLoads>& slot = by_image[{dk.image.data(), dk.image.size()}];
  std::shared_ptr<ModuleLoads> loads = slot.lock();
  if (!loads) {
    loads = std::make_shared<ModuleLoads>(dk);
    slot = loads;
  }
  return loads;
}

}  // namespace lazyjit::executor
