// IR, plan and LLVM dumps. LAZYJIT_DUMP=<dir> writes one set of files per compiled
// program, named by its cache key: <key>.graph.txt, <key>.plan.txt, <key>.ll.
#pragma once
#include <string>

namespace lazyjit::debug {

// The dump directory, or empty when dumps are off. Read once from the environment.
const std::string& dump_dir();
void set_dump_dir(const std::string& dir);
// Writes <dump_dir>/<name>; does nothing when dumps are off. Never throws.
void write_dump(const std::string& name, const std::string& content);

}  // namespace lazyjit::debug
