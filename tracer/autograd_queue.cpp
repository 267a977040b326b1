// autograd's engine gives each device type but the CPU a worker thread and a
// ready queue, sized by the devices registered at the process's first
// backward(). A process that ran a backward() before `import lazyjit` has none
// for lazyjit, and its next backward() through lazyjit tensors failed an
// internal assert. At load, lazyjit adds the queue and the thread the engine
// would have made, exactly as Engine::start_device_threads makes them.
#include <torch/csrc/autograd/engine.h>

#include <thread>

#include "tracer/lazyjit.h"

namespace lazyjit::tracer {
namespace {

// The engine's protected members, read through a derived class's member
// pointers (they name the base's members).
struct EngineAccess : torch::autograd::Engine {
  static std::vector<std::shared_ptr<torch::autograd::ReadyQueue>>& queues(torch::autograd::Engine& e) {
    return e.*(&EngineAccess::device_ready_queues_);
  }
  static bool started(torch::autograd::Engine& e) { return e.*(&EngineAccess::thread_pool_shared_) != nullptr; }
};

}  // namespace

void ensure_autograd_device_queue() {
  auto& engine = torch::autograd::Engine::get_default_engine();
  // Not started yet: its first backward() sizes the queues with lazyjit
  // registered. Started with a device (CUDA...): lazyjit's index 0 has a queue.
  if (!EngineAccess::started(engine) || !EngineAccess::queues(engine).empty()) return;
  auto queue = std::make_shared<torch::autograd::ReadyQueue>();
  EngineAccess::queues(engine).push_back(queue);
  // The engine waits for this thread at exit (it counts itself in) and stops it
  // through the queue, as it does its own device threads.
  std::thread(&torch::autograd::Engine::thread_init, &engine, 0, queue, true).detach();
}

}  // namespace lazyjit::tracer
