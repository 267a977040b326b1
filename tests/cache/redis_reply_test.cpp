// cache::ReplyReader: RESP2 replies parsed as their bytes arrive, and headers
// that claim more than a call may take refused at once (issue 48, defect 6).
// The whole path, through a socket and RedisStore, is in redis_store_test.cpp.
#include "cache/redis_reply.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace lazyjit::cache {
namespace {

using Result = ReplyReader::Result;
using Type = RedisReply::Type;

const auto kLater = std::chrono::steady_clock::now() + std::chrono::hours(1);

// Fed one byte at a time: More until the last byte, then Done.
RedisReply parsed_bytewise(const std::string& bytes, ReplyLimits limits = {}) {
  ReplyReader r(limits);
  RedisReply out;
  std::string why;
  for (size_t i = 0; i < bytes.size(); ++i) {
    EXPECT_EQ(r.next(&out, &why, kLater), Result::More) << "at byte " << i << ": " << why;
    r.feed(&bytes[i], 1);
  }
  EXPECT_EQ(r.next(&out, &why, kLater), Result::Done) << why;
  EXPECT_EQ(r.pending(), 0u);
  return out;
}

// Fed whole: Bad, with the reason.
std::string refused(const std::string& bytes, ReplyLimits limits = {}) {
  ReplyReader r(limits);
  r.feed(bytes.data(), bytes.size());
  RedisReply out;
  std::string why;
  EXPECT_EQ(r.next(&out, &why, kLater), Result::Bad) << bytes.substr(0, 60);
  return why;
}

TEST(ReplyReader, ParsesEveryType) {
  RedisReply scan = parsed_bytewise("*2\r\n$1\r\n0\r\n*3\r\n$3\r\nk\r\n\r\n$-1\r\n*0\r\n");
  ASSERT_EQ(scan.type, Type::Array);
  ASSERT_EQ(scan.elements.size(), 2u);
  EXPECT_EQ(scan.elements[0].str, "0");
  const RedisReply& keys = scan.elements[1];
  ASSERT_EQ(keys.elements.size(), 3u);
  EXPECT_EQ(keys.elements[0].str, "k\r\n");  // a bulk string holds any bytes, CRLF included
  EXPECT_EQ(keys.elements[1].type, Type::Nil);
  EXPECT_EQ(keys.elements[2].type, Type::Array);
  EXPECT_TRUE(keys.elements[2].elements.empty());
  EXPECT_EQ(parsed_bytewise("+OK\r\n").str, "OK");
  EXPECT_EQ(parsed_bytewise("-ERR no\r\n").type, Type::Error);
  EXPECT_EQ(parsed_bytewise(":-9223372036854775807\r\n").integer, -9223372036854775807LL);
  EXPECT_EQ(parsed_bytewise("*-1\r\n").type, Type::Nil);
  EXPECT_EQ(parsed_bytewise("$0\r\n\r\n").type, Type::Bulk);
}

TEST(ReplyReader, PipelinedRepliesComeOneByOne) {
  ReplyReader r({});
  std::string bytes = ":1\r\n:0\r\n$2\r\nab\r\n";
  r.feed(bytes.data(), bytes.size());
  RedisReply out;
  std::string why;
  for (long long want : {1, 0}) {
    ASSERT_EQ(r.next(&out, &why, kLater), Result::Done);
    EXPECT_EQ(out.integer, want);
  }
  ASSERT_EQ(r.next(&out, &why, kLater), Result::Done);
  EXPECT_EQ(out.str, "ab");
  EXPECT_EQ(r.next(&out, &why, kLater), Result::More);
}

// What a header claims is checked before anything waits for it or is
// allocated for it.
TEST(ReplyReader, HeadersThatClaimTooMuchAreRefusedAtOnce) {
  EXPECT_NE(refused("*2147483647\r\n").find("an array of 2147483647 elements"), std::string::npos);
  EXPECT_NE(refused("*2\r\n:1\r\n*1048576\r\n").find("over the 1048576 a reply may hold"), std::string::npos);
  EXPECT_NE(refused("$9223372036854775807\r\n").find("bulk string of 9223372036854775807 bytes"), std::string::npos);
  EXPECT_NE(refused("$99999999999999999999\r\n").find("not a 64-bit number"), std::string::npos);
  EXPECT_NE(refused(":99999999999999999999\r\n").find("not a 64-bit number"), std::string::npos);
  EXPECT_NE(refused("*-2\r\n").find("an array length of -2"), std::string::npos);
  EXPECT_NE(refused("$-5\r\n").find("a bulk length of -5"), std::string::npos);
  EXPECT_NE(refused("*1x\r\n").find("not a 64-bit number"), std::string::npos);
  EXPECT_NE(refused("$3\r\nabcdef\r\n").find("runs on past its length"), std::string::npos);
  EXPECT_NE(refused("%1\r\n").find("not one of"), std::string::npos);  // RESP3, never asked for
  EXPECT_NE(refused("\r\n").find("empty line"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "*1\r\n";
  EXPECT_NE(refused(deep).find("nested deeper than 8"), std::string::npos);
  EXPECT_NE(refused("+" + std::string(100000, 'K')).find("without its end"), std::string::npos);
  ReplyLimits small;
  small.max_bulk = 100;
  EXPECT_NE(refused("$101\r\n", small).find("over the 100 this call may take"), std::string::npos);
  EXPECT_EQ(parsed_bytewise("$100\r\n" + std::string(100, 'x') + "\r\n", small).str.size(), 100u);
}

TEST(ReplyReader, AnArrayGrowsOnlyByWhatHasArrived) {
  // A claim within the limits that never arrives: More, and nothing reserved.
  ReplyReader r({});
  std::string bytes = "*1000000\r\n:1\r\n:2\r\n";
  r.feed(bytes.data(), bytes.size());
  RedisReply out;
  std::string why;
  EXPECT_EQ(r.next(&out, &why, kLater), Result::More);
}

TEST(ReplyReader, ADeadlineThatPassesMidParseIsLate) {
  std::string bytes = "*100000\r\n";
  for (int i = 0; i < 100000; ++i) bytes += ":1\r\n";
  ReplyReader r({});
  r.feed(bytes.data(), bytes.size());
  RedisReply out;
  std::string why;
  EXPECT_EQ(r.next(&out, &why, std::chrono::steady_clock::now() - std::chrono::seconds(1)), Result::Late);
}

}  // namespace
}  // namespace lazyjit::cache
