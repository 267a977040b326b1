#include "formats/manifest.h"

namespace lazyjit::formats {

using nlohmann::json;

namespace {

using Want = ManifestType;

const char* wanted(Want w) {
  switch (w) {
    case Want::String: return "a string";
    case Want::Number: return "a number";
    case Want::Integer: return "an integer";
    case Want::Count: return "a non-negative integer";
    case Want::Object: return "an object";
    case Want::Array: return "an array";
    case Want::Strings: return "an object of strings";
    case Want::Tensors: return "an array of tensors";
  }
  return "?";
}

const char* described(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a fractional number";
    default: return "not a JSON value";
  }
}

// Integers the tool reads as int64_t: an unsigned one past INT64_MAX would wrap.
bool is_int64(const json& v) {
  return v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX));
}

bool fits(const json& v, Want w) {
  switch (w) {
    case Want::String: return v.is_string();
    case Want::Number: return v.is_number();
    case Want::Integer: return is_int64(v);
    case Want::Count: return is_int64(v) && v.get<int64_t>() >= 0;
    case Want::Object: return v.is_object();
    case Want::Array: return v.is_array();
    case Want::Strings: return v.is_object();
    case Want::Tensors: return v.is_array();
  }
  return false;
}

// True when `v`, the field at `path`, holds what `w` asks; else *problem says
// what it holds instead.
bool is(const json& v, Want w, const std::string& path, std::string* problem) {
  if (fits(v, w)) return true;
  // An integer of the wrong range is named by its value, any other mismatch by its type.
  std::string what = v.is_number_integer() && (w == Want::Integer || w == Want::Count) ? v.dump() : described(v);
  *problem = "manifest field '" + path + "' is " + what + ", expected " + wanted(w);
  return false;
}

// An absent field is fine: older entries lack some.
bool field(const json& object, const char* name, Want w, const std::string& prefix, std::string* problem) {
  auto it = object.find(name);
  return it == object.end() || is(*it, w, prefix + name, problem);
}

// An object whose every value is a string ("target", "key_parts").
bool strings(const json& m, const char* name, std::string* problem) {
  auto it = m.find(name);
  if (it == m.end()) return true;
  if (!is(*it, Want::Object, name, problem)) return false;
  for (auto& [k, v] : it->items())
    if (!is(v, Want::String, std::string(name) + "." + k, problem)) return false;
  return true;
}

// "inputs" / "outputs": [{dtype, sizes: [int], strides: [int]}].
bool tensors(const json& m, const char* name, std::string* problem) {
  auto it = m.find(name);
  if (it == m.end()) return true;
  if (!is(*it, Want::Array, name, problem)) return false;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string at = std::string(name) + "[" + std::to_string(i) + "]";
    if (!is(t, Want::Object, at, problem) || !field(t, "dtype", Want::String, at + ".", problem)) return false;
    for (const char* list : {"sizes", "strides"}) {
      auto l = t.find(list);
      if (l == t.end()) continue;
      if (!is(*l, Want::Array, at + "." + list, problem)) return false;
      for (size_t j = 0; j < l->size(); ++j)
        if (!is((*l)[j], Want::Integer, at + "." + list + "[" + std::to_string(j) + "]", problem)) return false;
    }
  }
  return true;
}

// Counted on the bytes, before parsing, so that no deep value is ever built.
bool nests_deeper_than(std::string_view s, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

const std::vector<ManifestField> kManifestFields = {
    {"format", Want::Integer, true},
    {"kind", Want::String, true},
    {"key_parts", Want::Strings, true},
    {"code_fingerprint", Want::String, true},
    {"target", Want::Strings, true},
    {"libtorch_version", Want::String, true},
    {"created", Want::Number, true},
    {"compile_ms", Want::Number, true},
    {"site", Want::String, true},
    {"ops", Want::Count, true},
    {"kernels", Want::Count, true},
    {"aten_steps", Want::Count, true},
    {"scalars", Want::Count, true},
    {"inputs", Want::Tensors, true},
    {"outputs", Want::Tensors, true},
    {"object_bytes", Want::Count, true},
    {"ir", Want::String, true},
    {"plan", Want::String, true},
    {"key", Want::String, false},
    {"payload_bytes", Want::Count, false},
    {"payload_xxh64", Want::String, false},
};

std::string write_manifest(const ProgramManifest& p) {
  auto tensors = [](const std::vector<ManifestTensor>& ts) {
    json a = json::array();
    for (const ManifestTensor& t : ts) a.push_back(json{{"dtype", t.dtype}, {"sizes", t.sizes}, {"strides", t.strides}});
    return a;
  };
  // kManifestFields' written fields, each (tests/formats/manifest_test.cpp holds the two together).
  json m = {
      {"format", kManifestFormat},
      {"kind", "program"},
      {"key_parts", p.key_parts},
      {"code_fingerprint", p.code_fingerprint},
      {"target", p.target},
      {"libtorch_version", p.libtorch_version},
      {"created", p.created},
      {"compile_ms", p.compile_ms},
      {"site", p.site},
      {"ops", p.ops},
      {"kernels", p.kernels},
      {"aten_steps", p.aten_steps},
      {"scalars", p.scalars},
      {"inputs", tensors(p.inputs)},
      {"outputs", tensors(p.outputs)},
      {"object_bytes", p.object_bytes},
      {"ir", p.ir},
      {"plan", p.plan},
  };
  return m.dump();
}

bool manifest_accepts(std::string_view text, const std::string& code_fingerprint,
                      const std::string& libtorch_version) {
  // Untrusted bytes (a good checksum needs no secret): a field of another JSON
  // type is a manifest this build did not write, a miss, never an exception.
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return false;
  auto text_is = [&](const char* field, const std::string& want) {
    auto it = m.find(field);
    return it != m.end() && it->is_string() && it->get_ref<const std::string&>() == want;
  };
  auto format = m.find("format");
  return format != m.end() && format->is_number_integer() && format->get<int64_t>() == kManifestFormat &&
         text_is("kind", "program") && text_is("code_fingerprint", code_fingerprint) &&
         text_is("libtorch_version", libtorch_version);
}

json parse_manifest(std::string_view text, std::string* problem) {
  if (nests_deeper_than(text, kMaxManifestDepth)) {
    *problem = "manifest nests deeper than " + std::to_string(kMaxManifestDepth) + " levels";
    return nullptr;
  }
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded()) {
    *problem = "manifest is not valid JSON";
    return nullptr;
  }
  if (!m.is_object()) {
    *problem = "manifest is not a JSON object";
    return nullptr;
  }
  for (const ManifestField& f : kManifestFields) {
    bool ok = f.type == Want::Strings   ? strings(m, f.name, problem)
              : f.type == Want::Tensors ? tensors(m, f.name, problem)
                                        : field(m, f.name, f.type, "", problem);
    if (!ok) return nullptr;
  }
  problem->clear();
  return m;
}

}  // namespace lazyjit::formats
