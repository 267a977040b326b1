// file:line of the C++ code that called into lazyjit: the first stack frame
// outside lazyjit, libtorch and the C/C++ runtimes. Resolved with addr2line
// once per distinct return address, then cached; empty when there is no debug
// information. Used for sync and fallback accounting, never on the hot path.
#pragma once
#include <string>

namespace lazyjit::tracer {
std::string cpp_call_site();
}
