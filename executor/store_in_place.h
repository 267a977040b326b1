// Outputs a program may compute straight into one of its inputs' memory: the
// in-place updates a captured function makes to its arguments (an optimizer
// step's parameters and state, under torch.compile). Otherwise the program
// computes the new values into fresh buffers and the caller copies them into
// the arguments: AdamW over 8M parameters copied 100 MB a step, as long as the
// update itself.
#pragma once
#include <cstddef>

#include "lowering/program.h"

namespace lazyjit::executor {

// Whether graph output `out` of `p` may be stored into the buffer of graph
// input `in` by the kernel that computes it (Bindings::into), which holds when:
//  - a plain kernel (no row reductions, no Cat) stores the output itself, and
//    no other output is that value;
//  - the input has the output's type (dtype, sizes, contiguous strides);
//  - that kernel reads the input only element for element where it stores,
//    and each of its loads of the input feeds the output's value (so each
//    element is read before it is written there, however the code is
//    scheduled; other values may use what such a load read);
//  - no later step reads the input or a view of it, and no output is a view of it.
// The caller still checks at run time that no other input shares its memory.
bool can_store_into_input(const lowering::Program& p, size_t out, size_t in);

// Whether a result of node `n` may share memory with an operand: a view, or a
// library step whose ATen schema says a return may alias an argument (an
// operator it cannot find: yes). Library steps that make new tensors (addmm,
// cat, ...) do not make their results aliases of a weight they read.
bool may_alias_operand(const ir::Node& n);

}  // namespace lazyjit::executor
