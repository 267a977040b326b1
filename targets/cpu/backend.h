// The answers of a backend whose data and ATen steps stay on the host: the cpu
// target's (backend.cpp) and cuda-sim's (targets/cuda_sim/backend.cpp).
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/CPUAllocator.h>

#include "runtime/backend.h"

namespace lazyjit::runtime {

class HostBackend : public Backend {
 public:
  c10::Device data_device() const override { return c10::Device(c10::DeviceType::CPU); }
  c10::DispatchKey library_key() const override { return c10::DispatchKey::CPU; }
  const at::Generator& default_generator() const override { return at::detail::getDefaultCPUGenerator(); }
  at::Generator new_generator() const override {
    return at::make_generator<at::CPUGeneratorImpl>(c10::detail::getNonDeterministicRandom());
  }
  // Copies from host memory to host memory: nothing to pin.
  c10::Allocator* pinned_host_allocator() const override { return c10::GetCPUAllocator(); }
  lowering::PassRules pass_rules() const override { return lowering::cpu_library_rules(); }
};

}  // namespace lazyjit::runtime
