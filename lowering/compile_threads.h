// Which threads a compile may use. By default the kernels a plan needs compile
// in parallel on oneTBB (targets/cpu/cpu_target.cpp). A compile in the
// background (runtime/background_compiles.h) must leave the other cores to the
// program it runs beside: on its thread, while a SerialCompileScope lives,
// kernels compile one after another on that thread only.
#pragma once

namespace lazyjit::lowering {

struct SerialCompileScope {
  SerialCompileScope();
  ~SerialCompileScope();
  SerialCompileScope(const SerialCompileScope&) = delete;
  SerialCompileScope& operator=(const SerialCompileScope&) = delete;
};

// Whether the calling thread is inside a SerialCompileScope.
bool serial_compile();

}  // namespace lazyjit::lowering
