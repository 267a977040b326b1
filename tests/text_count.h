// How many times `what` occurs in `text` (overlapping): for tests of dumps.
#pragma once
#include <cstddef>
#include <string>

namespace lazyjit::test_text {

inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace lazyjit::test_text
