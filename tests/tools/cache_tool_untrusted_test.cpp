// lazyjit-cache on entries whose bytes are hostile but whose checksums hold
// (writing a good checksum needs no secret): a manifest nested 100,000 deep,
// fields of the wrong JSON type, keys and fields holding newlines, terminal
// escapes and bytes that are not UTF-8. Each such entry is damaged, named
// with its reason; the others are listed as usual; nothing crashes, nothing
// prints a raw control character, and verify calls the entry bad.
//
// Entries are written here byte for byte (cache::entry_file::encode on a
// manifest text built by hand: the deep one cannot go through nlohmann's
// recursive dump), with a payload whose trailing checksum is good, so verify's
// only complaint can be the manifest. The tool run is LAZYJIT_CACHE_TOOL (the
// build's lazyjit-cache; the environment variable of that name overrides it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/entry_file.h"
#include "graph_ir/hash.h"
#include "tests/cache/disk_test_util.h"

#ifndef LAZYJIT_CACHE_TOOL
#error "LAZYJIT_CACHE_TOOL (the built lazyjit-cache) must be defined by the build"
#endif

namespace lazyjit {
namespace {

using cache::testing::TempDir;
using nlohmann::json;

const std::string kGood = "1000000000000000000000000000000a-100000000000000a-100000000000000a";
const std::string kBad = "2000000000000000000000000000000b-200000000000000b-200000000000000b";

struct ToolRun {
  int status = -1;  // the wait status
  std::string out, err;
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::string said() const {
    return "exit " + (WIFSIGNALED(status) ? "by signal " + std::to_string(WTERMSIG(status)) : std::to_string(code())) +
           "\nstdout:\n" + out.substr(0, 2000) + "\nstderr:\n" + err.substr(0, 2000);
  }
};

std::string tool() {
  const char* t = std::getenv("LAZYJIT_CACHE_TOOL");
  return t && *t ? t : LAZYJIT_CACHE_TOOL;
}

class Cache : public ::testing::Test {
 public:
  void SetUp() override { std::filesystem::create_directories(entries()); }
  std::string entries() const { return dir_.cache() + "/v1/entries"; }

  // An entry file for `key` whose manifest is `fields` (JSON members, without
  // braces) plus what the runtime's decoder checks (key, payload size and hash).
  void write(const std::string& key, const std::string& fields) {
    std::string payload = "a program";
    uint64_t sum = ir::hash64(payload.data(), payload.size());
    for (int i = 0; i < 8; ++i) payload.push_back(static_cast<char>(sum >> (8 * i)));
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)cache::entry_file::xxh64(payload));
    std::string manifest = "{\"format\":1,\"kind\":\"program\",\"key\":" + json(key).dump(-1, ' ', false, json::error_handler_t::replace) +
                           ",\"payload_bytes\":" + std::to_string(payload.size()) + ",\"payload_xxh64\":\"" + hash +
                           "\"" + (fields.empty() ? "" : "," + fields) + "}";
    cache::testing::write_file(entries() + "/" + key + ".ljc", cache::entry_file::encode(manifest, payload, ""));
  }
  void write_good() {
    write(kGood, "\"site\":\"model.py:12\",\"ops\":3,\"kernels\":1,\"created\":1700000000,\"compile_ms\":5.5,"
                 "\"inputs\":[{\"dtype\":\"f32\",\"sizes\":[7,16],\"strides\":[16,1]}],\"ir\":\"graph {\\n}\"");
  }

  ToolRun run(const std::string& args) {
    ToolRun r;
    std::string err_file = dir_.path() + "/stderr";
    std::string cmd = "'" + tool() + "' --dir '" + dir_.cache() + "' " + args + " 2>'" + err_file + "'";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    r.status = ::pclose(p);
    r.err = cache::testing::read_file(err_file);
    return r;
  }

 protected:
  TempDir dir_;
};

// The listing commands list both entries, the bad one as damaged with `reason`.
void expect_listed_with_reason(Cache& c, const std::string& reason) {
  ToolRun ls = c.run("ls");
  ASSERT_EQ(ls.code(), 0) << ls.said();
  EXPECT_NE(ls.out.find("model.py:12"), std::string::npos) << "the good entry is listed as usual\n" << ls.said();
  EXPECT_NE(ls.out.find(reason), std::string::npos) << ls.said();

  ToolRun js = c.run("ls --json --sort key");
  ASSERT_EQ(js.code(), 0) << js.said();
  json rows = json::parse(js.out)["entries"];
  ASSERT_EQ(rows.size(), 2u) << js.out;
  EXPECT_EQ(rows[0]["key"], kGood);
  EXPECT_TRUE(rows[0]["problem"].is_null()) << rows[0];
  EXPECT_EQ(rows[0]["ops"], 3);
  EXPECT_EQ(rows[1]["key"], kBad);
  EXPECT_NE(rows[1]["problem"].dump().find(reason), std::string::npos) << rows[1];

  for (const std::string& args : {"show " + kBad, "show " + kBad + " --json", "explain " + kGood + " " + kBad}) {
    ToolRun show = c.run(args);
    EXPECT_EQ(show.code(), 1) << args << "\n" << show.said();
    EXPECT_NE(show.err.find(kBad), std::string::npos) << args << ": names the entry\n" << show.said();
    EXPECT_NE(show.err.find(reason), std::string::npos) << args << "\n" << show.said();
  }
  ToolRun good = c.run("show " + kGood + " --json");
  ASSERT_EQ(good.code(), 0) << good.said();
  EXPECT_EQ(json::parse(good.out)["manifest"]["site"], "model.py:12");

  for (const char* args : {"stats", "stats --json"}) {
    ToolRun stats = c.run(args);
    EXPECT_EQ(stats.code(), 0) << args << "\n" << stats.said();
  }
  ToolRun report = c.run("report --html '" + c.entries() + "/../report.html'");
  EXPECT_EQ(report.code(), 0) << report.said();

  ToolRun verify = c.run("verify");
  EXPECT_EQ(verify.code(), 1) << "verify calls the entry bad\n" << verify.said();
  EXPECT_NE(verify.out.find("BAD  " + kBad + "  corrupt: " + reason), std::string::npos) << verify.said();
  EXPECT_EQ(verify.out.find("BAD  " + kGood), std::string::npos) << verify.said();
}

// Issue 48, defect 5: show --json overflowed the stack (SIGSEGV) copying and
// printing the manifest; verify called the entry healthy.
TEST_F(Cache, AManifestNested100000DeepIsDamagedNotACrash) {
  write_good();
  const int depth = 100000;
  write(kBad, "\"deep\":" + std::string(depth, '[') + std::string(depth, ']'));
  expect_listed_with_reason(*this, "manifest nests deeper than 64 levels");
}

TEST_F(Cache, ANestedInputListIsDamagedNotACrash) {
  write_good();
  write(kBad, "\"inputs\":[" + std::string(100000, '[') + std::string(100000, ']') + "]");
  expect_listed_with_reason(*this, "manifest nests deeper than 64 levels");
}

// Issue 48, defect 8: `"ops": "three"` made ls, ls --json, show and report
// exit 2 for the whole cache ("[json.exception.type_error.302] type must be
// number, but is string", naming no entry); verify called it healthy. Each
// field the tool reads, given the wrong type, names itself.
struct WrongType {
  std::string fields, reason;
};
void PrintTo(const WrongType& w, std::ostream* os) { *os << w.fields; }
class WrongTypes : public Cache, public ::testing::WithParamInterface<WrongType> {};

TEST_P(WrongTypes, AreDamageNamingTheField) {
  write_good();
  write(kBad, GetParam().fields);
  expect_listed_with_reason(*this, GetParam().reason);
}

INSTANTIATE_TEST_SUITE_P(
    Cache, WrongTypes,
    ::testing::Values(
        WrongType{"\"ops\":\"three\"", "manifest field 'ops' is a string, expected a non-negative integer"},
        WrongType{"\"ops\":-3", "manifest field 'ops' is -3, expected a non-negative integer"},
        WrongType{"\"created\":\"yesterday\"", "manifest field 'created' is a string, expected a number"},
        WrongType{"\"compile_ms\":null", "manifest field 'compile_ms' is null, expected a number"},
        WrongType{"\"site\":12", "manifest field 'site' is an integer, expected a string"},
        WrongType{"\"kernels\":[1]", "manifest field 'kernels' is an array, expected a non-negative integer"},
        WrongType{"\"object_bytes\":1.5", "manifest field 'object_bytes' is a fractional number, expected a non-negative integer"},
        WrongType{"\"ir\":{}", "manifest field 'ir' is an object, expected a string"},
        WrongType{"\"code_fingerprint\":true", "manifest field 'code_fingerprint' is a boolean, expected a string"},
        WrongType{"\"inputs\":\"f32[7]\"", "manifest field 'inputs' is a string, expected an array"},
        WrongType{"\"inputs\":[7]", "manifest field 'inputs[0]' is an integer, expected an object"},
        WrongType{"\"outputs\":[{\"dtype\":\"f32\",\"sizes\":[7,\"x\"]}]",
                  "manifest field 'outputs[0].sizes[1]' is a string, expected an integer"},
        WrongType{"\"inputs\":[{\"sizes\":[18446744073709551615]}]",
                  "manifest field 'inputs[0].sizes[0]' is 18446744073709551615, expected an integer"},
        WrongType{"\"target\":{\"cpu\":7}", "manifest field 'target.cpu' is an integer, expected a string"},
        WrongType{"\"key_parts\":[\"a\"]", "manifest field 'key_parts' is an array, expected an object"},
        WrongType{"\"kind\":1", "manifest field 'kind' is an integer, expected a string"}));

// Issue 48, defect 10: ls printed a key holding a newline raw (a second,
// forged line); fields from a manifest could carry terminal escapes.
TEST_F(Cache, KeysAndFieldsArePrintedEscaped) {
  const std::string key = "0000000000000000000000000000000a-000000000000000a-\nforged line \x1b[31m";
  write(key, "\"site\":\"x.py:1\\u001b]0;title\\u0007\",\"ir\":\"graph {\\n  %0 = input \\u001b[2J\\n}\","
             "\"inputs\":[{\"dtype\":\"f\\u001b[1m32\",\"sizes\":[1]}]");
  auto no_raw_controls = [](const ToolRun& r, const std::string& what) {
    for (const std::string* s : {&r.out, &r.err})
      for (char c : *s)
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7f)
          ADD_FAILURE() << what << " printed the raw control byte " << int(c) << "\n" << r.said();
  };
  ToolRun ls = run("ls");
  ASSERT_EQ(ls.code(), 0) << ls.said();
  no_raw_controls(ls, "ls");
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 2) << "a header and one row\n" << ls.said();
  EXPECT_NE(ls.out.find("\\n"), std::string::npos) << ls.said();
  ToolRun show = run("show 0000000000000000000000000000000a");
  ASSERT_EQ(show.code(), 0) << show.said();
  no_raw_controls(show, "show");
  EXPECT_NE(show.out.find("\\x1b[2J"), std::string::npos) << "the IR line, escaped\n" << show.said();
  for (const char* args : {"stats", "verify", "prune --older-than 0s --dry-run", "rm 0000000000000000000000000000000b"}) {
    ToolRun r = run(args);
    no_raw_controls(r, args);
  }
  // A key that is not UTF-8 still gives a JSON document (the byte replaced).
  write("0000000000000000000000000000000c-\xff", "");
  ToolRun js = run("ls --json");
  ASSERT_EQ(js.code(), 0) << js.said();
  EXPECT_EQ(json::parse(js.out)["entries"].size(), 2u) << js.out;
}

}  // namespace
}  // namespace lazyjit
