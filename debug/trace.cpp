#include "debug/trace.h"

#include "debug/dump.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

namespace lazyjit::debug {

namespace trace_detail {
std::atomic<bool> on{false};
}

namespace {

// Past this many events a trace keeps its beginning and counts the rest
// (~130 bytes each in memory: a long loop's per-op record spans add up).
constexpr int64_t kMaxEvents = 2'000'000;

struct Event {
  char ph;  // 'X' or 'i'
  const char* cat;
  std::string name;
  int64_t ts_ns, dur_ns;
  TraceArgs args;
};

struct ThreadBuffer {
  std::mutex mu;
  uint32_t tid = 0;
  std::string name;
  bool named = false;  // by name_trace_thread
  std::vector<Event> events;
};

struct State {
  std::mutex mu;  // path, buffers, writing
  std::string path;
  pid_t pid = 0;  // of the process that started the trace (a forked child does not write it)
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::atomic<uint64_t> generation{0};  // a span begun under another trace is dropped
  std::atomic<int64_t> t0_ns{0};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> dropped{0};
  bool atexit_registered = false;
};

// Never destroyed: threads (TBB workers, daemon threads) may outlive static
// destructors, and the exit handler runs among them.
State& state() {
  static State* s = new State;
  return *s;
}

thread_local ThreadBuffer* t_buffer = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ThreadBuffer& this_thread_buffer() {
  if (t_buffer) return *t_buffer;
  auto b = std::make_shared<ThreadBuffer>();
  pid_t os_tid = static_cast<pid_t>(::syscall(SYS_gettid));
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  b->tid = static_cast<uint32_t>(st.buffers.size() + 1);
  b->name = os_tid == ::getpid() ? std::string("main") : "thread " + std::to_string(b->tid);
  st.buffers.push_back(b);
  t_buffer = b.get();
  return *b;
}

void push(Event e) {
  State& st = state();
  if (st.count.fetch_add(1, std::memory_order_relaxed) >= kMaxEvents) {
    st.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  b.events.push_back(std::move(e));
}

void append_ts(std::string& out, int64_t ns) {
  if (ns < 0) ns = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  out += buf;
}

void append_str(std::string& out, const std::string& s) {
  out += '"';
  out += json_escape(s);
  out += '"';
}

void append_event(std::string& out, const Event& e, pid_t pid, uint32_t tid) {
  out += "{\"ph\":\"";
  out += e.ph;
  out += "\",\"cat\":";
  append_str(out, e.cat ? e.cat : "");
  out += ",\"name\":";
  append_str(out, e.name);
  out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"ts\":";
  append_ts(out, e.ts_ns);
  if (e.ph == 'X') {
    out += ",\"dur\":";
    append_ts(out, e.dur_ns);
  } else {
    out += ",\"s\":\"t\"";
  }
  if (!e.args.empty()) {
    out += ",\"args\":{";
    for (size_t i = 0; i < e.args.size(); ++i) {
      if (i) out += ',';
      append_str(out, e.args[i].key);
      out += ':';
      if (e.args[i].quoted) append_str(out, e.args[i].value);
      else out += e.args[i].value;
    }
    out += '}';
  }
  out += '}';
}

void append_meta(std::string& out, const char* what, pid_t pid, uint32_t tid, const std::string& key,
                 const std::string& json_value) {
  out += "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"" + key +
         "\":" + json_value + "}}";
}

bool write_all(FILE* f, std::string& chunk) {
  bool ok = std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size();
  chunk.clear();
  return ok;
}

// Writes the trace file; the caller holds st.mu. Returns the events written, -1
// (after a warning) when the file cannot be written.
int64_t write_locked(State& st) {
  // As at the start: a FIFO or device put at the path since is refused, never waited on.
  std::string why;
  FILE* f = fopen_output_file(st.path, &why);
  if (!f) {
    std::fprintf(stderr, "lazyjit: cannot write the trace to %s: %s\n", st.path.c_str(), why.c_str());
    return -1;
  }
  const pid_t pid = st.pid;
  std::string chunk = "{\"traceEvents\":[\n";
  append_meta(chunk, "process_name", pid, 0, "name", "\"lazyjit\"");
  bool ok = true;
  int64_t n = 0;
  for (const auto& b : st.buffers) {
    std::lock_guard<std::mutex> lock(b->mu);
    if (b->events.empty()) continue;
    chunk += ",\n";
    append_meta(chunk, "thread_name", pid, b->tid, "name", "\"" + json_escape(b->name) + "\"");
    chunk += ",\n";
    append_meta(chunk, "thread_sort_index", pid, b->tid, "sort_index", std::to_string(b->tid));
    for (const Event& e : b->events) {
      chunk += ",\n";
      append_event(chunk, e, pid, b->tid);
      ++n;
      if (chunk.size() > (1 << 20)) ok = ok && write_all(f, chunk);
    }
  }
  int64_t dropped = st.dropped.load();
  chunk += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"lazyjit\",\"dropped_events\":" +
           std::to_string(dropped) + "}}\n";
  ok = ok && write_all(f, chunk);
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "lazyjit: cannot write the trace to %s: %s\n", st.path.c_str(), std::strerror(errno));
    return -1;
  }
  if (dropped)
    std::fprintf(stderr, "lazyjit: the trace %s holds its first %lld events; %lld more were not kept\n",
                 st.path.c_str(), static_cast<long long>(kMaxEvents), static_cast<long long>(dropped));
  return n;
}

int64_t stop_locked(State& st) {
  if (st.path.empty()) return -1;
  trace_detail::on.store(false, std::memory_order_relaxed);
  st.generation.fetch_add(1);
  int64_t n = write_locked(st);
  for (const auto& b : st.buffers) {  // what could not be written is dropped too
    std::lock_guard<std::mutex> lock(b->mu);
    std::vector<Event>().swap(b->events);
  }
  st.path.clear();
  st.count = 0;
  st.dropped = 0;
  return n;
}

void stop_at_exit() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.path.empty() || st.pid != ::getpid()) return;
  stop_locked(st);
}

}  // namespace

std::string TraceArg::finite_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool start_trace(const std::string& path, std::string* error) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  stop_locked(st);
  // Created now, so a path that cannot be written is said at the start, not at
  // exit; what is not a regular file (a FIFO, which would block the open until
  // a reader comes, a device, a directory) is refused (debug/dump.h).
  std::string why = "an empty path";
  FILE* f = path.empty() ? nullptr : fopen_output_file(path, &why);
  if (!f) {
    std::string msg = "cannot write the trace to " + (path.empty() ? std::string("\"\"") : path) + ": " + why;
    if (error) *error = msg;
    else std::fprintf(stderr, "lazyjit: warning: %s; tracing is off\n", msg.c_str());
    return false;
  }
  std::fclose(f);
  st.path = path;
  st.pid = ::getpid();
  st.count = 0;
  st.dropped = 0;
  st.t0_ns.store(now_ns());
  st.generation.fetch_add(1);
  if (!st.atexit_registered) st.atexit_registered = std::atexit(stop_at_exit) == 0;
  trace_detail::on.store(true, std::memory_order_release);
  return true;
}

int64_t stop_trace() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return stop_locked(st);
}

int64_t flush_trace() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.path.empty()) return -1;
  return write_locked(st);
}

std::string trace_path() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.path;
}

TraceSpan::TraceSpan(const char* cat, std::string name, TraceArgs args) : cat_(cat) {
  if (!trace_enabled()) return;
  active_ = true;
  generation_ = state().generation.load(std::memory_order_acquire);
  name_ = std::move(name);
  args_ = std::move(args);
  start_ns_ = now_ns();
}

void TraceSpan::end() {
  if (!active_) return;
  active_ = false;
  int64_t end_ns = now_ns();
  State& st = state();
  if (!trace_enabled() || st.generation.load(std::memory_order_acquire) != generation_) return;
  push(Event{'X', cat_, std::move(name_), start_ns_ - st.t0_ns.load(), end_ns - start_ns_, std::move(args_)});
}

void trace_instant(const char* cat, std::string name, TraceArgs args) {
  if (!trace_enabled()) return;
  State& st = state();
  push(Event{'i', cat, std::move(name), now_ns() - st.t0_ns.load(), 0, std::move(args)});
}

void name_trace_thread(const std::string& name) {
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.named) return;
  b.name = name;
  b.named = true;
}

namespace {
// The length of the valid UTF-8 sequence at s[i] (a byte >= 0x80), 0 if invalid.
size_t utf8_length(const std::string& s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return len;
}
}  // namespace

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t len = utf8_length(s, i);
      if (len) {
        out.append(s, i, len);
        i += len;
      } else {
        out += "\xEF\xBF\xBD";  // U+FFFD
        ++i;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

}  // namespace lazyjit::debug
