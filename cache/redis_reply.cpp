#include "cache/redis_reply.h"

#include <cstdio>

namespace lazyjit::cache {

namespace {

// A RESP integer: an optional '-' and 1 to 19 digits, within int64_t.
bool parse_int(std::string_view s, int64_t* out) {
  bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

std::string quoted(std::string_view s) { return "'" + reply_text(s, 40) + "'"; }

}  // namespace

std::string reply_text(std::string_view bytes, size_t max) {
  std::string out;
  for (char c : bytes.substr(0, max)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return bytes.size() > max ? out + "..." : out;
}

ReplyReader::Result ReplyReader::next(RedisReply* out, std::string* error,
                                      std::chrono::steady_clock::time_point deadline) {
  auto bad = [&](const std::string& why) {
    *error = why;
    return Result::Bad;
  };
  for (uint64_t step = 1;; ++step) {
    if (step % 1024 == 0 && std::chrono::steady_clock::now() >= deadline) return Result::Late;
    size_t end = buf_.find("\r\n", pos_);
    if (end == std::string::npos || end - pos_ > limits_.max_line + 1) {
      if (buf_.size() - pos_ > limits_.max_line + 1)
        return bad("a line of over " + std::to_string(limits_.max_line) + " bytes without its end");
      return Result::More;
    }
    if (end == pos_) return bad("an empty line where a reply should start");
    const char type = buf_[pos_];
    const std::string_view line(buf_.data() + pos_ + 1, end - pos_ - 1);
    RedisReply value;
    int64_t n = 0;
    if (type == '+' || type == '-') {
      value.type = type == '+' ? RedisReply::Type::Status : RedisReply::Type::Error;
      value.str.assign(line);
      pos_ = end + 2;
    } else if (type == ':') {
      if (!parse_int(line, &n)) return bad("integer " + quoted(line) + " is not a 64-bit number");
      value.type = RedisReply::Type::Integer;
      value.integer = n;
      pos_ = end + 2;
    } else if (type == '$') {
      if (!parse_int(line, &n)) return bad("bulk length " + quoted(line) + " is not a 64-bit number");
      if (n < -1) return bad("a bulk length of " + std::to_string(n));
      if (n > 0 && static_cast<uint64_t>(n) > limits_.max_bulk)
        return bad("a bulk string of " + std::to_string(n) + " bytes, over the " + std::to_string(limits_.max_bulk) +
                   " this call may take");
      if (n == -1) {
        pos_ = end + 2;  // a nil: no such value
      } else {
        const size_t body = end + 2, after = body + static_cast<size_t>(n);
        if (buf_.size() < after + 2) return Result::More;  // the header is parsed again when more has come
        if (buf_.compare(after, 2, "\r\n") != 0) return bad("a bulk string of " + std::to_string(n) + " bytes runs on past its length");
        value.type = RedisReply::Type::Bulk;
        value.str.assign(buf_, body, static_cast<size_t>(n));
        pos_ = after + 2;
      }
    } else if (type == '*') {
      if (!parse_int(line, &n)) return bad("array length " + quoted(line) + " is not a 64-bit number");
      if (n < -1) return bad("an array length of " + std::to_string(n));
      if (n > 0 && (static_cast<uint64_t>(n) > limits_.max_values - values_))
        return bad("an array of " + std::to_string(n) + " elements, over the " + std::to_string(limits_.max_values) +
                   " a reply may hold");
      pos_ = end + 2;
      if (n > 0) {
        if (open_.size() >= limits_.max_depth)
          return bad("arrays nested deeper than " + std::to_string(limits_.max_depth));
        values_ += static_cast<uint64_t>(n);
        open_.push_back({RedisReply{RedisReply::Type::Array, {}, 0, {}}, n});
        continue;
      }
      if (n == 0) value.type = RedisReply::Type::Array;  // else a nil array
    } else {
      return bad("a reply starting with " + quoted(std::string_view(&type, 1)) + ", not one of + - : $ *");
    }
    // The value ends the arrays it completes.
    for (;;) {
      if (open_.empty()) {
        *out = std::move(value);
        values_ = 0;
        if (pos_ == buf_.size()) buf_.clear(), pos_ = 0;
        else if (pos_ > (1u << 20) && pos_ > buf_.size() / 2) buf_.erase(0, pos_), pos_ = 0;
        return Result::Done;
      }
      Frame& top = open_.back();
      top.array.elements.push_back(std::move(value));
      if (--top.left > 0) break;
      value = std::move(top.array);
      open_.pop_back();
    }
  }
}

}  // namespace lazyjit::cache
