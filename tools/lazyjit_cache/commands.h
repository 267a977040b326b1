// The commands of lazyjit-cache, one function each, called by main.cpp after
// CLI11 has parsed the flags. Each returns the process exit code (0 fine; 1
// verify found bad entries or import refused some; 2 usage or directory
// errors, usually thrown as ToolError) and writes its result to stdout,
// progress to stderr. The --json schemas are documented in docs/lazyjit-cache.md.
#pragma once
#include <cstdint>
#include <string>

namespace lazyjit::cache_tool {

struct Common {
  std::string dir;  // --dir, before or after the command (main.cpp); empty: the runtime's default
  bool json = false;  // --json, likewise; only commands with JSON output accept it
};

struct LsOptions {
  std::string sort = "created";  // any column name: key, created, last_used, hits, compile_ms, size, ops, site
  std::string filter;            // substring of key or site
  int limit = 0;                 // 0: all
  bool reverse = false;
};
int cmd_ls(const Common& c, const LsOptions& o);

struct ShowOptions {
  std::string key;
  bool llvm = false;  // the LLVM IR, from $LAZYJIT_DUMP/<key>.ll or --dump-dir: entries do not hold it
  bool asm_ = false;  // disassemble the entry's object code
  std::string dump_dir;
};
int cmd_show(const Common& c, const ShowOptions& o);

int cmd_stats(const Common& c, int top);

int cmd_explain(const Common& c, const std::string& key1, const std::string& key2);

struct VerifyOptions {
  std::string secret;  // --secret, else $LAZYJIT_CACHE_SECRET
  bool quarantine = false;
};
int cmd_verify(const Common& c, const VerifyOptions& o);

struct PruneOptions {
  std::string max_size;    // keep the most recently used entries within this many bytes
  std::string older_than;  // remove entries not used for this long
  bool dry_run = false;
};
int cmd_prune(const Common& c, const PruneOptions& o);
int cmd_rm(const Common& c, const std::string& key);
int cmd_clear(const Common& c, bool yes);

int cmd_export(const Common& c, const std::string& file);
struct ImportOptions {
  std::string file;
  std::string secret;                // entries are checked, and re-signed, with it
  std::string expect_fingerprint;    // exact code_fingerprint to accept
  bool allow_foreign = false;
};
int cmd_import(const Common& c, const ImportOptions& o);

// remote ls / push / pull: the remote tier on Redis (runtime/remote_tier.h).
struct RemoteOptions {
  std::string remote;           // --remote, else $LAZYJIT_REMOTE_CACHE
  std::string secret;           // --secret, else $LAZYJIT_CACHE_SECRET; push and pull need one
  int timeout_ms = 2000;        // connect and each reply (the tool waits longer than a training step would)
  std::string max_entry_bytes;  // --max-entry-bytes, else $LAZYJIT_REMOTE_MAX_ENTRY_BYTES, else 64M
  bool force = false;           // push/pull entries the other side has too
  std::string expect_fingerprint;  // pull: accept only this code_fingerprint
  bool allow_foreign = false;      // pull: accept entries built for another CPU
};
int cmd_remote_ls(const Common& c, const RemoteOptions& o);
int cmd_remote_push(const Common& c, const RemoteOptions& o);
int cmd_remote_pull(const Common& c, const RemoteOptions& o);

int cmd_report(const Common& c, const std::string& html_file);

// A LAZYJIT_LOG=recompiles log summarized per call site.
int cmd_why_miss(const Common& c, const std::string& log_file);

}  // namespace lazyjit::cache_tool
