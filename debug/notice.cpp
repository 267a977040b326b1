#include "debug/notice.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <unordered_set>

namespace lazyjit::debug {

namespace {
std::atomic<NoticeLevel> g_level{NoticeLevel::Once};
std::atomic<NoticeSink> g_sink{nullptr};
std::atomic<long> g_said{0};
std::mutex& seen_mu() {
  static auto* mu = new std::mutex;  // never destroyed: notices may come from static destructors
  return *mu;
}
std::unordered_set<std::string>& seen() {
  static auto* s = new std::unordered_set<std::string>;
  return *s;
}
}  // namespace

void set_notice_level(NoticeLevel level) { g_level.store(level, std::memory_order_relaxed); }
NoticeLevel notice_level() { return g_level.load(std::memory_order_relaxed); }
void set_notice_sink(NoticeSink sink) { g_sink.store(sink); }
long notices_said() { return g_said.load(); }

bool notice(const std::string& key, const std::string& text, bool every) {
  NoticeLevel level = notice_level();
  if (level == NoticeLevel::Off) return false;
  bool first;
  {
    std::lock_guard<std::mutex> lock(seen_mu());
    first = seen().insert(key).second;
  }
  const bool log = every && level == NoticeLevel::Every;  // a log line each time (LAZYJIT_LOG=fallbacks)
  if (!first && !log) return false;
  ++g_said;
  std::string line = "lazyjit: " + text;
  NoticeSink sink = g_sink.load();
  if (sink && !log) sink(line);
  else std::fprintf(stderr, "%s\n", line.c_str());
  return true;
}

}  // namespace lazyjit::debug
