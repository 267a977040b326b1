// IR, plan and LLVM dumps. With LAZYJIT_DUMP=<dir> (runtime/config.h) the
// compiler writes one set of files per compiled program, named by its cache key:
// <key>.graph.txt, <key>.pass<N>-<name>.txt, <key>.plan.txt, <key>.ll.
#pragma once
#include <string>

namespace lazyjit::debug {

// Writes <dir>/<name>, creating dir; does nothing when dir is empty. Never throws.
void write_dump(const std::string& dir, const std::string& name, const std::string& content);

}  // namespace lazyjit::debug
