// Whether a cache entry may be used on this machine, as far as a tool that
// links no LLVM can tell: used by import and `remote pull`.
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "cache/entry_file.h"

namespace lazyjit::cache_tool {

// This CPU's feature flags from /proc/cpuinfo; empty elsewhere.
std::set<std::string> host_cpu_flags();

// Empty when the entry may be imported. The tool links no LLVM, so it cannot
// compute this machine's code fingerprint; unless given one exactly
// (`expect_fingerprint`), it refuses entries whose code needs an x86 feature
// this CPU lacks (the one mismatch that could matter: SIGILL). Entries for
// another CPU name, LLVM, lazyjit or libtorch version pass this check; the
// runtime compares the full fingerprint on every load and treats a mismatch
// as a miss (and quarantines the entry), so they never run.
std::string foreign_reason(const nlohmann::json& manifest, const std::string& expect_fingerprint,
                           const std::set<std::string>& host);

// Why an entry file may not be taken into this machine's cache (import,
// `remote pull`): "<disk error kind>: ..." when it does not decode with
// `secret` for `key` (a file stored under another key is "wrong_key: ..."),
// "foreign: ..." when foreign_reason says so (unless `allow_foreign`); empty
// when it may, with *out its decoded parts (views into `file`).
std::string admission_refusal(std::string_view file, const std::string& key, const std::string& secret,
                              bool allow_foreign,
                              const std::string& expect_fingerprint, const std::set<std::string>& host,
                              cache::entry_file::Decoded* out);

}  // namespace lazyjit::cache_tool
