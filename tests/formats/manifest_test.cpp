// A cache entry's manifest (formats/manifest.h): what the runtime writes is
// what its field list says, the runtime accepts only its own, and lazyjit-cache
// refuses by name what would crash a reader.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "formats/manifest.h"

namespace lazyjit::formats {
namespace {

ProgramManifest full() {
  ProgramManifest m;
  m.key_parts = {{"structure", "00ff"}, {"shape", "0001"}, {"target", "0002"}};
  m.code_fingerprint = "llvm 19;cpu x;lazyjit 0.1.0;passes off:";
  m.target = {{"llvm", "19"}, {"debug_nans", "off"}};
  m.libtorch_version = "2.9.0";
  m.created = 1.5e9;
  m.compile_ms = 3.25;
  m.site = "model.py:12";
  m.ops = 3, m.kernels = 1, m.aten_steps = 1, m.scalars = 0;
  m.inputs = {{"f32", {2, 3}, {3, 1}}};
  m.outputs = {{"f32", {2, 3}, {3, 1}}};
  m.object_bytes = 640;
  m.ir = "graph";
  m.plan = "plan";
  return m;
}

TEST(Manifest, TheWriterWritesTheFieldList) {
  std::string problem;
  nlohmann::json m = parse_manifest(write_manifest(full()), &problem);
  ASSERT_TRUE(m.is_object()) << problem;
  std::set<std::string> written, listed;
  for (const auto& [name, value] : m.items()) written.insert(name);
  for (const ManifestField& f : kManifestFields)
    if (f.written) listed.insert(f.name);
  EXPECT_EQ(written, listed);
  EXPECT_EQ(m["inputs"][0]["sizes"][1], 3);
}

TEST(Manifest, TheRuntimeAcceptsOnlyItsOwn) {
  const std::string fp = full().code_fingerprint;
  EXPECT_TRUE(manifest_accepts(write_manifest(full()), fp, "2.9.0"));
  EXPECT_FALSE(manifest_accepts(write_manifest(full()), fp + "x", "2.9.0"));
  EXPECT_FALSE(manifest_accepts(write_manifest(full()), fp, "2.8.0"));
  EXPECT_FALSE(manifest_accepts("{\"format\": \"1\"}", fp, "2.9.0"));
  EXPECT_FALSE(manifest_accepts("not json", fp, "2.9.0"));
  EXPECT_FALSE(manifest_accepts(std::string(100000, '['), fp, "2.9.0"));
}

TEST(Manifest, AReaderRefusesWhatWouldCrashIt) {
  std::string problem;
  EXPECT_TRUE(parse_manifest("{\"ops\": \"three\"}", &problem).is_null());
  EXPECT_EQ(problem, "manifest field 'ops' is a string, expected a non-negative integer");
  EXPECT_TRUE(parse_manifest("{\"inputs\": [{\"sizes\": [1, \"x\"]}]}", &problem).is_null());
  EXPECT_EQ(problem, "manifest field 'inputs[0].sizes[1]' is a string, expected an integer");
  EXPECT_TRUE(parse_manifest("{\"target\": {\"llvm\": 19}}", &problem).is_null());
  EXPECT_EQ(problem, "manifest field 'target.llvm' is an integer, expected a string");
  EXPECT_TRUE(parse_manifest(std::string(65, '[') + std::string(65, ']'), &problem).is_null());
  EXPECT_EQ(problem, "manifest nests deeper than 64 levels");
  EXPECT_TRUE(parse_manifest("[]", &problem).is_null());
  EXPECT_EQ(problem, "manifest is not a JSON object");
}

}  // namespace
}  // namespace lazyjit::formats
