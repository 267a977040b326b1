// The captures of one function (one graph torch.compile hands lazyjit), one per
// set of argument sizes, strides, dtypes and ints, found by a call in one hash
// lookup however many there are: a decode step's KV cache grows a token per
// call, so a 32-token generate needs 32 captures, and the next generate finds
// each of them again. Past `limit` captures the least recently used is dropped.
//
//   CaptureSet set(256);
//   auto hit = set.run(args);                   // nullopt: no capture fits them
//   if (!hit) set.add(Capture-made graph, tag); // tag: the caller's name for it
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tracer/capture.h"

namespace lazyjit {

class CaptureSet {
 public:
  explicit CaptureSet(size_t limit) : limit_(limit < 1 ? 1 : limit) {}

  struct Hit {
    int64_t tag;  // the one given to add()
    std::vector<at::Tensor> outputs;
    // A capture fits `args`, but they share memory that it writes
    // (CapturedGraph::writes_shared_argument): nothing ran, `outputs` is empty,
    // and the caller runs the function some other way.
    bool shared_writes = false;
  };
  // Runs the capture that fits `args` (CapturedGraph::run), or returns nullopt
  // when none does. An op that fails raises eager's error.
  std::optional<Hit> run(const std::vector<CaptureArg>& args);

  // Adds a capture, known as `tag`. Returns the tag of the capture dropped to
  // stay within the limit, or -1.
  int64_t add(std::shared_ptr<CapturedGraph> graph, int64_t tag);

  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<CapturedGraph> graph;
    int64_t tag;
    uint64_t last_use;
  };
  mutable std::mutex mu_;  // the map and the clock; a run itself is outside it
  std::unordered_multimap<uint64_t, Entry> by_signature_;
  uint64_t clock_ = 0;
  size_t limit_;
};

}  // namespace lazyjit
