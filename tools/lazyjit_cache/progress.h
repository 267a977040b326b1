// Progress on stderr for long operations: a "\r"-updated line on a terminal,
// a line per 10% otherwise. Quiet for fewer than `kQuietBelow` items.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

namespace lazyjit::cache_tool {

class Progress {
 public:
  static constexpr size_t kQuietBelow = 200;
  Progress(std::string what, size_t total) : what_(std::move(what)), total_(total), tty_(::isatty(2)) {}
  void update(size_t done) {
    if (total_ < kQuietBelow) return;
    size_t tenth = done * 10 / total_;
    if (tty_ && (done % 50 == 0 || done == total_)) std::fprintf(stderr, "\r%s: %zu/%zu", what_.c_str(), done, total_);
    else if (!tty_ && tenth != last_tenth_) std::fprintf(stderr, "%s: %zu/%zu\n", what_.c_str(), done, total_);
    last_tenth_ = tenth;
  }
  void done() {
    if (total_ >= kQuietBelow && tty_) std::fprintf(stderr, "\n");
  }

 private:
  std::string what_;
  size_t total_;
  bool tty_;
  size_t last_tenth_ = 0;
};

}  // namespace lazyjit::cache_tool
