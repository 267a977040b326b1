// lazyjit-cache: inspect and maintain lazyjit's on-disk compile cache.
//
// Links only lazyjit_cache (no libtorch, no LLVM) so that it starts in a few
// milliseconds; the format it reads is cache/entry_file.h and
// cache/disk_store.h. Usage: docs/lazyjit-cache.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"

using namespace lazyjit::cache_tool;

namespace {

// Every subcommand takes --dir, so that it may follow the command name.
void add_dir(CLI::App* sub, Common& c) {
  sub->add_option("--dir", c.dir, "cache directory (default: $LAZYJIT_CACHE_DIR, $XDG_CACHE_HOME/lazyjit, ~/.cache/lazyjit)");
}
void add_json(CLI::App* sub, Common& c) { sub->add_flag("--json", c.json, "machine-readable output (docs/lazyjit-cache.md)"); }

std::string env_or(const char* name, const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lazyjit-cache: inspect and maintain lazyjit's on-disk compile cache"};
  app.require_subcommand(1);
  Common c;

  LsOptions ls;
  auto* ls_cmd = app.add_subcommand("ls", "list the entries");
  ls_cmd->add_option("--sort", ls.sort, "key, created, last_used, hits, compile_ms, size, ops or site")
      ->check(CLI::IsMember({"key", "created", "last_used", "hits", "compile_ms", "size", "ops", "site"}));
  ls_cmd->add_flag("--reverse", ls.reverse, "reverse the order (numbers sort largest first by default)");
  ls_cmd->add_option("--filter", ls.filter, "only entries whose key or call site contains this");
  ls_cmd->add_option("--limit", ls.limit, "at most N entries");

  ShowOptions show;
  auto* show_cmd = app.add_subcommand("show", "one entry: manifest, IR, plan");
  show_cmd->add_option("key", show.key, "key, unique prefix or short key")->required();
  show_cmd->add_flag("--llvm", show.llvm, "the LLVM IR (from a LAZYJIT_DUMP directory: entries do not store it)");
  show_cmd->add_flag("--asm", show.asm_, "disassemble the object code (llvm-objdump)");
  show_cmd->add_option("--dump-dir", show.dump_dir, "LAZYJIT_DUMP directory for --llvm (default: $LAZYJIT_DUMP)");

  int top = 10;
  auto* stats_cmd = app.add_subcommand("stats", "totals, hit ratio, time saved, top call sites");
  stats_cmd->add_option("--top", top, "call sites to list");

  std::string key1, key2;
  auto* explain_cmd = app.add_subcommand("explain", "why two entries are different entries");
  explain_cmd->add_option("key1", key1)->required();
  explain_cmd->add_option("key2", key2)->required();

  VerifyOptions verify;
  auto* verify_cmd = app.add_subcommand("verify", "check every checksum and signature; exit 1 if any is bad");
  verify_cmd->add_option("--secret", verify.secret, "HMAC secret (default: $LAZYJIT_CACHE_SECRET)");
  verify_cmd->add_flag("--quarantine", verify.quarantine, "move bad entries to quarantine/");

  PruneOptions prune;
  auto* prune_cmd = app.add_subcommand("prune", "remove least recently used or old entries");
  prune_cmd->add_option("--max-size", prune.max_size, "keep the most recently used entries within N bytes (500M, 2G)");
  prune_cmd->add_option("--older-than", prune.older_than, "remove entries unused for D (30d, 12h, 90m)");
  prune_cmd->add_flag("--dry-run", prune.dry_run, "say what would be removed, remove nothing");

  std::string rm_key;
  auto* rm_cmd = app.add_subcommand("rm", "remove one entry");
  rm_cmd->add_option("key", rm_key)->required();

  bool yes = false;
  auto* clear_cmd = app.add_subcommand("clear", "remove every entry and the quarantine");
  clear_cmd->add_flag("--yes,-y", yes, "do it (without it, clear only says what it would remove)");

  std::string export_file;
  auto* export_cmd = app.add_subcommand("export", "write every entry into one archive");
  export_cmd->add_option("file", export_file)->required();

  ImportOptions import;
  auto* import_cmd = app.add_subcommand("import", "verify and add an archive's entries");
  import_cmd->add_option("file", import.file)->required();
  import_cmd->add_option("--secret", import.secret, "check and sign with this secret (default: $LAZYJIT_CACHE_SECRET)");
  import_cmd->add_option("--expect-fingerprint", import.expect_fingerprint,
                         "accept only entries with exactly this code_fingerprint");
  import_cmd->add_flag("--allow-foreign", import.allow_foreign, "accept entries built for another CPU or compiler");

  std::string html;
  auto* report_cmd = app.add_subcommand("report", "one self-contained HTML page");
  report_cmd->add_option("--html", html, "output file")->required();

  RemoteOptions remote;
  auto* remote_cmd = app.add_subcommand("remote", "the remote tier on Redis (LAZYJIT_REMOTE_CACHE): ls, push, pull");
  remote_cmd->require_subcommand(1);
  auto* remote_ls = remote_cmd->add_subcommand("ls", "list the remote's entries: size, key, target (no payload read)");
  auto* remote_push = remote_cmd->add_subcommand("push", "send local entries signed with the secret to the remote");
  auto* remote_pull = remote_cmd->add_subcommand("pull", "fetch, verify and add the remote's entries to the local cache");
  for (auto* sub : {remote_ls, remote_push, remote_pull}) {
    sub->add_option("--remote", remote.remote, "redis://host:port/db (default: $LAZYJIT_REMOTE_CACHE)");
    sub->add_option("--timeout-ms", remote.timeout_ms, "the most each remote call or listing page may take (default 2000); raise it for large entries on a slow link");
    add_dir(sub, c);
    add_json(sub, c);
  }
  for (auto* sub : {remote_push, remote_pull}) {
    sub->add_option("--secret", remote.secret, "HMAC secret (default: $LAZYJIT_CACHE_SECRET)");
    sub->add_option("--max-entry-bytes", remote.max_entry_bytes,
                    "larger entries are refused (default: $LAZYJIT_REMOTE_MAX_ENTRY_BYTES, else 64M)");
    sub->add_flag("--force", remote.force, "also entries the other side has already");
  }
  remote_pull->add_option("--expect-fingerprint", remote.expect_fingerprint,
                          "accept only entries with exactly this code_fingerprint");
  remote_pull->add_flag("--allow-foreign", remote.allow_foreign, "accept entries built for another CPU or compiler");

  std::string log_file;
  auto* why_cmd = app.add_subcommand("why-miss", "summarize a LAZYJIT_LOG=recompiles log by call site");
  why_cmd->add_option("log", log_file, "the log (a run's stderr)")->required();

  for (auto* sub : app.get_subcommands({}))
    if (sub != remote_cmd) add_dir(sub, c);
  for (auto* sub : {ls_cmd, show_cmd, stats_cmd, explain_cmd, verify_cmd, prune_cmd, import_cmd, why_cmd})
    add_json(sub, c);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    if (ls_cmd->parsed()) return cmd_ls(c, ls);
    if (show_cmd->parsed()) return cmd_show(c, show);
    if (stats_cmd->parsed()) return cmd_stats(c, top);
    if (explain_cmd->parsed()) return cmd_explain(c, key1, key2);
    if (verify_cmd->parsed()) {
      verify.secret = env_or("LAZYJIT_CACHE_SECRET", verify.secret);
      return cmd_verify(c, verify);
    }
    if (prune_cmd->parsed()) return cmd_prune(c, prune);
    if (rm_cmd->parsed()) return cmd_rm(c, rm_key);
    if (clear_cmd->parsed()) return cmd_clear(c, yes);
    if (export_cmd->parsed()) return cmd_export(c, export_file);
    if (import_cmd->parsed()) {
      import.secret = env_or("LAZYJIT_CACHE_SECRET", import.secret);
      return cmd_import(c, import);
    }
    if (report_cmd->parsed()) return cmd_report(c, html);
    if (why_cmd->parsed()) return cmd_why_miss(c, log_file);
    if (remote_cmd->parsed()) {
      remote.remote = env_or("LAZYJIT_REMOTE_CACHE", remote.remote);
      remote.secret = env_or("LAZYJIT_CACHE_SECRET", remote.secret);
      remote.max_entry_bytes = env_or("LAZYJIT_REMOTE_MAX_ENTRY_BYTES", remote.max_entry_bytes);
      if (remote_ls->parsed()) return cmd_remote_ls(c, remote);
      if (remote_push->parsed()) return cmd_remote_push(c, remote);
      if (remote_pull->parsed()) return cmd_remote_pull(c, remote);
    }
  } catch (const ToolError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lazyjit-cache: %s\n", e.what());
    return 2;
  }
  return 2;
}
