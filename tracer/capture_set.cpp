#include "tracer/capture_set.h"

namespace lazyjit {

std::optional<CaptureSet::Hit> CaptureSet::run(const std::vector<CaptureArg>& args) {
  const uint64_t sig = capture_signature(args);
  std::vector<std::pair<std::shared_ptr<CapturedGraph>, int64_t>> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [first, last] = by_signature_.equal_range(sig);
    for (auto it = first; it != last; ++it) {
      it->second.last_use = ++clock_;
      candidates.emplace_back(it->second.graph, it->second.tag);
    }
  }
  // A signature is a hash: the capture's own check (sizes, strides, dtypes,
  // ints) decides, and a collision only costs a capture.
  bool shared = false;
  for (auto& [graph, tag] : candidates) {
    if (graph->writes_shared_argument(args)) {
      shared = true;
      continue;
    }
    if (auto out = graph->run(args)) return Hit{tag, std::move(*out)};
  }
  if (shared) return Hit{-1, {}, true};
  return std::nullopt;
}

int64_t CaptureSet::add(std::shared_ptr<CapturedGraph> graph, int64_t tag) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t sig = graph->signature();
  by_signature_.emplace(sig, Entry{std::move(graph), tag, ++clock_});
  if (by_signature_.size() <= limit_) return -1;
  auto oldest = by_signature_.begin();
  for (auto it = by_signature_.begin(); it != by_signature_.end(); ++it)
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  const int64_t dropped = oldest->second.tag;
  by_signature_.erase(oldest);
  return dropped;
}

size_t CaptureSet::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_signature_.size();
}

}  // namespace lazyjit
