// An int[] argument of a boxed call, as int64s: a plain int list, or a list of
// ints and concrete SymInts. False for anything else (a symbolic size).
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

}  // namespace lazyjit::tracer
