// The map of a sync in runtime/pipeline.cpp is the code: the tiers it numbers,
// in order, are the tier list Runtime::resolve walks.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace {

// The numbered tiers of the map (the comment that opens pipeline.cpp):
// "//       4 sibling on disk    a new process: ..." -> "sibling on disk".
std::vector<std::string> map_tiers(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<std::string> names;
  const std::regex tier(R"(^//\s+(\d+) (\S+(?: \S+)*?)(?:\s{2,}.*)?$)");
  std::string line;
  while (std::getline(in, line) && line.rfind("//", 0) == 0) {
    std::smatch m;
    if (!std::regex_match(line, m, tier)) continue;
    EXPECT_EQ(std::stoul(m[1]), names.size() + 1) << "the map's tiers are numbered in order: " << line;
    names.push_back(m[2]);
  }
  return names;
}

}  // namespace

TEST(SyncMap, TheTierListIsTheMapInPipelineCpp) {
  std::vector<std::string> map = map_tiers(LAZYJIT_SOURCE_DIR "/runtime/pipeline.cpp");
  ASSERT_GE(map.size(), 2u) << "no numbered tiers found in the map of runtime/pipeline.cpp";
  lazyjit::runtime::Config config;
  config.disk_cache = false;
  config.background_compile = false;
  lazyjit::runtime::Runtime rt(config);
  EXPECT_EQ(rt.tier_names(), map) << "the tier list (Runtime::tiers in runtime/pipeline.cpp) and the map above it differ";
}
