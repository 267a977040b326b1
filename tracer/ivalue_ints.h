// An int[] argument of a boxed call, as int64s: a plain int list, or a list of
// ints and concrete SymInts. False for anything else (a symbolic size). And the
// dims such a list names.
#pragma once
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <vector>

namespace lazyjit::tracer {

inline bool int_list(const c10::IValue& v, std::vector<int64_t>* out) {
  if (v.isIntList()) { *out = v.toIntVector(); return true; }
  if (!v.isList()) return false;
  for (const c10::IValue& e : v.toListRef()) {
    if (e.isInt()) out->push_back(e.toInt());
    else if (e.isSymInt() && e.toSymInt().maybe_as_int()) out->push_back(*e.toSymInt().maybe_as_int());
    else return false;
  }
  return true;
}

// Marks each of `dims` (dims of a rank-`ndim` tensor, negative ones counted from
// the end) in `*marked`, which holds ndim entries. False for a dim out of range
// or given twice: eager's errors, which the meta kernel then raises.
inline bool mark_dims(const std::vector<int64_t>& dims, int64_t ndim, std::vector<bool>* marked) {
  for (int64_t d : dims) {
    if (d < -ndim || d >= ndim) return false;
    if (d < 0) d += ndim;
    if ((*marked)[d]) return false;
    (*marked)[d] = true;
  }
  return true;
}

}  // namespace lazyjit::tracer
