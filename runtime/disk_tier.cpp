#include "runtime/disk_tier.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "formats/manifest.h"
#include "lowering/program_bytes.h"
#include "runtime/program_entry.h"

namespace lazyjit::runtime {

using debug::Counter;
using debug::Metrics;
namespace {

formats::ManifestTensor manifest_tensor(const ir::TensorType& t) {
  return formats::ManifestTensor{std::string(ir::dtype_name(t.dtype)), t.sizes, t.strides};
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::unique_ptr<DiskTier> DiskTier::open(const Config& config, std::string code_fingerprint,
                                         lowering::Target& target) {
  if (!config.disk_cache || config.cache_dir.empty()) {
    if (!config.remote_cache.empty())
      std::fprintf(stderr, "lazyjit: remote compile cache off: it sits behind the on-disk cache, which is off "
                           "(LAZYJIT_CACHE=off or no cache directory)\n");
    return nullptr;
  }
  cache::DiskStoreOptions opts;
  opts.dir = config.cache_dir;
  opts.max_bytes = config.cache_max_bytes;
  opts.secret = config.cache_secret;
  std::string warning;
  auto store = cache::DiskStore::open(opts, &warning);
  if (!store) {
    std::fprintf(stderr, "%s\n", warning.c_str());  // "lazyjit: not using the on-disk compile cache: <why>"
    if (!config.remote_cache.empty()) std::fprintf(stderr, "lazyjit: remote compile cache off with it\n");
    return nullptr;
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(std::move(store), std::move(code_fingerprint), target));
  tier->remote_ = RemoteTier::open(config);
  return tier;
}

DiskTier::DiskTier(std::unique_ptr<cache::DiskStore> store, std::string code_fingerprint,
                   lowering::Target& target)
    : store_(std::move(store)), code_fingerprint_(std::move(code_fingerprint)), target_(target) {
  store_->on_error = [](cache::DiskError e, cache::DiskOp op, const std::string& what) {
    Metrics::get().disk_error(cache::disk_error_name(e));
    // Each kind is reported once per process and side; the metrics count every one.
    static std::mutex mu;
    static std::set<std::pair<cache::DiskError, cache::DiskOp>> said;
    std::lock_guard<std::mutex> lock(mu);
    if (said.insert({e, op}).second) {
      bool reading = op == cache::DiskOp::Read;
      std::fprintf(stderr, "lazyjit: on-disk compile cache: %s: %s (%s)\n", cache::disk_error_name(e), what.c_str(),
                   reading ? "not loaded; compiling instead" : "not saved; the program still runs");
    }
  };
}

bool DiskTier::expected(const std::string& manifest) const {
  return formats::manifest_accepts(manifest, code_fingerprint_, TORCH_VERSION);
}

std::shared_ptr<const lowering::Program> DiskTier::load(const std::string& name) {
  auto t0 = std::chrono::steady_clock::now();
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("cache", "disk load", debug::TraceArgs{{"key", name}});
  auto entry = store_->get(name, [&](const std::string& m) { return expected(m); });
  if (span) span->arg("result", entry ? "hit" : "miss");
  if (!entry) return nullptr;
  std::shared_ptr<const lowering::Program> program;
  try {
    program = link_entry(*entry, target_);
  } catch (const std::exception& e) {
    // Checksummed bytes that still do not read back (a format this build does
    // not know): never run; set aside like any damaged entry.
    store_->reject(name, cache::DiskError::Corrupt, e.what());
    if (span) span->arg("rejected", e.what());
    return nullptr;
  }
  store_->record_hit(name);
  Metrics::get().add(Counter::DiskHits);
  Metrics::get().time("disk_load", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return program;
}

std::shared_ptr<const lowering::Program> DiskTier::load_sibling(const cache::CacheKey& key) {
  // Entries are named <structure>-<shape>-<code> (cache::CacheKey::str).
  const std::string own = key.str() + ".ljc";
  const std::string structure = own.substr(0, own.find('-') + 1);
  const std::string code = own.substr(own.rfind('-'));
  std::vector<std::pair<double, std::string>> found;
  // Listed through the store's directory descriptor, like every other access.
  for (const cache::DiskStore::Listed& e : store_->list()) {
    const std::string f = e.key + ".ljc";
    if (f == own) return nullptr;  // stored for these sizes: the key's own load finds it
    if (f.size() != own.size() || f.compare(0, structure.size(), structure) != 0 ||
        f.compare(f.size() - code.size(), code.size(), code) != 0)
      continue;
    found.emplace_back(e.mtime, e.key);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < found.size() && i < 3; ++i)
    if (auto program = load(found[i].second)) return program;
  return nullptr;
}

std::shared_ptr<const lowering::Program> DiskTier::load_remote(const cache::CacheKey& key) {
  if (!remote_) return nullptr;
  auto t0 = std::chrono::steady_clock::now();
  auto entry = remote_->get(key.str(), [&](const std::string& m) { return expected(m); });
  if (!entry) return nullptr;
  std::shared_ptr<const lowering::Program> program;
  try {
    program = link_entry(*entry, target_);
  } catch (const std::exception& e) {
    remote_->refuse(key.str(), cache::DiskError::Corrupt, e.what());
    return nullptr;
  }
  // The same bytes on disk: the next process on this machine finds it there.
  if (store_->put_file(key.str(), entry->file())) Metrics::get().add(Counter::DiskWrites);
  Metrics::get().add(Counter::RemoteHits);
  Metrics::get().time("remote_load", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return program;
}

void DiskTier::store(const cache::CacheKey& key, const lowering::Program& p, const std::string& site) {
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("cache", "disk store", debug::TraceArgs{{"key", key.str()}});
  const ir::Graph& g = p.graph;
  formats::ProgramManifest m;
  for (ir::ValueId v : g.inputs()) m.inputs.push_back(manifest_tensor(g.value(v).type));
  for (ir::ValueId v : g.outputs()) m.outputs.push_back(manifest_tensor(g.value(v).type));
  for (const auto& s : p.plan.steps) m.aten_steps += s.kind == lowering::Step::Kind::Aten;
  char hex[40];
  m.key_parts["structure"] = key.structure.hex();
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)key.shape);
  m.key_parts["shape"] = hex;
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)key.target);
  m.key_parts["target"] = hex;
  // The code fingerprint decomposed: "llvm 19.1.7;cpu znver3;features +avx2,...;O3,vecmath=1,...;lazyjit 0.1.0;passes off:".
  size_t start = 0;
  while (start < code_fingerprint_.size()) {
    size_t end = std::min(code_fingerprint_.find(';', start), code_fingerprint_.size());
    std::string part = code_fingerprint_.substr(start, end - start);
    size_t space = part.find(' ');
    if (part.rfind("passes off:", 0) == 0) m.target["passes_off"] = part.substr(11);
    else if (space == std::string::npos) m.target["codegen"] = part;
    else m.target[part.substr(0, space)] = part.substr(space + 1);
    start = end + 1;
  }
  // A switch the key's target part holds but the fingerprint does not
  // (runtime.cpp: checked_code_hash_): lazyjit-cache explain names it.
  m.target["debug_nans"] = p.plan.check_stores ? "on" : "off";
  m.code_fingerprint = code_fingerprint_;
  m.libtorch_version = TORCH_VERSION;
  m.created = unix_now();
  m.compile_ms = p.compile_ms;
  m.site = site;
  m.ops = static_cast<int64_t>(g.nodes().size() - g.inputs().size() - g.scalars().size());
  m.kernels = static_cast<int64_t>(p.plan.kernels.size());
  m.scalars = static_cast<int64_t>(g.scalars().size());
  m.object_bytes = p.code ? static_cast<int64_t>(p.code->object().size()) : 0;
  m.ir = g.str();
  m.plan = p.plan.str(g);
  std::string payload = lowering::program_to_bytes(p);
  // One encoding for both tiers: the remote gets the bytes the disk holds.
  std::string file = store_->encode(key.str(), formats::write_manifest(m), payload);
  if (store_->put_file(key.str(), file)) Metrics::get().add(Counter::DiskWrites);
  if (remote_) remote_->put(key.str(), file);
}

cache::DiskStore::KeyLock DiskTier::lock(const cache::CacheKey& key) {
  return store_->lock(key.str(), std::chrono::seconds(120));
}

void DiskTier::count_miss() { Metrics::get().add(Counter::DiskMisses); }

}  // namespace lazyjit::runtime
