// What a sync hands a program and gets back (executor/run_io.h), under the
// runtime's names: the tracer names these, never the executor's.
#pragma once
#include "executor/run_io.h"

namespace lazyjit::executor {
class Executable;
}

namespace lazyjit::runtime {

using executor::Bindings;
using executor::RunResult;
using executor::StepFailure;
// A program made ready to run many times (executor/executable.h; torch.compile
// keeps one per captured graph).
using executor::Executable;

}  // namespace lazyjit::runtime
