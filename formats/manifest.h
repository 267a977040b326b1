// The manifest of a program's cache entry: JSON that says everything its key
// stands for, written by the runtime (runtime/disk_tier.cpp, from a
// ProgramManifest), checked by it before an entry is loaded (manifest_accepts),
// and read by lazyjit-cache (parse_manifest). One list of its fields and their
// types (kManifestFields, formats/manifest.cpp) for the writer and the readers.
//
// A manifest read from a cache entry, a remote value or an archive is
// untrusted input: a checksum says the bytes are the ones written, not that a
// lazyjit runtime wrote them (no secret is needed to write a good checksum).
// Every command of lazyjit-cache reads manifests through parse_manifest, which
// refuses what would make a later read crash or throw: nesting deeper than
// kMaxManifestDepth (copying or printing a JSON value recurses once per
// level: a manifest nested 100,000 deep overflowed the stack) and a field the
// tool reads that has the wrong JSON type ("ops": "three" made every command
// that lists entries fail). A refused manifest makes its entry damaged, with
// the reason, and the other entries are listed as usual.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace lazyjit::formats {

inline constexpr int kManifestFormat = 1;
// The runtime writes manifests 4 levels deep (inputs[i].sizes[j]).
inline constexpr int kMaxManifestDepth = 64;

// What a field holds.
enum class ManifestType { String, Number, Integer, Count, Object, Array, Strings, Tensors };
struct ManifestField {
  const char* name;
  ManifestType type;  // Strings: an object of strings; Tensors: [{dtype, sizes: [int], strides: [int]}]
  bool written;       // by write_manifest (else added by cache/entry_file.cpp: key, payload_bytes, payload_xxh64)
};
// Every field a manifest holds.
extern const std::vector<ManifestField> kManifestFields;

struct ManifestTensor {
  std::string dtype;  // graph_ir's dtype_name: "f32"
  std::vector<int64_t> sizes, strides;
};
// A program's manifest, as the runtime fills it (format and kind are fixed).
struct ProgramManifest {
  std::map<std::string, std::string> key_parts;  // structure, shape, target: the cache key in hex
  std::string code_fingerprint;                  // target fingerprint + lazyjit version + codegen switches
  std::map<std::string, std::string> target;     // the fingerprint decomposed, and debug_nans
  std::string libtorch_version;
  double created = 0;                            // seconds since the epoch
  double compile_ms = 0;
  std::string site;                              // the sync's call site
  int64_t ops = 0, kernels = 0, aten_steps = 0, scalars = 0;
  std::vector<ManifestTensor> inputs, outputs;
  int64_t object_bytes = 0;                      // the object code's length (formats/program_bytes.h)
  std::string ir, plan;                          // as text
};
// The manifest's JSON text.
std::string write_manifest(const ProgramManifest& m);

// Whether `text` is the manifest of a program written by this format for
// `code_fingerprint` against `libtorch_version`: what the runtime loads. Any
// other, or bytes that are not such JSON, is false, never an exception.
bool manifest_accepts(std::string_view text, const std::string& code_fingerprint,
                      const std::string& libtorch_version);

// The manifest as a JSON object whose fields (kManifestFields) have the types
// they are written with; fields it does not know and fields that are absent
// are fine (older entries lack some). Else null, with *problem saying what is wrong:
// "manifest field 'ops' is a string, expected an integer",
// "manifest field 'inputs[0].sizes[1]' is ...", "manifest nests deeper than
// 64 levels", "manifest is not valid JSON", "manifest is not a JSON object".
nlohmann::json parse_manifest(std::string_view text, std::string* problem);

}  // namespace lazyjit::formats
