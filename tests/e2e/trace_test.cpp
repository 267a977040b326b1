// lazyjit::start_trace / stop_trace from C++: the file holds the sync (with the
// caller's line), the cache lookup, the compile per kernel and the execution
// per step, as the Python test checks for LAZYJIT_TRACE.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tracer/lazyjit.h"

using nlohmann::json;

TEST(Trace, StartStopFromCpp) {
  auto path = std::filesystem::temp_directory_path() / ("lazyjit_e2e_trace_" + std::to_string(::getpid()) + ".json");
  EXPECT_THROW(lazyjit::start_trace("/nonexistent-dir/t.json"), std::runtime_error);
  lazyjit::clear_cache();
  torch::manual_seed(0);
  auto a = torch::randn({8, 8}), b = torch::randn({8, 8});
  lazyjit::start_trace(path.string());
  auto x = a.to(lazyjit::device()), y = b.to(lazyjit::device());
  auto z = torch::matmul((x * 2 + 1).relu(), y).tanh();
  auto got = z.cpu();
  lazyjit::stop_trace();
  EXPECT_TRUE(torch::allclose(got, torch::matmul((a * 2 + 1).relu(), b).tanh(), 1e-5, 1e-5));

  std::ifstream in(path);
  json trace = json::parse(in);
  std::filesystem::remove(path);
  std::map<std::string, std::vector<json>> by_cat;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") != "M") by_cat[e.at("cat")].push_back(e);
  ASSERT_EQ(by_cat["sync"].size(), 1u);
  std::string site = by_cat["sync"][0].at("args").at("site");
  EXPECT_NE(site.find("trace_test.cpp:"), std::string::npos) << site;
  bool mm = false, kernel = false, compiled = false, miss = false;
  for (const json& e : by_cat["execute"]) {
    mm = mm || e.at("name") == "aten::mm";
    kernel = kernel || (e.contains("args") && e.at("args").value("kind", "") == "kernel");
  }
  for (const json& e : by_cat["compile"]) compiled = compiled || e.at("name").get<std::string>().rfind("kernel ", 0) == 0;
  for (const json& e : by_cat["cache"]) miss = miss || e.at("name") == "cache miss";
  EXPECT_TRUE(mm && kernel && compiled && miss) << trace.dump(1);
  EXPECT_FALSE(by_cat["record"].empty());
}
