// The tiers a sync that missed the memory cache goes through. Runtime::resolve
// (runtime/pipeline.cpp, where the map is) walks them in the order its list
// names them; each try_resolve() returns what it resolved (a program, or "run
// op by op") and how, or nothing: the next tier's turn. The last one always
// resolves. Calls go one way: a tier asks the stores below it (the disk and
// remote tiers, the shape binder, the background worker, the memory cache) and
// the compiler; none of them calls back into a tier or into the pipeline.
//
// Defined in sync_tiers.cpp; the policy tier in recompile_policy.cpp.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_key.h"
#include "cache/compile_cache.h"
#include "executor/executable.h"
#include "graph_ir/graph.h"
#include "lowering/program.h"
#include "lowering/shapes.h"
#include "runtime/config.h"
#include "runtime/recompile_explainer.h"
#include "runtime/sync_log.h"

namespace lazyjit::runtime {

class BackgroundCompiles;
class Compiler;
class DiskTier;
class RecompilePolicy;
class ShapeBinder;

// One sync's request, as every tier sees it.
struct SyncRequest {
  const ir::Graph& graph;
  const std::string& site;
  std::optional<lowering::Shapes> shapes;
  const NodeSites& node_sites;
  cache::CacheKey key;
  bool generic = false;      // shape-generic code: may bind to another size's program
  bool background = false;   // a miss may compile on the worker while the sync runs op by op
  bool checked = false;      // NaN checks on: kernels test their stores (another key)
  bool may_compile = true;   // false in a strict region (lazyjit.strict(), NoCompileScope)
  // What the first tier saw of the background worker, for the later ones.
  bool background_pending = false;  // a compile of this structure is queued or running
  bool background_failed = false;   // the one that finished for this key threw
};

// What resolved a sync that missed the memory cache: a program, or (null) "run
// op by op", and how, for the sync log.
struct Resolved {
  std::shared_ptr<const lowering::Program> program;
  SyncNote note;
  bool explained = false;  // a recompile explanation was recorded (and traced) for it
  bool miss = true;        // counted as a cache miss (a program taken or loaded is not one)
};
// No program: the sync runs op by op, nothing cached.
Resolved op_by_op(SyncNote::How how, std::string why = {});

class Tier {
 public:
  virtual ~Tier() = default;
  // The tier's name as the map in pipeline.cpp writes it ("sibling on disk").
  virtual std::string_view name() const = 0;
  // Resolves the sync, or nullopt: the next tier's turn. May note what it saw
  // in `s` (background_pending, background_failed) for the tiers after it.
  virtual std::optional<Resolved> try_resolve(SyncRequest& s) = 0;
};

// What the tiers ask: the Runtime's parts, which outlive the tiers.
struct TierParts {
  const Config& config;
  cache::CompileCache<executor::Executable>& memory;
  executor::ExecutionTarget execution;
  ShapeBinder& binder;
  DiskTier* disk;                  // null when the on-disk cache is off
  BackgroundCompiles* background;  // null with LAZYJIT_BACKGROUND_COMPILE=off
  const Compiler& compiler;
  RecompilePolicy& policy;
};

// A tier that asks the runtime's parts.
class PartsTier : public Tier {
 public:
  explicit PartsTier(const TierParts& p) : p_(p) {}

 protected:
  TierParts p_;
};

// 1. A program a background compile finished for this key: taken, not a miss.
class BackgroundResult final : public PartsTier {
 public:
  using PartsTier::PartsTier;
  std::string_view name() const override { return "background result"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;
};

// 2. New sizes of a structure compiled before: bound, no compile.
class Bind final : public PartsTier {
 public:
  using PartsTier::PartsTier;
  std::string_view name() const override { return "bind"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;
};

// 3. Its structure still compiling in the background: op by op, not a miss.
class Pending final : public Tier {
 public:
  std::string_view name() const override { return "pending"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;
};

// 4. A new process: the program another size of this structure left on disk, bound.
class SiblingOnDisk final : public PartsTier {
 public:
  explicit SiblingOnDisk(const TierParts& p) : PartsTier(p), bind_(p) {}
  std::string_view name() const override { return "sibling on disk"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;

 private:
  Bind bind_;
};

// 5. A strict region refuses; past the recompile limit with
// LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op: op by op (recompile_policy.cpp).
class Policy final : public PartsTier {
 public:
  using PartsTier::PartsTier;
  std::string_view name() const override { return "policy"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;
};

// 6. Stored on disk: loaded; else queued on the compile worker, and this sync
// runs op by op. Not for a sync that may not compile in the background, nor
// when the compile that finished for its key failed (it compiles in 7, to fail
// where the user sees it).
class BackgroundStart final : public PartsTier {
 public:
  using PartsTier::PartsTier;
  std::string_view name() const override { return "background start"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;
};

// 7. Under the key's file lock: the disk entry, else the remote one, else a
// compile (written to both). Always resolves.
class DiskRemoteCompile final : public PartsTier {
 public:
  using PartsTier::PartsTier;
  std::string_view name() const override { return "disk, remote, compile"; }
  std::optional<Resolved> try_resolve(SyncRequest& s) override;
};

}  // namespace lazyjit::runtime
