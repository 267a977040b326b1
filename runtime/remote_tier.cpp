#include "runtime/remote_tier.h"

#include <algorithm>
#include <cstdio>
#include <variant>

#include "cache/entry_file.h"
#include "debug/metrics.h"
#include "debug/trace.h"

namespace lazyjit::runtime {

using debug::Counter;
using debug::Metrics;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Faults of the connection (not of one entry or one command): what backs off.
bool connection_fault(cache::RemoteError e) {
  return e == cache::RemoteError::Connect || e == cache::RemoteError::Timeout || e == cache::RemoteError::Protocol;
}

}  // namespace

std::unique_ptr<RemoteTier> RemoteTier::open(const Config& config) {
  if (config.remote_cache.empty()) return nullptr;
  cache::RedisStoreOptions opts;
  std::string why;
  if (!cache::RedisUrl::parse(config.remote_cache, &opts.url, &why)) return nullptr;  // Config warned already
  if (config.cache_secret.empty()) {
    std::fprintf(stderr,
                 "lazyjit: remote compile cache off: LAZYJIT_REMOTE_CACHE=%s needs LAZYJIT_CACHE_SECRET (entries from a "
                 "shared server are loaded only when signed with it)\n",
                 opts.url.str().c_str());
    return nullptr;
  }
  opts.timeout = std::chrono::milliseconds(config.remote_timeout_ms);
  return std::unique_ptr<RemoteTier>(new RemoteTier(std::move(opts), config.cache_secret, config.remote_max_entry_bytes));
}

RemoteTier::RemoteTier(cache::RedisStoreOptions options, std::string secret, uint64_t max_entry_bytes)
    : store_(std::move(options)), secret_(std::move(secret)), max_entry_bytes_(max_entry_bytes),
      where_(store_.options().url.str()) {}

void RemoteTier::say_once(const std::string& kind, const std::string& message) {
  // Called with mu_ held.
  if (said_.find("," + kind + ",") != std::string::npos) return;
  said_ += "," + kind + ",";
  std::fprintf(stderr, "lazyjit: remote compile cache %s: %s: %s\n", where_.c_str(), kind.c_str(), message.c_str());
}

bool RemoteTier::backing_off() {
  std::lock_guard<std::mutex> lock(mu_);
  if (failures_ < kFailuresBeforeBackoff || std::chrono::steady_clock::now() >= retry_at_) return false;
  Metrics::get().add(Counter::RemoteSkipped);
  return true;
}

void RemoteTier::failed(const cache::RemoteStatus& s) {
  Metrics::get().remote_error(cache::remote_error_name(s.error));
  std::lock_guard<std::mutex> lock(mu_);
  if (!connection_fault(s.error)) {
    say_once(cache::remote_error_name(s.error), s.message + " (not used; the program is compiled or kept locally)");
    return;
  }
  ++failures_;
  if (failures_ >= kFailuresBeforeBackoff) {
    int doublings = std::min(failures_ - kFailuresBeforeBackoff, 6);  // 1 s .. 64 s, capped at 60 s
    auto wait = std::min(std::chrono::milliseconds(1000 << doublings), std::chrono::milliseconds(60000));
    retry_at_ = std::chrono::steady_clock::now() + wait;
  }
  say_once(cache::remote_error_name(s.error),
           s.message + " (compiling locally; after " + std::to_string(kFailuresBeforeBackoff) +
               " faults in a row the server is left alone for a while)");
}

void RemoteTier::succeeded() {
  std::lock_guard<std::mutex> lock(mu_);
  failures_ = 0;
}

void RemoteTier::refuse(const std::string& key, cache::DiskError kind, const std::string& message) {
  refuse_as(key, cache::disk_error_name(kind), message);
}

void RemoteTier::refuse_as(const std::string& key, const std::string& kind, const std::string& message) {
  Metrics::get().add(Counter::RemoteRefused);
  Metrics::get().remote_error(kind);
  std::lock_guard<std::mutex> lock(mu_);
  say_once(kind, key + ": " + message + " (refused, never run; compiling locally instead)");
}

std::optional<cache::entry_file::VerifiedEntry> RemoteTier::get(const std::string& key,
                                                 const std::function<bool(const std::string&)>& expect) {
  if (backing_off()) return std::nullopt;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("cache", "remote load", debug::TraceArgs{{"key", key}});
  auto t0 = std::chrono::steady_clock::now();
  cache::RemoteStatus status;
  std::optional<std::string> file = store_.get(key, max_entry_bytes_, &status);
  Metrics::get().time("remote", ms_since(t0));
  if (!status.ok()) {
    if (span) span->arg("result", cache::remote_error_name(status.error));
    if (status.error == cache::RemoteError::TooLarge) {
      succeeded();  // the server answered
      refuse_as(key, cache::remote_error_name(status.error), status.message + " (LAZYJIT_REMOTE_MAX_ENTRY_BYTES)");
    } else {
      failed(status);
    }
    return std::nullopt;
  }
  succeeded();
  if (!file) {
    Metrics::get().add(Counter::RemoteMisses);
    if (span) span->arg("result", "miss");
    return std::nullopt;
  }
  auto verified = cache::entry_file::verify(std::move(*file), secret_, key, expect);
  if (auto* err = std::get_if<cache::entry_file::DecodeError>(&verified)) {
    if (span) span->arg("result", cache::disk_error_name(err->kind));
    refuse(key, err->kind, err->message);
    return std::nullopt;
  }
  if (span) span->arg("result", "hit");
  return std::get<cache::entry_file::VerifiedEntry>(std::move(verified));
}

void RemoteTier::put(const std::string& key, const std::string& file) {
  if (file.size() > max_entry_bytes_) {
    Metrics::get().remote_error(cache::remote_error_name(cache::RemoteError::TooLarge));
    std::lock_guard<std::mutex> lock(mu_);
    say_once("too_large", key + " is " + std::to_string(file.size()) + " bytes, over LAZYJIT_REMOTE_MAX_ENTRY_BYTES=" +
                              std::to_string(max_entry_bytes_) + " (kept on local disk only)");
    return;
  }
  if (backing_off()) return;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("cache", "remote store", debug::TraceArgs{{"key", key}, {"bytes", file.size()}});
  auto t0 = std::chrono::steady_clock::now();
  cache::RemoteStatus status = store_.put(key, file);
  Metrics::get().time("remote", ms_since(t0));
  if (!status.ok()) {
    if (span) span->arg("result", cache::remote_error_name(status.error));
    failed(status);
    return;
  }
  succeeded();
  Metrics::get().add(Counter::RemoteWrites);
}

}  // namespace lazyjit::runtime
