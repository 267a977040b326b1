#include "targets/cuda/device_launch.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "bridge/aten_ir.h"
#include "targets/cuda/driver.h"
#include "debug/metrics.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

using lowering::DeviceKernel;

int64_t device_total(const lowering::FusedKernel& k, DeviceKernel::Grid grid) {
  size_t end = k.sizes.size();
  // Rows: the row dims, all but the trailing reduce_rank (col) dims.
  if (grid == DeviceKernel::Grid::Rows) end -= std::min<size_t>(static_cast<size_t>(std::max(k.reduce_rank, 0)), end);
  int64_t n = 1;  // a 0-d kernel runs its one element
  for (size_t i = 0; i < end; ++i) n *= k.sizes[i];
  return n;
}

uint32_t device_grid(const DeviceKernel& dk, int64_t total) {
  if (total <= 0) return 0;
  if (dk.grid == DeviceKernel::Grid::Rows) {
    // Warp rows: rows_per_block rows a block (one a warp); block rows: one.
    const int64_t rows = std::max<int32_t>(dk.rows_per_block, 1);
    return static_cast<uint32_t>(std::min<int64_t>((total + rows - 1) / rows, INT32_MAX));
  }
  // Vectorized kernels take elements_per_thread consecutive elements a thread.
  const int64_t ept = std::max<int32_t>(dk.elements_per_thread, 1);
  total = (total + ept - 1) / ept;
  // Grid-stride: past 2^20 blocks (2^28 threads of 256, more than any GPU
  // holds at once) each thread takes more than one element instead.
  const int64_t block = std::max<int32_t>(dk.block, 1);
  return static_cast<uint32_t>(std::min<int64_t>((total + block - 1) / block, int64_t{1} << 20));
}

std::vector<int64_t> device_dims(const lowering::FusedKernel& k, const std::vector<int64_t>& dims,
                                 const std::vector<int64_t>& scalars) {
  std::vector<int64_t> d = dims;
  // kernel_dims' layout (lowering/plan.h): the sizes (one entry for a 0-d
  // kernel), then per load a scalar's slot or a buffer's strides and offset.
  const size_t rank = std::max<size_t>(k.sizes.size(), 1);
  size_t pos = rank;
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index < 0) {
      pos += rank + 1;
      continue;
    }
    if (pos >= d.size() || d[pos] != a.scalar_index || static_cast<size_t>(a.scalar_index) >= scalars.size())
      throw std::logic_error("lazyjit: device kernel: scalar " + std::to_string(a.scalar_index) +
                             " not where kernel_dims put it, or not bound (" + std::to_string(scalars.size()) +
                             " scalars)");
    d[pos++] = scalars[a.scalar_index];
  }
  return d;
}

bool launch_device_kernel(const lowering::FusedKernel& k, const DeviceKernel& dk, ModuleLoads& modules,
                          const std::vector<int64_t>& dims, const ir::Graph& g, std::vector<at::Tensor>& env,
                          const std::vector<int64_t>& scalars,
                          const std::vector<std::pair<ir::ValueId, at::Tensor>>& into, bool check_stores) {
  const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  std::optional<c10::Device> device;
  for (const lowering::Access& a : k.loads)
    if (a.scalar_index < 0 && env[a.value].defined() && env[a.value].device().is_cuda()) {
      device = env[a.value].device();
      break;
    }
  if (!device) device = cuda->getDevice();
  // Allocations, the stream and the driver's current context: this device's.
  c10::DeviceGuard guard(*device);
  // PyTorch's current stream on the device, so the kernel is ordered with the
  // ATen ops around it and with the caching allocator's reuse of its buffers.
  c10::Stream stream = cuda->getStream(*device);
  // A storage made on another stream (a side stream's tensor) goes back to the
  // caching allocator in that stream's order when freed: recorded on this
  // stream (recordStream), it is not handed out again before the kernel ran.
  auto record = [&](const at::Tensor& t) { cuda->recordDataPtrOnStream(t.storage().data_ptr(), stream); };

  std::vector<void*> bufs;
  bufs.reserve(k.loads.size() + k.stores.size());
  // Loads on another device (the tracer's CPU storages) are read from a copy
  // here, freed at return: the caching allocator hands its block out again only
  // in stream order, after the kernel.
  std::vector<at::Tensor> copies;
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index < 0) {
      const ir::TensorType& type = g.value(a.value).type;
      if (env[a.value].device() == *device) {
        const at::Tensor& t = env[a.value] = with_layout(env[a.value], type);
        record(t);
        bufs.push_back(t.data_ptr());
      } else {
        copies.push_back(with_layout(env[a.value].to(*device), type));
        bufs.push_back(copies.back().data_ptr());
      }
    }
  }
  const at::TensorOptions on_device = at::TensorOptions().device(*device);
  for (ir::ValueId v : k.stores) {
    const ir::TensorType& t = g.value(v).type;
    auto dest = std::find_if(into.begin(), into.end(), [&](const auto& d) { return d.first == v; });
    if (dest != into.end() && dest->second.defined() && dest->second.device() == *device &&
        dest->second.is_contiguous() && dest->second.sizes().equals(t.sizes) &&
        dest->second.scalar_type() == bridge::to_aten(t.dtype)) {
      env[v] = dest->second;
      record(env[v]);
    } else
      env[v] = at::empty(t.sizes, on_device.dtype(bridge::to_aten(t.dtype)));  // PyTorch's caching allocator
    bufs.push_back(env[v].data_ptr());
  }

  // A row kernel over empty rows still writes its row results (its rows are
  // the work then, not its elements).
  int64_t total = device_total(k, dk.grid);
  uint32_t grid = device_grid(dk, total);
  if (grid == 0) return false;

  // The parameters of device_kernel.h, each by the address of its value.
  std::vector<int64_t> d = device_dims(k, dims, scalars);
  at::Tensor flag;
  void* flag_ptr = nullptr;
  std::vector<void*> params;
  params.reserve(bufs.size() + 3);
  for (void*& b : bufs) params.push_back(&b);
  if (check_stores) {
    flag = at::zeros({1}, on_device.dtype(at::kInt));
    flag_ptr = flag.data_ptr();
    params.push_back(&flag_ptr);
  }
  params.push_back(&total);
  params.push_back(d.data());  // a byval array: its bytes
  // The kernel's function in this device's context (the guard made it
  // current): its module is loaded at the kernel's first launch here (inside
  // a capture of the stream too: cuda_driver::load_module).
  void* function = modules.function(device->index(), stream.native_handle());
  debug::Metrics::get().add(debug::Counter::DeviceKernelLaunches);
  cuda_driver::launch(function, grid, static_cast<uint32_t>(dk.block), static_cast<uint32_t>(dk.shared_bytes),
                      stream.native_handle(), params.data());
  return check_stores && flag.item<int32_t>() != 0;  // item(): a sync on the stream
}

}  // namespace lazyjit::executor
