#include "graph_ir/dtype.h"

namespace lazyjit::ir {

bool widens_exactly(DType from, DType to) {
  if (from == to || from == DType::Bool) return true;
  using Kind = DTypeInfo::Kind;
  const DTypeInfo &f = dtype_info(from), &t = dtype_info(to);
  switch (f.kind) {
    case Kind::Unsigned:  // fits any integer of as many value bits
    case Kind::Signed:    // and never an unsigned one (negatives)
      if (t.kind == Kind::Unsigned || t.kind == Kind::Signed)
        return (f.kind == Kind::Unsigned || t.kind == Kind::Signed) && t.bits >= f.bits;
      return t.kind == Kind::Float && t.bits >= f.bits + 1;  // 2^bits held exactly, the sign apart
    case Kind::Float: return t.kind == Kind::Float && t.bits >= f.bits && t.exponent_bits >= f.exponent_bits;
    default: return false;
  }
}

}  // namespace lazyjit::ir
