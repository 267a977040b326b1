// Where the on-disk compile cache lives when no directory is given: the one
// rule, read by the runtime (runtime::Config, LAZYJIT_CACHE_DIR) and by
// lazyjit-cache (tools/lazyjit_cache/cache_index.cpp) alike.
#pragma once
#include <functional>
#include <string>

namespace lazyjit::cache {

struct CacheDirChoice {
  std::string dir;     // "" when none can be worked out (no HOME)
  std::string source;  // where it came from: "$LAZYJIT_CACHE_DIR", "$XDG_CACHE_HOME/lazyjit", "~/.cache/lazyjit"
};

// $LAZYJIT_CACHE_DIR, else $XDG_CACHE_HOME/lazyjit, else ~/.cache/lazyjit (an
// empty variable counts as unset). `env(name)` is the variable's value, ""
// when unset.
inline CacheDirChoice default_cache_dir(const std::function<std::string(const char*)>& env) {
  if (std::string d = env("LAZYJIT_CACHE_DIR"); !d.empty()) return {d, "$LAZYJIT_CACHE_DIR"};
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return {x + "/lazyjit", "$XDG_CACHE_HOME/lazyjit"};
  if (std::string h = env("HOME"); !h.empty()) return {h + "/.cache/lazyjit", "~/.cache/lazyjit"};
  return {};
}

}  // namespace lazyjit::cache
