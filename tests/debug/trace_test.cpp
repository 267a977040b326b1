// debug/trace.h: the Chrome trace-event JSON it writes parses, holds what was
// recorded (spans nested, instants, thread names), escapes any string, and a
// path that cannot be written is refused with a warning.
#include "debug/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using lazyjit::debug::TraceSpan;
using nlohmann::json;

namespace {

fs::path temp_file(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("lazyjit_trace_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());  // throws on invalid JSON (or invalid UTF-8)
}

std::vector<json> events(const json& j, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : j.at("traceEvents"))
    if (e.at("ph") == ph) out.push_back(e);
  return out;
}

}  // namespace

TEST(Trace, OffRecordsNothing) {
  ASSERT_FALSE(lazyjit::debug::trace_enabled());
  { TraceSpan s("test", "ignored", {{"k", 1}}); }
  lazyjit::debug::trace_instant("test", "ignored");
  EXPECT_EQ(lazyjit::debug::stop_trace(), -1);
}

TEST(Trace, SpansInstantsAndThreads) {
  fs::path p = temp_file("spans.json");
  ASSERT_TRUE(lazyjit::debug::start_trace(p.string()));
  EXPECT_TRUE(lazyjit::debug::trace_enabled());
  {
    TraceSpan outer("sync", "sync item()", {{"reason", "item()"}, {"nodes", 12}});
    {
      TraceSpan inner("compile", "program");
      inner.arg("kernels", 3);
      inner.arg("generic", true);
      inner.arg("ms", 1.5);
      lazyjit::debug::trace_instant("cache", "cache miss", {{"kind", "new shapes"}});
    }
    std::thread worker([] {
      lazyjit::debug::name_trace_thread("tbb worker 1");
      lazyjit::debug::name_trace_thread("ignored: the first name wins");
      TraceSpan k("compile", "kernel fused_0", {{"hit", false}});
    });
    worker.join();
  }
  EXPECT_EQ(lazyjit::debug::stop_trace(), 4);
  EXPECT_FALSE(lazyjit::debug::trace_enabled());

  json j = read_json(p);
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  auto spans = events(j, "X");
  ASSERT_EQ(spans.size(), 3u);
  std::map<std::string, json> by_name;
  for (const json& e : spans) by_name[e.at("name")] = e;
  const json& outer = by_name.at("sync item()");
  const json& inner = by_name.at("program");
  const json& kernel = by_name.at("kernel fused_0");
  EXPECT_EQ(outer.at("cat"), "sync");
  EXPECT_EQ(outer.at("args").at("reason"), "item()");
  EXPECT_EQ(outer.at("args").at("nodes"), 12);
  EXPECT_EQ(inner.at("args").at("kernels"), 3);
  EXPECT_EQ(inner.at("args").at("generic"), true);
  EXPECT_DOUBLE_EQ(inner.at("args").at("ms").get<double>(), 1.5);
  EXPECT_EQ(kernel.at("args").at("hit"), false);
  // Nested on one thread: the inner span lies within the outer one.
  EXPECT_EQ(outer.at("tid"), inner.at("tid"));
  EXPECT_NE(outer.at("tid"), kernel.at("tid"));
  double ots = outer.at("ts"), odur = outer.at("dur"), its = inner.at("ts"), idur = inner.at("dur");
  EXPECT_GE(odur, 0);
  EXPECT_GE(idur, 0);
  EXPECT_LE(ots, its);
  EXPECT_LE(its + idur, ots + odur);
  auto instants = events(j, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0].at("args").at("kind"), "new shapes");
  EXPECT_EQ(instants[0].at("s"), "t");
  // Thread names, one per thread that recorded.
  std::map<int, std::string> names;
  for (const json& e : events(j, "M"))
    if (e.at("name") == "thread_name") names[e.at("tid")] = e.at("args").at("name");
  EXPECT_EQ(names.at(outer.at("tid")), "main");
  EXPECT_EQ(names.at(kernel.at("tid")), "tbb worker 1");
}

TEST(Trace, EscapesEveryString) {
  using lazyjit::debug::json_escape;
  EXPECT_EQ(json_escape("a\"b\\c\n\t\r\b\f"), "a\\\"b\\\\c\\n\\t\\r\\b\\f");
  EXPECT_EQ(json_escape(std::string("\x01\x1f\x7f", 3)), "\\u0001\\u001f\\u007f");
  EXPECT_EQ(json_escape("caf\xC3\xA9 \xE2\x86\x92"), "caf\xC3\xA9 \xE2\x86\x92");  // valid UTF-8 kept
  EXPECT_EQ(json_escape("\xFF" "x\xC3"), "\xEF\xBF\xBDx\xEF\xBF\xBD");          // invalid bytes: U+FFFD
  EXPECT_EQ(json_escape("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is not UTF-8

  fs::path p = temp_file("escape.json");
  ASSERT_TRUE(lazyjit::debug::start_trace(p.string()));
  std::string nasty = "C:\\dir\\\"quoted\" file\nline\x01\x80\xFF.py:3";
  { TraceSpan s("sync", nasty, {{nasty, nasty}, {"nan", std::nan("")}}); }
  EXPECT_EQ(lazyjit::debug::stop_trace(), 1);
  json j = read_json(p);
  auto spans = events(j, "X");
  ASSERT_EQ(spans.size(), 1u);
  std::string name = spans[0].at("name");
  EXPECT_EQ(name.substr(0, 26), "C:\\dir\\\"quoted\" file\nline\x01");
  EXPECT_TRUE(spans[0].at("args").at("nan").is_null());
}

TEST(Trace, FlushKeepsRecordingAndRestartWritesTheFirst) {
  fs::path a = temp_file("a.json"), b = temp_file("b.json");
  ASSERT_TRUE(lazyjit::debug::start_trace(a.string()));
  lazyjit::debug::trace_instant("t", "one");
  EXPECT_EQ(lazyjit::debug::flush_trace(), 1);
  EXPECT_EQ(events(read_json(a), "i").size(), 1u);
  lazyjit::debug::trace_instant("t", "two");
  // A span begun under one trace is not written into the next.
  auto open_span = std::make_unique<TraceSpan>("t", "crosses traces");
  ASSERT_TRUE(lazyjit::debug::start_trace(b.string()));  // writes a.json first
  EXPECT_EQ(events(read_json(a), "i").size(), 2u);
  open_span.reset();
  lazyjit::debug::trace_instant("t", "three");
  EXPECT_EQ(lazyjit::debug::stop_trace(), 1);
  json j = read_json(b);
  EXPECT_EQ(events(j, "i").size(), 1u);
  EXPECT_TRUE(events(j, "X").empty());
}

TEST(Trace, UnwritablePathWarnsAndStaysOff) {
  testing::internal::CaptureStderr();
  EXPECT_FALSE(lazyjit::debug::start_trace("/nonexistent-dir/sub/t.json"));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(lazyjit::debug::trace_enabled());
  EXPECT_EQ(err, "lazyjit: warning: cannot write the trace to /nonexistent-dir/sub/t.json: No such file or "
                 "directory; tracing is off\n");
  std::string error;  // the caller reports it
  testing::internal::CaptureStderr();
  EXPECT_FALSE(lazyjit::debug::start_trace("/nonexistent-dir/sub/t.json", &error));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
  { TraceSpan s("t", "nothing"); }
  EXPECT_EQ(lazyjit::debug::stop_trace(), -1);
}
