// Which code a kernel gets (LAZYJIT_DYNAMIC). Not part of any fingerprint:
// code of either kind is valid for every kernel its key (kernel_key.h) names.
#pragma once

namespace lazyjit::lowering {

//  - Auto: code for its exact sizes, until a kernel with the same generic key
//    comes with other sizes; from then on shape-generic code, which serves
//    every later size.
//  - Off: code for exact sizes only.
//  - All: shape-generic code from the first compile.
enum class Shapes { Auto, Off, All };

}  // namespace lazyjit::lowering
