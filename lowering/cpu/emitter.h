// The LLVM IR emitter of one fused kernel (internal to the CPU target): loop
// nests for elementwise kernels and their ops (codegen.cpp), and the loops of
// row kernels with their reductions (row_kernel.cpp).
#pragma once
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include "lowering/cpu/codegen.h"

namespace lazyjit::lowering::cpu::emit {

using ir::OpKind;
using llvm::Value;

[[noreturn]] inline void unsupported(const std::string& what) { throw std::runtime_error(what); }

inline bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

inline int64_t attr_i64(const ir::Node& n, size_t i) {
  if (i < n.attrs.size())
    if (auto* v = std::get_if<int64_t>(&n.attrs[i].value)) return *v;
  unsupported(std::string(ir::op_name(n.kind)) + ": attr " + std::to_string(i) + " is not an int64");
}

// A value in registers: the LLVM value and the dtype it represents. Registers
// hold i1 for bool, `half` for float16 and a float holding an exact bf16 for
// bfloat16; memory holds one byte per bool and i16 per bf16.
struct TV {
  Value* v;
  DType t;
};

class KernelEmitter {
 public:
  KernelEmitter(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, const CodegenConfig& cfg,
                const llvm::TargetMachine& tm)
      : m_(m), ctx_(m.getContext()), b_(ctx_), g_(g), k_(k), cfg_(cfg), tm_(tm),
        name_(k.name + cfg.symbol_suffix) {
    std::string f = tm.getTargetFeatureString().str();
    avx2_ = f.find("+avx2") != std::string::npos;
    avx512_ = f.find("+avx512f") != std::string::npos;
  }

  void emit();

 private:
  void set_target_attrs(llvm::Function* f);

  void emit_impl();

  // Guards begin < end and the emptiness of dims [1, last), then rotated loops
  // over dims [0, last) around `body`, then returns.
  void emit_outer_loops(llvm::BasicBlock* exit, size_t last, const std::function<void()>& body);
  // Rotated (do-while) loops over dims [d, last), the first from start to stop
  // (start < stop known), the others over their constant nonzero sizes. Row
  // dims (d < nrow_) get row_loop_md().
  void emit_loops(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body);

  void emit_body();

  // --- row kernels (row_kernel.cpp) ----------------------------------------
  // Follows k_.schedule (lowering/row_schedule.h) per row; decides nothing.
  void emit_row_impl(llvm::BasicBlock* exit);
  // Row loops are neither vectorized nor unrolled: with short rows LLVM would
  // otherwise vectorize across rows once the col loops are fully unrolled, and
  // a row's (reassociated) sum would then depend on whether it fell in the
  // vector body or the remainder, i.e. on how [begin, end) was split.
  llvm::MDNode* row_loop_md();
  // One entry-block array of one element per col for each scheduled scratch node.
  void alloc_scratch();
  llvm::Type* scratch_type(DType t) { return t == DType::Bool ? b_.getInt8Ty() : reg_type(t); }
  // One loop over the cols: reads back `w.reload`, computes `w.compute` (keeping
  // `w.keep` in scratch), then `body`. Values made inside it are forgotten after it.
  void emit_col_loop(const ColLoop& w, const std::function<void()>& body);
  void emit_kernel_node(const ir::Node& n);
  // Contiguous offset over dims [first, last) of the iteration space.
  Value* contiguous_index(size_t first, size_t last);
  void store(size_t s, Value* offset);
  void emit_row_body();
  // The accumulator lives in an entry-block alloca that SROA turns into the
  // loop's reduction phi. Only the float sum is reassociable (so that it
  // vectorizes); max/min use llvm.maximum/minimum, which propagate NaN. No
  // `cols` (empty rows): the reduction is its identity.
  void emit_reduction(const ir::Node& n, const std::optional<ColLoop>& cols);

  Value* index(const std::vector<int64_t>& strides, int64_t offset);

  // --- types and conversions ------------------------------------------------
  llvm::Type* reg_type(DType t);
  llvm::Type* mem_type(DType t);

  // Round a float to the nearest-even bf16, kept as a float (ATen's round_to_nearest_even).
  Value* round_bf16(Value* f);

  Value* convert(TV x, DType to);

  Value* to_memory(Value* v, DType t);
  Value* from_memory(Value* v, DType t);

  // --- operands -------------------------------------------------------------
  TV load_scalar(const Access& a);

  TV operand(ValueId v);

  // --- ops ------------------------------------------------------------------
  TV emit_node(const ir::Node& n);

  bool is_scalar_argument(ValueId v) const;

  // x ** y for a scalar argument y, with ATen's CPU special cases: 2 -> x*x,
  // 3 -> x*x*x, -2 -> 1/(x*x), -1 -> 1/x, 0.5 -> sqrt (so pow(-inf, 0.5) is
  // nan, as in eager), -0.5 -> rsqrt; else pow. y is loop-invariant, so LLVM
  // unswitches the branches out of the loop and each version vectorizes (powf
  // costs ~20x a multiply).
  Value* pow_by_scalar(Value* x, Value* y);

  Value* clamp(const ir::Node& n, Value* x, DType ct);

  Value* fconst(Value* like, double c) { return llvm::ConstantFP::get(like->getType(), c); }
  Value* intrinsic(llvm::Intrinsic::ID id, Value* x) { return b_.CreateUnaryIntrinsic(id, x); }

  // libm functions without an LLVM intrinsic. Declared as pure so that the loop
  // vectorizer may widen them, onto libmvec's variants when it is available.
  Value* libm(const char* name, Value* x);

  // exp/log/sin/cos: LLVM's own libmvec table maps the intrinsic onto 128- and
  // 256-bit variants only; with 512-bit vectors the call names all three.
  Value* math(const char* name, llvm::Intrinsic::ID id, Value* x);

  // LLVM 19's libmvec table covers exp/log/sin/cos/pow only; glibc >= 2.35 also
  // has tanh, erf, log1p and expm1, which we name per call site in the vector
  // function ABI ("_ZGV<isa>N<lanes>v_<name>"). Only ISAs the host runs are listed.
  void add_vector_variants(llvm::CallInst* call, const std::string& fname, bool f32);

  // float32 tanh as the rational approximation Eigen and XLA use (13/6 odd/even
  // polynomials on [-7.9, 7.9], x itself below 4e-4): a few ulp, branch-free and
  // vectorized inline; glibc's vector tanhf costs ~15 cycles an element.
  // float64 keeps libm.
  Value* tanh(Value* x);

  Value* unary_float(OpKind k, Value* x);

  Value* unary_int(OpKind k, Value* x, DType ct);

  Value* binary_float(OpKind k, Value* a, Value* b);

  // fmod's result has a's sign; Python's modulo wants b's.
  Value* sign_fix(Value* mod, Value* b);

  // ATen's div_floor_floating, branch-free.
  Value* div_floor(Value* a, Value* b);

  Value* binary_int(OpKind k, Value* a, Value* b, DType ct);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const ir::Graph& g_;
  const FusedKernel& k_;
  const CodegenConfig& cfg_;
  const llvm::TargetMachine& tm_;
  std::string name_;
  bool avx2_ = false, avx512_ = false;
  std::vector<int64_t> sizes_;
  llvm::Function* fn_ = nullptr;
  size_t nbuf_ = 0;                  // buffer parameters: loads, then stores
  std::vector<int> buffer_of_;       // per load: its buffer parameter, -1 for scalars
  std::vector<Value*> idx_;          // per dim: the induction variable
  size_t nrow_ = 0, ncol_ = 0;       // row kernels: leading row dims, trailing col dims
  std::unordered_map<int32_t, llvm::AllocaInst*> scratch_;  // row kernels: by node position
  std::unordered_map<ValueId, TV> values_;  // computed in the kernel
  std::unordered_map<int32_t, TV> loaded_;  // per load index
  std::unordered_set<std::string> used_;  // vector variants declared
};

}  // namespace lazyjit::lowering::cpu::emit
