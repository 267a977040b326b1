// A trace you can look at: Chrome trace-event JSON (LAZYJIT_TRACE=<file.json>,
// lazyjit::start_trace) that Perfetto (ui.perfetto.dev) and chrome://tracing
// open. Spans ("ph":"X") and instant events ("ph":"i") are kept in memory, per
// thread, and written as one JSON object {"traceEvents":[...]} by stop_trace,
// flush_trace, or at process exit.
//
//   if (debug::trace_enabled()) ...                  // one relaxed load
//   debug::TraceSpan span("compile", "program", {{"nodes", 12}});
//   span.arg("kernels", 3);                          // args known later
//   debug::trace_instant("cache", "cache hit", {{"key", key}});
//
// A span made while tracing is off records nothing, and costs the load and a
// branch; callers build names and args that cost more only when it is on
// (std::optional<TraceSpan> + emplace). Times come from a steady clock, in
// microseconds from the start of the trace; each thread gets a small number
// (tid) and a name ("main", "tbb worker 3", or name_trace_thread's).
#pragma once
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace lazyjit::debug {

namespace trace_detail {
extern std::atomic<bool> on;
}

// Whether a trace is being recorded.
inline bool trace_enabled() { return trace_detail::on.load(std::memory_order_relaxed); }

// One argument of an event: a key and a JSON value (a string, escaped when
// written, or a number or boolean).
struct TraceArg {
  std::string key, value;
  bool quoted = true;
  TraceArg(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  TraceArg(std::string k, const char* v) : key(std::move(k)), value(v ? v : "") {}
  TraceArg(std::string k, bool v) : key(std::move(k)), value(v ? "true" : "false"), quoted(false) {}
  template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
  TraceArg(std::string k, N v) : key(std::move(k)), value(number(v)), quoted(false) {}

 private:
  template <class N>
  static std::string number(N v) {
    if constexpr (std::is_integral_v<N>) return std::to_string(v);
    else return finite_number(static_cast<double>(v));
  }
  static std::string finite_number(double v);
};
using TraceArgs = std::vector<TraceArg>;

// Starts recording into `path` (created or truncated now, written at the end).
// A trace already running is written out first. False when the file cannot be
// written: tracing stays off, and *error says why (without `error`, one warning
// on stderr naming the path and why).
bool start_trace(const std::string& path, std::string* error = nullptr);
// Writes the trace and stops recording. Returns the number of events written,
// or -1 when no trace was running or the file could not be written (warned).
int64_t stop_trace();
// Writes everything recorded so far and goes on recording (the file is
// rewritten whole each time). Returns the number of events, -1 as stop_trace.
int64_t flush_trace();
// The file being written ("" when off).
std::string trace_path();

// A complete event ("ph":"X") from construction to destruction (or end()), on
// the calling thread. `cat` is a string literal (kept as a pointer); the name
// and args are copied.
class TraceSpan {
 public:
  TraceSpan(const char* cat, std::string name, TraceArgs args = {});
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  // Adds an argument (no-op when the span records nothing).
  template <class V>
  void arg(std::string key, V&& value) {
    if (active_) args_.emplace_back(std::move(key), std::forward<V>(value));
  }
  void end();

 private:
  bool active_ = false;
  uint64_t generation_ = 0;
  int64_t start_ns_ = 0;
  const char* cat_;
  std::string name_;
  TraceArgs args_;
};

// An instant event ("ph":"i", thread scope) now, on the calling thread.
void trace_instant(const char* cat, std::string name, TraceArgs args = {});

// Names the calling thread in the trace (its "M" thread_name event). The first
// name given wins; threads not named get "main" (the process's first thread)
// or "thread <n>".
void name_trace_thread(const std::string& name);

// JSON string escaping (quotes, backslashes, control characters; bytes that are
// not valid UTF-8 become U+FFFD), without the surrounding quotes.
std::string json_escape(const std::string& s);

}  // namespace lazyjit::debug
