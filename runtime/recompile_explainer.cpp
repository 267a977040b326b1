#include "runtime/recompile_explainer.h"

#include "graph_ir/node_name.h"

#include <algorithm>
#include <sstream>

#include "debug/metrics.h"

namespace lazyjit::runtime {

namespace {

std::string attr_text(const ir::AttrValue& a) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) os << "None";
        else if constexpr (std::is_same_v<T, bool>) os << (x ? "true" : "false");
        else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) os << x;
        else if constexpr (std::is_same_v<T, std::string>) os << x;
        else if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
          os << "[";
          for (size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
          os << "]";
        } else if constexpr (std::is_same_v<T, ir::OperandRef>) os << "$" << x.index;
        else os << "list";
      },
      a);
  return os.str();
}

// "aten::slice.Tensor" for library nodes, the IR op name otherwise.
std::string op_text(const ir::Node& n) { return ir::node_op_name(n); }

// The first difference between two nodes at the same position, or "".
std::string node_diff(size_t i, const ir::Node& a, const std::vector<ir::TensorType>& ta, const ir::Node& b,
                      const ir::Graph& gb) {
  std::string op = "op #" + std::to_string(i) + " " + op_text(b);
  if (a.kind != b.kind || op_text(a) != op_text(b)) return "op #" + std::to_string(i) + ": " + op_text(a) + " → " + op_text(b);
  if (a.operands != b.operands) return op + ": different operands";
  // Views (slices, narrows, reshapes: the tracer records them as as_strided)
  // name their attributes.
  bool view = b.kind == ir::OpKind::AsStrided || b.kind == ir::OpKind::AsStridedScatter;
  static const char* const kViewAttrs[] = {"sizes", "strides", "offset"};
  for (size_t k = 0; k < std::min(a.attrs.size(), b.attrs.size()); ++k)
    if (!(a.attrs[k] == b.attrs[k]))
      return op + (view ? " (a view): " : ": attr ") + (view && k < 3 ? kViewAttrs[k] : std::to_string(k) + ":") + " " +
             attr_text(a.attrs[k].value) + " → " + attr_text(b.attrs[k].value);
  if (a.attrs.size() != b.attrs.size()) return op + ": different attributes";
  for (size_t k = 0; k < std::min(a.outputs.size(), b.outputs.size()); ++k) {
    const ir::TensorType &x = ta.at(a.outputs[k]), &y = gb.value(b.outputs[k]).type;
    if (!(x == y)) return op + ": output " + x.str() + " → " + y.str();
  }
  return "";
}

// "float32" as torch names it.
std::string torch_dtype(ir::DType t) {
  switch (t) {
    case ir::DType::Bool: return "bool";
    case ir::DType::UInt8: return "uint8";
    case ir::DType::Int8: return "int8";
    case ir::DType::Int16: return "int16";
    case ir::DType::Int32: return "int32";
    case ir::DType::Int64: return "int64";
    case ir::DType::Float16: return "float16";
    case ir::DType::BFloat16: return "bfloat16";
    case ir::DType::Float32: return "float32";
    case ir::DType::Float64: return "float64";
    case ir::DType::Complex64: return "complex64";
    case ir::DType::Complex128: return "complex128";
    default: return std::string(ir::dtype_name(t));
  }
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// For each new input, the old input it is (-1: none). By name first; then an
// unnamed new input takes an unmatched old one of the same type, then of the
// same dtype and rank (new sizes), then of the same rank (a new dtype), then
// any, in order.
std::vector<int> match_inputs(const std::vector<ir::TensorType>& old_types, const std::vector<std::string>& old_names,
                              const std::vector<ir::TensorType>& types, const std::vector<std::string>& names) {
  std::vector<int> match(types.size(), -1);
  std::vector<bool> taken(old_types.size(), false);
  // An old input no name was found for goes by its position ("#2").
  auto unnamed = [](const std::string& key) { return key.empty() || key[0] == '#'; };
  for (size_t k = 0; k < types.size(); ++k) {
    if (names[k].empty()) continue;
    for (size_t j = 0; j < old_types.size(); ++j)
      if (!taken[j] && old_names[j] == names[k]) {
        match[k] = static_cast<int>(j), taken[j] = true;
        break;
      }
  }
  using Same = bool (*)(const ir::TensorType&, const ir::TensorType&);
  const Same tiers[] = {
      [](const ir::TensorType& a, const ir::TensorType& b) { return a == b; },
      [](const ir::TensorType& a, const ir::TensorType& b) { return a.dtype == b.dtype && a.sizes.size() == b.sizes.size(); },
      [](const ir::TensorType& a, const ir::TensorType& b) { return a.sizes.size() == b.sizes.size(); },
      [](const ir::TensorType&, const ir::TensorType&) { return true; },
  };
  for (Same same : tiers)
    for (size_t k = 0; k < types.size(); ++k) {
      // A named input whose name was not seen is new unless it takes an unnamed old one.
      if (match[k] >= 0) continue;
      for (size_t j = 0; j < old_types.size(); ++j)
        if (!taken[j] && (names[k].empty() || unnamed(old_names[j])) && same(old_types[j], types[k])) {
          match[k] = static_cast<int>(j), taken[j] = true;
          break;
        }
    }
  return match;
}

}  // namespace

const RecompileExplainer::Seen* RecompileExplainer::latest_with(const std::vector<Seen>& seen, const ir::Hash128& structure) {
  for (auto it = seen.rbegin(); it != seen.rend(); ++it)
    if (it->structure == structure) return &*it;
  return nullptr;
}

bool RecompileExplainer::resized_locked(const ir::Graph& g, const std::string& site) {
  if (!dynamic_) return false;
  auto seen = seen_.find(site);
  if (seen == seen_.end()) return false;
  const Seen* near = latest_with(seen->second, g.hashes().structure);
  if (!near || near->inputs.size() != g.inputs().size()) return false;
  const auto& sizes = sizes_[site];
  bool resized = false;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::TensorType &a = near->inputs[i], &b = g.value(g.inputs()[i]).type;
    if (a.dtype != b.dtype || a.sizes.size() != b.sizes.size()) return false;
    if (a.sizes == b.sizes) {
      if (a.strides != b.strides) return false;  // a new layout: maybe new code
      continue;
    }
    for (size_t d = 0; d < a.sizes.size(); ++d) {
      if (a.sizes[d] == b.sizes[d]) continue;
      auto it = sizes.find({near->keys[i], d});
      if (it == sizes.end() || it->second.size() < 2) return false;  // its second size: generic code now
      resized = true;
    }
  }
  return resized;
}

Recompile RecompileExplainer::explain(const ir::Graph& g, const std::string& site, const NodeSites& node_sites) {
  // Input names first, outside the lock: the tracer may look them up in the
  // user's Python frames.
  std::vector<std::string> names;
  for (ir::ValueId v : g.inputs()) names.push_back(node_sites ? node_sites(g.value(v).node) : std::string());
  std::lock_guard<std::mutex> lock(mu_);
  Recompile r{site, "", "", ++count_[site]};
  r.counted = !resized_locked(g, site);
  r.budget = r.counted ? ++budget_[site] : budget_[site];
  std::vector<Seen>& seen = seen_[site];
  auto& sizes = sizes_[site];
  std::vector<ir::TensorType> inputs;
  for (ir::ValueId v : g.inputs()) inputs.push_back(g.value(v).type);
  ir::GraphHashes h = g.hashes();
  // The nearest graph: the latest with the same structure, else the latest.
  const Seen* near = latest_with(seen, h.structure);
  bool same_structure = near != nullptr;
  if (!near && !seen.empty()) near = &seen.back();
  std::vector<int> match = near ? match_inputs(near->inputs, near->keys, inputs, names) : std::vector<int>(inputs.size(), -1);
  // Named inputs by name; an unnamed one by the input it matched (its sizes
  // seen go on), else by position.
  std::vector<std::string> keys(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    keys[i] = !names[i].empty() ? names[i] : match[i] >= 0 ? near->keys[match[i]] : "#" + std::to_string(i);
  auto label = [&](size_t i) {
    const std::string pos = "input " + std::to_string(i);
    if (!names[i].empty()) return names[i] + " (" + pos + ")";
    // An unnamed input that matched a named one goes by that name.
    if (match[i] >= 0 && near->keys[match[i]].rfind('#', 0) != 0) return near->keys[match[i]] + " (" + pos + ")";
    return pos;
  };
  std::vector<std::string> lines;
  std::vector<bool> permuted(inputs.size(), false);
  if (!near) {
    r.kind = "first at this site";
  } else {
    r.kind = same_structure ? "new shapes" : "new graph";
    for (size_t i = 0; i < inputs.size() && lines.size() < 4; ++i) {
      if (match[i] < 0) {
        lines.push_back(label(i) + ": a new input, " + inputs[i].str());
        continue;
      }
      const ir::TensorType &ta = near->inputs[match[i]], &tb = inputs[i];
      const auto &a = ta.sizes, &b = tb.sizes;
      if (ta.dtype != tb.dtype)
        lines.push_back(label(i) + ": dtype " + torch_dtype(ta.dtype) + " → " + torch_dtype(tb.dtype));
      // The same elements read through another view first (a transposed
      // weight): the dims are permuted with their strides, not resized.
      auto pairs = [](const ir::TensorType& t) {
        std::vector<std::pair<int64_t, int64_t>> v;
        for (size_t d = 0; d < t.sizes.size(); ++d) v.push_back({t.sizes[d], d < t.strides.size() ? t.strides[d] : 0});
        std::sort(v.begin(), v.end());
        return v;
      };
      if (ta.dtype == tb.dtype && a.size() == b.size() && a != b && pairs(ta) == pairs(tb)) {
        permuted[i] = true;
        lines.push_back(label(i) + ": layout " + ta.str() + " → " + tb.str() +
                        " (the same elements, dims permuted: first read through a transposed view)");
        continue;
      }
      if (a.size() != b.size()) {
        lines.push_back(label(i) + ": rank " + std::to_string(a.size()) + " → " + std::to_string(b.size()) + " (" +
                        ta.str() + " → " + tb.str() + ")");
        continue;
      }
      for (size_t d = 0; d < a.size(); ++d)
        if (a[d] != b[d]) {
          std::string seen_sizes;
          auto& s = sizes[{keys[i], d}];
          s.insert(a[d]);
          s.insert(b[d]);
          // At most the three smallest and three largest: a sweep over
          // thousands of sizes must not make each explanation longer.
          size_t k = 0;
          for (int64_t x : s) {
            if (s.size() > 6 && k == 3) seen_sizes += ", …";
            if (s.size() <= 6 || k < 3 || k >= s.size() - 3)
              seen_sizes += (seen_sizes.empty() ? "" : ", ") + std::to_string(x);
            ++k;
          }
          if (s.size() > 6) seen_sizes += "; " + std::to_string(s.size()) + " sizes";
          // Its second size: from now on its kernels get shape-generic code
          // (lowering/target.h, Shapes::Auto), which serves every later size.
          bool now = dynamic_ && s.size() == 2;
          if (now) debug::Metrics::get().add(debug::Counter::DynamicDims);
          lines.push_back(label(i) + " dim " + std::to_string(d) + ": " + std::to_string(a[d]) + " → " +
                          std::to_string(b[d]) + " (sizes seen: " + seen_sizes + ")" + (now ? " — now dynamic" : ""));
        }
      if (a == b && ta.strides != tb.strides) {
        auto dense = [](const ir::TensorType& t) { return t.strides == ir::contiguous_strides(t.sizes); };
        lines.push_back(label(i) + ": layout strides " + ints_text(ta.strides) + " → " + ints_text(tb.strides) + " (" +
                        (dense(ta) ? "contiguous" : "not contiguous") + " → " + (dense(tb) ? "contiguous" : "not contiguous") +
                        (dense(tb) ? ")" : ": a transposed or strided view; .contiguous() keeps one layout)"));
      }
    }
    for (size_t j = 0; j < near->inputs.size() && lines.size() < 4; ++j)
      if (std::find(match.begin(), match.end(), static_cast<int>(j)) == match.end())
        lines.push_back((near->keys[j].rfind('#', 0) == 0 ? "input " + near->keys[j].substr(1) : near->keys[j]) +
                        ": no longer an input (" + near->inputs[j].str() + ")");
    if (inputs.size() != near->inputs.size())
      lines.push_back(std::to_string(near->inputs.size()) + " → " + std::to_string(inputs.size()) + " inputs");
    // The first op that differs. An output that only changed sizes follows
    // from the inputs: on a known structure only an attribute change says more
    // (a slice bound); in a new graph the first op changed otherwise (another
    // op, other operands) says what changed, else the first output that did.
    size_t n = std::min(near->nodes.size(), g.nodes().size());
    std::string first_output;  // a new graph's first output-only difference
    for (size_t i = 0; i <= n; ++i) {
      if (i == n) {
        if (same_structure || first_output.empty()) break;
        lines.push_back(first_output + " (first op that differs)");
        break;
      }
      const ir::Node& b = g.nodes()[i];
      if (b.kind == ir::OpKind::Input || b.kind == ir::OpKind::Scalar) continue;
      std::string d = node_diff(i, near->nodes[i], near->types, b, g);
      if (d.empty()) continue;
      const bool output_only = d.find(": output ") != std::string::npos;
      if (output_only && (same_structure || !first_output.empty())) continue;
      // Where the user recorded it, after "op #i name".
      if (std::string where = node_sites ? node_sites(static_cast<uint32_t>(i)) : ""; !where.empty()) {
        size_t colon = d.find(": ");
        d.insert(colon == std::string::npos ? d.size() : colon, " (" + where + ")");
      }
      if (output_only) {
        first_output = d;
        continue;
      }
      lines.push_back(same_structure ? d : d + " (first op that differs)");
      break;
    }
    if (near->nodes.size() != g.nodes().size())
      lines.push_back(std::to_string(near->nodes.size()) + " → " + std::to_string(g.nodes().size()) + " nodes");
    if (lines.empty()) lines.push_back("same graph and shapes as an earlier program (it was evicted or compiled by another thread)");
  }
  // Dims past the few lines above count too.
  for (size_t i = 0; i < inputs.size(); ++i)
    for (size_t d = 0; d < inputs[i].sizes.size() && !permuted[i]; ++d) {
      auto& s = sizes[{keys[i], d}];
      if (s.insert(inputs[i].sizes[d]).second && s.size() == 2 && dynamic_)
        debug::Metrics::get().add(debug::Counter::DynamicDims);
    }
  for (const std::string& l : lines) r.detail += (r.detail.empty() ? "" : "; ") + l;
  Seen s{h.structure, std::move(inputs), std::move(keys), g.nodes(), {}};
  for (const ir::Value& v : g.values()) s.types.push_back(v.type);
  seen.push_back(std::move(s));
  if (seen.size() > kKeepPerSite) seen.erase(seen.begin());
  return r;
}

}  // namespace lazyjit::runtime
