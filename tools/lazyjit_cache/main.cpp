// lazyjit-cache: inspect and maintain lazyjit's on-disk compile cache.
//
// Links only lazyjit_cache (no libtorch, no LLVM) so that it starts in a few
// milliseconds; the format it reads is cache/entry_file.h and
// cache/disk_store.h. Usage: docs/lazyjit-cache.md.
//
// --dir and --json go before the command or after it (git -C, kubectl -n):
// both the tool and each command declare them, and merge_globals() joins the
// two after parsing (two different --dir are an error). Any other option in
// the wrong place is reported with where it goes (misplaced_option()).
// Usage errors exit 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "env/env.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/text_format.h"

using namespace lazyjit::cache_tool;

namespace {

constexpr const char* kDirHelp = "cache directory (default: $LAZYJIT_CACHE_DIR, $XDG_CACHE_HOME/lazyjit, ~/.cache/lazyjit)";
constexpr const char* kJsonHelp = "machine-readable output (docs/lazyjit-cache.md)";

// Every subcommand takes --dir, and those with JSON output --json, so that
// they may follow the command name; the tool itself takes both too, so that
// they may come before it (Global, below).
void add_dir(CLI::App* sub, Common& c) { sub->add_option("--dir", c.dir, kDirHelp)->type_name("DIR"); }
void add_json(CLI::App* sub, Common& c) { sub->add_flag("--json", c.json, kJsonHelp); }

// --dir and --json given before the command, as `git -C DIR`, `kubectl -n NS`:
// `lazyjit-cache --dir D ls` is `lazyjit-cache ls --dir D`. They land here and
// are merged into Common after parsing (merge_globals).
struct Global {
  std::string dir;
  bool json = false;
};

std::string env_or(const char* name, const std::string& flag) {
  if (!flag.empty()) return flag;
  return lazyjit::env::get(name);
}

// A usage error: one line on stderr, exit 2 (as CLI11's own parse errors).
struct UsageError {
  std::string message;
};

// "remote push"; "" for the tool itself.
std::string path_of(const CLI::App* a) {
  std::string path;
  for (; a != nullptr && a->get_parent() != nullptr; a = a->get_parent())
    path = a->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

// Every command and group under `a`, depth first, in the order --help lists them.
void all_commands(CLI::App* a, std::vector<CLI::App*>* out) {
  for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) {
    out->push_back(sub);
    all_commands(sub, out);
  }
}

CLI::App* find_subcommand(CLI::App* a, const std::string& name) {
  for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

bool takes_value(const CLI::Option* o) { return o->get_type_size_max() > 0 && o->get_expected_max() > 0; }

// "'verify', 'import', 'remote push|pull'": commands of one group share its name.
std::string commands_text(const std::vector<CLI::App*>& cmds) {
  std::string out;
  for (size_t i = 0; i < cmds.size();) {
    const CLI::App* parent = cmds[i]->get_parent();
    std::string item = path_of(cmds[i]);
    size_t j = i + 1;
    if (parent != nullptr && parent->get_parent() != nullptr)
      for (; j < cmds.size() && cmds[j]->get_parent() == parent; ++j) item += "|" + cmds[j]->get_name();
    out += (out.empty() ? "'" : ", '") + item + "'";
    i = j;
  }
  return out;
}

// "lazyjit-cache show KEY --asm", "lazyjit-cache remote push --timeout-ms N":
// where an option goes, with the command's positionals and the option's value.
std::string example(CLI::App* cmd, const CLI::Option* opt, const std::string& name) {
  std::string s = "lazyjit-cache " + path_of(cmd);
  for (const CLI::Option* o : cmd->get_options([](CLI::Option* o) { return o->get_positional() && !o->nonpositional(); })) {
    std::string p = o->get_single_name();
    for (char& ch : p) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    s += " " + p;
  }
  s += " " + name;
  if (takes_value(opt)) {
    std::string type = opt->get_type_name();
    type = type.substr(0, type.find(':'));
    s += " " + (type == "INT" ? std::string("N") : type == "TEXT" ? std::string("VALUE") : type);
  }
  return s;
}

// After CLI11 refused the command line: the first option given where it does
// not belong, and where it goes. Empty if there is none (then CLI11's message
// stands: a bad value, a missing argument...).
std::string misplaced_option(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<CLI::App*> commands;
  all_commands(&app, &commands);
  CLI::App* level = &app;  // the command the tokens so far have named
  std::string name;        // the first misplaced option
  CLI::App* misplaced_at = nullptr;
  std::vector<CLI::App*> owners;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (tok == "--") break;
    if (tok.size() > 1 && tok[0] == '-') {
      std::string n = tok.substr(0, tok.find('='));
      bool inline_value = n.size() != tok.size();
      const CLI::Option* opt = level->get_option_no_throw(n);
      if (opt == nullptr && misplaced_at == nullptr) {
        name = n, misplaced_at = level;
        for (CLI::App* cmd : commands)
          if (const CLI::Option* o = cmd->get_option_no_throw(n); o && cmd->get_subcommands([](CLI::App*) { return true; }).empty())
            owners.push_back(cmd), opt = opt ? opt : o;
      }
      if (opt != nullptr && !inline_value && takes_value(opt)) ++i;  // its value
      continue;
    }
    if (CLI::App* sub = find_subcommand(level, tok)) level = sub;
  }
  if (misplaced_at == nullptr) return "";
  std::string where = path_of(misplaced_at);
  // The command the user named, if it takes the option, for the example.
  CLI::App* named = level;
  CLI::App* target = owners.empty() ? nullptr : owners.front();
  for (CLI::App* o : owners)
    if (o == named) target = o;
  if (name == "--json" && !where.empty() && misplaced_at->get_subcommands([](CLI::App*) { return true; }).empty())
    return "'" + where + "' has no JSON output (--json applies to " + commands_text(owners) + ")";
  if (app.get_option_no_throw(name) != nullptr && name != "-h" && name != "--help") {
    // --dir or --json between a group and its command (remote --dir D push).
    std::string cmd = target ? path_of(target) : where + " COMMAND";
    const CLI::Option* global = app.get_option_no_throw(name);
    std::string opt = name + (takes_value(global) ? " " + global->get_type_name() : "");
    return name + " goes before or after the command, not between '" + where + "' and its command: lazyjit-cache " +
           opt + " " + cmd + ", or lazyjit-cache " + cmd + " " + opt;
  }
  if (owners.empty()) {
    if (where.empty())
      return "unknown option " + name + "; before the command only --dir and --json are accepted (lazyjit-cache --help)";
    return "unknown option " + name + " for '" + where + "' (lazyjit-cache " + where + " --help lists its options)";
  }
  std::string belongs = commands_text(owners);
  std::string how = example(target, target->get_option_no_throw(name), name);
  if (where.empty()) return name + " belongs to " + belongs + ", after the command: " + how;
  return name + " is not an option of '" + where + "'; it belongs to " + belongs + ": " + how;
}

// The deepest command parsed: `remote push` rather than `remote`.
CLI::App* parsed_command(CLI::App& app) {
  CLI::App* a = &app;
  while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
  return a;
}

// --dir and --json before the command join those after it. The same --dir in
// both places is fine; two different ones are an error rather than one
// silently winning. --json before a command that has no JSON output is an
// error too, as it is after it.
void merge_globals(CLI::App& app, const Global& g, Common& c) {
  CLI::App* cmd = parsed_command(app);
  std::string path = path_of(cmd);
  if (!g.dir.empty()) {
    if (!c.dir.empty() && c.dir != g.dir)
      throw UsageError{"--dir given twice with different values: " + g.dir + " before '" + path + "', " + c.dir +
                       " after it; give it once"};
    c.dir = g.dir;
  }
  if (g.json) {
    if (cmd->get_option_no_throw("--json") == nullptr) {
      std::vector<CLI::App*> commands, with_json;
      all_commands(&app, &commands);
      for (CLI::App* x : commands)
        if (x->get_option_no_throw("--json")) with_json.push_back(x);
      throw UsageError{"'" + path + "' has no JSON output (--json applies to " + commands_text(with_json) + ")"};
    }
    c.json = true;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lazyjit-cache: inspect and maintain lazyjit's on-disk compile cache"};
  app.require_subcommand(1);
  Common c;
  Global g;
  app.add_option("--dir", g.dir, kDirHelp)->type_name("DIR");
  app.add_flag("--json", g.json, kJsonHelp);
  app.footer(
      "--dir and --json go before or after the command: `lazyjit-cache --dir D ls --json` is\n"
      "`lazyjit-cache ls --dir D --json`. The same --dir in both places is fine, two different\n"
      "ones are an error. Every other option follows its command (lazyjit-cache COMMAND --help).\n"
      "Usage errors exit 2. docs/lazyjit-cache.md");

  LsOptions ls;
  auto* ls_cmd = app.add_subcommand("ls", "list the entries");
  ls_cmd->add_option("--sort", ls.sort, "key, created, last_used, hits, compile_ms, size, ops or site")
      ->type_name("F")
      ->check(CLI::IsMember({"key", "created", "last_used", "hits", "compile_ms", "size", "ops", "site"}));
  ls_cmd->add_flag("--reverse", ls.reverse, "reverse the order (numbers sort largest first by default)");
  ls_cmd->add_option("--filter", ls.filter, "only entries whose key or call site contains this")->type_name("S");
  ls_cmd->add_option("--limit", ls.limit, "at most N entries")->type_name("N");

  ShowOptions show;
  auto* show_cmd = app.add_subcommand("show", "one entry: manifest, IR, plan");
  show_cmd->add_option("key", show.key, "key, unique prefix or short key")->required();
  show_cmd->add_flag("--llvm", show.llvm, "the LLVM IR (from a LAZYJIT_DUMP directory: entries do not store it)");
  show_cmd->add_flag("--asm", show.asm_, "disassemble the object code (llvm-objdump; CUDA entries: PTX, and SASS by nvdisasm)");
  show_cmd->add_option("--dump-dir", show.dump_dir, "LAZYJIT_DUMP directory for --llvm (default: $LAZYJIT_DUMP)")->type_name("D");

  int top = 10;
  auto* stats_cmd = app.add_subcommand("stats", "totals, hit ratio, time saved, top call sites");
  stats_cmd->add_option("--top", top, "call sites to list")->type_name("N");

  std::string key1, key2;
  auto* explain_cmd = app.add_subcommand("explain", "why two entries are different entries");
  explain_cmd->add_option("key1", key1)->required();
  explain_cmd->add_option("key2", key2)->required();

  VerifyOptions verify;
  auto* verify_cmd = app.add_subcommand("verify", "check every checksum and signature; exit 1 if any is bad");
  verify_cmd->add_option("--secret", verify.secret, "HMAC secret (default: $LAZYJIT_CACHE_SECRET)")->type_name("S");
  verify_cmd->add_flag("--quarantine", verify.quarantine, "move bad entries to quarantine/");

  PruneOptions prune;
  auto* prune_cmd = app.add_subcommand("prune", "remove least recently used or old entries");
  prune_cmd->add_option("--max-size", prune.max_size, "keep the most recently used entries within N bytes (500M, 2G)")->type_name("N");
  prune_cmd->add_option("--older-than", prune.older_than, "remove entries unused for D (30d, 12h, 90m)")->type_name("D");
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
  import_cmd->add_option("--secret", import.secret, "check and sign with this secret (default: $LAZYJIT_CACHE_SECRET)")->type_name("S");
  import_cmd->add_option("--expect-fingerprint", import.expect_fingerprint,
                         "accept only entries with exactly this code_fingerprint")->type_name("FP");
  import_cmd->add_flag("--allow-foreign", import.allow_foreign, "accept entries built for another CPU or compiler");

  std::string html;
  auto* report_cmd = app.add_subcommand("report", "one self-contained HTML page");
  report_cmd->add_option("--html", html, "output file")->type_name("FILE")->required();

  RemoteOptions remote;
  auto* remote_cmd = app.add_subcommand("remote", "the remote tier on Redis (LAZYJIT_REMOTE_CACHE): ls, push, pull");
  remote_cmd->require_subcommand(1);
  auto* remote_ls = remote_cmd->add_subcommand("ls", "list the remote's entries: size, key, target (no payload read)");
  auto* remote_push = remote_cmd->add_subcommand("push", "send local entries signed with the secret to the remote");
  auto* remote_pull = remote_cmd->add_subcommand("pull", "fetch, verify and add the remote's entries to the local cache");
  for (auto* sub : {remote_ls, remote_push, remote_pull}) {
    sub->add_option("--remote", remote.remote, "redis://host:port/db (default: $LAZYJIT_REMOTE_CACHE)")->type_name("URL");
    sub->add_option("--timeout-ms", remote.timeout_ms, "the most each remote call or listing page may take (default 2000); raise it for large entries on a slow link")
        ->type_name("N");
    add_dir(sub, c);
    add_json(sub, c);
  }
  for (auto* sub : {remote_push, remote_pull}) {
    sub->add_option("--secret", remote.secret, "HMAC secret (default: $LAZYJIT_CACHE_SECRET)")->type_name("S");
    sub->add_option("--max-entry-bytes", remote.max_entry_bytes,
                    "larger entries are refused (default: $LAZYJIT_REMOTE_MAX_ENTRY_BYTES, else 64M)")
        ->type_name("N");
    sub->add_flag("--force", remote.force, "also entries the other side has already");
  }
  remote_pull->add_option("--expect-fingerprint", remote.expect_fingerprint,
                          "accept only entries with exactly this code_fingerprint")->type_name("FP");
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
    merge_globals(app, g, c);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = misplaced_option(app, std::vector<std::string>(argv + 1, argv + argc));
    if (where.empty()) {
      app.exit(e);
    } else {
      std::fprintf(stderr, "lazyjit-cache: %s\n", where.c_str());
    }
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "lazyjit-cache: %s\n", e.message.c_str());
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
  } catch (const ToolError& e) {  // may name keys and fields from disk: printed escaped
    std::fprintf(stderr, "%s\n", printable_text(e.what()).c_str());
    return e.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lazyjit-cache: %s\n", printable_text(e.what()).c_str());
    return 2;
  }
  return 2;
}
