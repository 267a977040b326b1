// A manifest read from a cache entry, a remote value or an archive is
// untrusted input: a checksum says the bytes are the ones written, not that a
// lazyjit runtime wrote them (no secret is needed to write a good checksum).
// Every command of the tool reads manifests through parse_manifest, which
// refuses what would make a later read crash or throw: nesting deeper than
// kMaxManifestDepth (copying or printing a JSON value recurses once per
// level: a manifest nested 100,000 deep overflowed the stack) and a field the
// tool reads that has the wrong JSON type ("ops": "three" made every command
// that lists entries fail). A refused manifest makes its entry damaged, with
// the reason, and the other entries are listed as usual.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lazyjit::cache_tool {

// The runtime writes manifests 4 levels deep (inputs[i].sizes[j]).
inline constexpr int kMaxManifestDepth = 64;

// The manifest as a JSON object whose fields the tool reads have the types the
// runtime writes (runtime/disk_tier.cpp); fields it does not know and fields
// that are absent are fine. Else null, with *problem saying what is wrong:
// "manifest field 'ops' is a string, expected an integer",
// "manifest field 'inputs[0].sizes[1]' is ...", "manifest nests deeper than
// 64 levels", "manifest is not valid JSON", "manifest is not a JSON object".
nlohmann::json parse_manifest(std::string_view text, std::string* problem);

}  // namespace lazyjit::cache_tool
