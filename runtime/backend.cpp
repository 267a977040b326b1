#include "runtime/backend.h"

#include <stdexcept>

#include "runtime/config.h"

namespace lazyjit::runtime {

// Each in its target's folder (targets/<name>/backend.cpp).
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_sim_backend();
std::unique_ptr<Backend> make_cuda_backend();

const std::vector<std::string>& target_names() {
  static const std::vector<std::string> names{"cpu", "cuda", "cuda-sim"};
  return names;
}

std::unique_ptr<Backend> make_backend(const Config& config) {
  if (config.target == "cpu") return make_cpu_backend();
  if (config.target == "cuda-sim") return make_cuda_sim_backend();
  if (config.target == "cuda") return make_cuda_backend();
  throw std::runtime_error("lazyjit: LAZYJIT_TARGET=" + config.target + " is not a target (cpu, cuda or cuda-sim)");
}

const Backend& backend() {
  static const Backend* b = make_backend(process_config()).release();  // outlives static tensors
  return *b;
}

}  // namespace lazyjit::runtime
