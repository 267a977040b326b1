#include "executor/executor.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/Parallel.h>
#include <ATen/EmptyTensor.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "debug/metrics.h"
#include "executor/buffer_pool.h"

namespace lazyjit::executor {

using ir::DType;
using ir::OpKind;
using lowering::Step;

at::ScalarType to_aten(DType t) {
  switch (t) {
    case DType::Bool: return at::kBool;
    case DType::UInt8: return at::kByte;
    case DType::Int8: return at::kChar;
    case DType::Int16: return at::kShort;
    case DType::Int32: return at::kInt;
    case DType::Int64: return at::kLong;
    case DType::Float16: return at::kHalf;
    case DType::BFloat16: return at::kBFloat16;
    case DType::Float32: return at::kFloat;
    case DType::Float64: return at::kDouble;
    case DType::Complex64: return at::kComplexFloat;
    case DType::Complex128: return at::kComplexDouble;
    case DType::Other: break;
  }
  throw std::runtime_error("lazyjit: no ATen dtype for " + std::string(ir::dtype_name(t)));
}

DType from_aten(at::ScalarType t) {
  switch (t) {
    case at::kBool: return DType::Bool;
    case at::kByte: return DType::UInt8;
    case at::kChar: return DType::Int8;
    case at::kShort: return DType::Int16;
    case at::kInt: return DType::Int32;
    case at::kLong: return DType::Int64;
    case at::kHalf: return DType::Float16;
    case at::kBFloat16: return DType::BFloat16;
    case at::kFloat: return DType::Float32;
    case at::kDouble: return DType::Float64;
    case at::kComplexFloat: return DType::Complex64;
    case at::kComplexDouble: return DType::Complex128;
    default: return DType::Other;
  }
}

c10::Scalar scalar_from_slot(int64_t slot, DType dtype) {
  if (ir::is_floating(dtype)) {
    double d;
    std::memcpy(&d, &slot, sizeof d);
    return d;
  }
  if (dtype == DType::Bool) return slot != 0;
  return slot;
}

int64_t slot_from_scalar(const c10::Scalar& s) {
  if (s.isFloatingPoint()) {
    double d = s.toDouble();
    int64_t slot;
    std::memcpy(&slot, &d, sizeof slot);
    return slot;
  }
  if (s.isBoolean()) return s.toBool() ? 1 : 0;
  if (s.isIntegral(false)) return s.toLong();
  throw std::runtime_error("lazyjit: complex and symbolic scalars are not supported yet");
}

int num_threads() {
  static int forced = [] {
    const char* e = std::getenv("LAZYJIT_NUM_THREADS");
    return e ? std::max(1, std::atoi(e)) : 0;
  }();
  return forced ? forced : at::get_num_threads();
}

namespace {

// Makes `t` carry exactly the declared layout, copying only when it does not.
at::Tensor with_layout(const at::Tensor& t, const ir::TensorType& type) {
  if (t.sizes().vec() == type.sizes && t.strides().vec() == type.strides) return t;
  debug::Metrics::get().add(debug::Counter::LayoutCopies);
  at::Tensor out = at::empty_strided(type.sizes, type.strides, t.options());
  out.copy_(t);
  return out;
}

c10::IValue attr_to_ivalue(const ir::AttrValue& a, const c10::Argument& arg,
                           const std::vector<at::Tensor>& env, const ir::Graph& g,
                           const ir::Node& n, const std::vector<int64_t>& scalars) {
  auto operand = [&](int32_t k) -> c10::IValue {
    ir::ValueId v = n.operands.at(k);
    const ir::Node& p = g.producer(v);
    if (p.kind != OpKind::Scalar) return env[v];
    c10::Scalar s = scalar_from_slot(scalars.at(std::get<int64_t>(p.attrs[0].value)), g.value(v).type.dtype);
    const c10::TypePtr& t = arg.real_type();
    if (t->kind() == c10::TypeKind::FloatType ||
        (t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::FloatType))
      return s.toDouble();
    if (t->kind() == c10::TypeKind::NumberType ||
        (t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::NumberType))
      return s;
    // A 0-d CPU tensor argument.
    at::Tensor z = at::scalar_tensor(s, at::TensorOptions().dtype(to_aten(g.value(v).type.dtype)));
    if (p.attrs.size() > 1 && std::get<bool>(p.attrs[1].value)) z.unsafeGetTensorImpl()->set_wrapped_number(true);
    return z;
  };
  return std::visit(
      [&](const auto& x) -> c10::IValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          if (arg.real_type()->kind() == c10::TypeKind::TensorType) return at::Tensor();
          return c10::IValue();
        } else if constexpr (std::is_same_v<T, ir::OperandRef>) {
          return operand(x.index);
        } else if constexpr (std::is_same_v<T, ir::OperandListRef>) {
          bool optional_elems = arg.real_type()->str().find('?') != std::string::npos;
          if (optional_elems) {
            c10::List<std::optional<at::Tensor>> l;
            for (int32_t i : x.indices)
              l.push_back(i < 0 ? std::optional<at::Tensor>() : std::optional<at::Tensor>(operand(i).toTensor()));
            return l;
          }
          std::vector<at::Tensor> l;
          for (int32_t i : x.indices) l.push_back(operand(i).toTensor());
          return l;
        } else if constexpr (std::is_same_v<T, std::string>) {
          // Device arguments name the lazyjit device; the step runs on the CPU.
          if (arg.real_type()->str().find("Device") != std::string::npos) return c10::Device(c10::kCPU);
          return x;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          if (arg.real_type()->str().rfind("bool[", 0) == 0) {
            c10::List<bool> l;
            for (int64_t b : x) l.push_back(b != 0);
            return l;
          }
          return x;
        } else {
          return x;
        }
      },
      a);
}

// Runs one ATen node by its CPU kernel. Mutable arguments are cloned first, so
// the node stays functional: its outputs are the clones, then the op's returns.
c10::OperatorHandle resolve(const ir::Node& n) {
  const std::string& full = std::get<std::string>(n.attrs[0].value);
  auto dot = full.find('.');
  std::string name = full.substr(0, dot), overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
}

// Operator handles of a program's ATen steps, by node index.
struct Runtime {
  std::vector<std::optional<c10::OperatorHandle>> ops;
};

const Runtime& runtime_of(const lowering::Program& p) {
  std::call_once(p.runtime_once, [&] {
    auto rt = std::make_shared<Runtime>();
    rt->ops.resize(p.graph.nodes().size());
    for (const Step& s : p.plan.steps)
      if (s.kind == Step::Kind::Aten) rt->ops[s.node] = resolve(p.graph.nodes()[s.node]);
    p.runtime = rt;
  });
  return *static_cast<const Runtime*>(p.runtime.get());
}

void run_aten(const c10::OperatorHandle& op, const ir::Graph& g, const ir::Node& n,
              std::vector<at::Tensor>& env, const std::vector<int64_t>& scalars) {
  const auto& schema = op.schema();
  torch::jit::Stack stack;
  std::vector<size_t> mutated;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    c10::IValue iv = attr_to_ivalue(n.attrs.at(i + 1).value, arg, env, g, n, scalars);
    if (arg.alias_info() && arg.alias_info()->isWrite() && iv.isTensor()) {
      iv = iv.toTensor().clone(at::MemoryFormat::Preserve);
      mutated.push_back(stack.size());
    }
    stack.push_back(std::move(iv));
  }
  std::vector<at::Tensor> mutated_tensors;
  for (size_t i : mutated) mutated_tensors.push_back(stack[i].toTensor());
  op.callBoxed(&stack);
  size_t out = 0;
  auto bind = [&](const at::Tensor& t) {
    if (!t.defined()) return;  // the tracer saw it undefined too: not a value
    ir::ValueId v = n.outputs.at(out++);
    env[v] = with_layout(t, g.value(v).type);
  };
  for (const at::Tensor& t : mutated_tensors) bind(t);
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    if (schema.returns()[r].alias_info()) continue;  // returns a mutated argument: bound above
    const c10::IValue& iv = stack.at(r);
    if (iv.isTensor()) bind(iv.toTensor());
    else if (iv.isTensorList())
      for (const at::Tensor& t : iv.toTensorVector()) bind(t);
  }
}

void run_kernel(const lowering::FusedKernel& k, lowering::KernelFn fn, const ir::Graph& g,
                std::vector<at::Tensor>& env, const std::vector<int64_t>& scalars) {
  std::vector<void*> bufs;
  bufs.reserve(k.loads.size() + k.stores.size());
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index >= 0) continue;
    const at::Tensor& t = env[a.value] = with_layout(env[a.value], g.value(a.value).type);
    bufs.push_back(t.data_ptr());
  }
  int64_t numel = 1;
  for (int64_t s : k.sizes) numel *= s;
  for (ir::ValueId v : k.stores) {
    const ir::TensorType& t = g.value(v).type;
    env[v] = at::detail::empty_generic(t.sizes, buffer_pool(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                       to_aten(t.dtype), std::nullopt);
    bufs.push_back(env[v].data_ptr());
  }
  // A row kernel over empty rows still writes its row results (sum 0, max -inf).
  if (k.sizes[0] == 0 || (numel == 0 && !k.row)) return;
  int64_t outer = k.sizes[0];
  int64_t inner = std::max<int64_t>(numel / outer, 1);
  constexpr int64_t kMinElemsPerTask = 1 << 15;
  int threads = num_threads();
  if (threads <= 1 || numel < 2 * kMinElemsPerTask || outer < 2) {
    fn(bufs.data(), scalars.data(), 0, outer);
    return;
  }
  int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(inner, 1));
  static std::mutex arena_mu;
  static std::unordered_map<int, std::unique_ptr<tbb::task_arena>> arenas;
  tbb::task_arena* arena;
  {
    std::lock_guard<std::mutex> lock(arena_mu);
    auto& a = arenas[threads];
    if (!a) a = std::make_unique<tbb::task_arena>(threads);
    arena = a.get();
  }
  arena->execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, outer, grain),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        fn(bufs.data(), scalars.data(), r.begin(), r.end());
                      });
  });
}

void run_view(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env) {
  const auto& sizes = std::get<std::vector<int64_t>>(n.attrs[0].value);
  const auto& strides = std::get<std::vector<int64_t>>(n.attrs[1].value);
  int64_t offset = std::get<int64_t>(n.attrs[2].value);
  // Flat slots of the dense operand, in memory order.
  at::Tensor base = with_layout(env[n.operands[0]], g.value(n.operands[0]).type);
  at::Tensor flat = base.as_strided({base.numel()}, {1}, base.storage_offset());
  if (n.kind == OpKind::AsStrided) {
    env[n.outputs[0]] = flat.as_strided(sizes, strides, base.storage_offset() + offset);
    return;
  }
  at::Tensor out = base.clone(at::MemoryFormat::Preserve);
  at::Tensor out_flat = out.as_strided({out.numel()}, {1}, out.storage_offset());
  out_flat.as_strided(sizes, strides, out.storage_offset() + offset).copy_(env[n.operands[1]]);
  env[n.outputs[0]] = out;
}

}  // namespace

std::vector<at::Tensor> run(const lowering::Program& p, const Bindings& b) {
  auto t0 = std::chrono::steady_clock::now();
  const ir::Graph& g = p.graph;
  const Runtime& rt = runtime_of(p);
  std::vector<at::Tensor> env(g.values().size());
  for (size_t i = 0; i < g.inputs().size(); ++i) env[g.inputs()[i]] = b.inputs.at(i);
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel:
        run_kernel(p.plan.kernels[s.kernel], p.plan.kernel_fns[s.kernel], g, env, b.scalars);
        break;
      case Step::Kind::Aten:
        run_aten(*rt.ops[s.node], g, g.nodes()[s.node], env, b.scalars);
        break;
      case Step::Kind::AsStrided:
      case Step::Kind::AsStridedScatter:
        run_view(g, g.nodes()[s.node], env);
        break;
    }
    // The buffer plan: results no later step reads go back to the pool now.
    if (si < p.plan.frees.size())
      for (ir::ValueId v : p.plan.frees[si]) env[v].reset();
  }
  std::vector<at::Tensor> outs;
  outs.reserve(g.outputs().size());
  for (ir::ValueId v : g.outputs()) outs.push_back(with_layout(env[v], g.value(v).type));
  debug::Metrics::get().add(debug::Counter::GraphsExecuted);
  debug::Metrics::get().time(
      "execute", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return outs;
}

}  // namespace lazyjit::executor
