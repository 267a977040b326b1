// Which code a kernel gets (LAZYJIT_DYNAMIC). Not part of any fingerprint:
// code of either kind is valid for every kernel its key (kernel_key.h) names.
#pragma once

namespace lazyjit::lowering {

//  - Auto (the default) and All: shape-generic code, specialised only on what
//    changes the code that matters (dtype, rank after coalescing, which dims
//    broadcast, unit strides: the generic key), so a kernel compiles once
//    for every size. Measured against exact code on the bench's kernels
//    (docs/design.md, "Shapes that vary"): no difference beyond noise. The two
//    give the same kernels today; `all` names the intent (every dim dynamic)
//    for when programs, not only kernels, serve every size.
//  - Off: code for exact sizes (every new shape compiles its kernels anew; for
//    comparisons, and for a kernel whose constant sizes would pay).
enum class Shapes { Auto, Off, All };

}  // namespace lazyjit::lowering
