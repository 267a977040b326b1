// IR, plan and LLVM dumps. With LAZYJIT_DUMP=<dir> or LAZYJIT_DEBUG>=2
// (runtime/config.h) the compiler writes one set of files per compiled program,
// named by its cache key (lowering/lower.cpp): <key>.graph.txt, <key>.graph.dot,
// <key>.pass<N>-<name>.txt, <key>.plan.txt, <key>.plan.dot, and, unless at
// LAZYJIT_DEBUG=2, <key>.ll and <key>.s. The DOT writers are
// graph_ir/graph_dot.h and lowering/plan_dot.h (this layer sees no graph).
#pragma once
#include <cstdio>
#include <string>

namespace lazyjit::debug {

// Writes <dir>/<name>, creating dir; does nothing when dir is empty. Never
// throws; the first dump that cannot be written is said on stderr, with its path
// and the OS error (once per process).
void write_dump(const std::string& dir, const std::string& name, const std::string& content);

// Opens `path` to be written whole (created, or truncated when it is a regular
// file), never blocking: what is not a regular file once symlinks are followed
// (a FIFO, with or without a reader, a device, a socket, a directory) is
// refused before anything is written, and a FIFO planted between the check and
// the open cannot block it (O_NONBLOCK, then fstat). Returns the descriptor
// (O_CLOEXEC, blocking again), or -1 with *why saying why ("it is a FIFO, not
// a regular file", or the OS error).
int open_output_file(const std::string& path, std::string* why);
// The same as a stdio stream ("wb"); nullptr with *why.
std::FILE* fopen_output_file(const std::string& path, std::string* why);

}  // namespace lazyjit::debug
