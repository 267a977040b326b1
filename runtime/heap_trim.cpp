// Giving freed heap back after compiles and bindings (trim_heap, runtime/compiler.h).
#include <cstddef>  // defines __GLIBC__ on glibc
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <unistd.h>

#include "executor/buffer_pool.h"
#include "runtime/compiler.h"
#include "runtime/runtime.h"

namespace lazyjit::runtime {

// A compile leaves the heap fragmented: LLVM's short-lived objects interleave
// with long-lived program data, and freed holes between them stay mapped. With
// shapes that keep changing (every step a new, larger size) the process grew
// ~540 KB per program, against ~90 KB of actual program data. Giving the free
// pages back bounds that; doing it after every compile cost the next compile
// its page faults (a small kernel compiled in 15.8 ms on average over 89
// compiles, 13.3 ms without trimming). So the heap is trimmed only once its free
// bytes pass 32 MiB: at most that much stays mapped and unused. glibc only;
// elsewhere a no-op.
void trim_heap() {
#ifdef __GLIBC__
  constexpr size_t kLooseBytes = size_t{32} << 20;
  if (mallinfo2().fordblks > kLooseBytes) malloc_trim(0);
#endif
}

void release_cached_memory() {
  executor::trim_buffer_pool();
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

std::pair<size_t, size_t> host_memory_info() {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return {static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page, static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page};
}

}  // namespace lazyjit::runtime
