#include "env/env.h"

#include <cerrno>
#include <cstdlib>

extern char** environ;

namespace lazyjit::env {

std::string get(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::optional<std::string> find(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

double number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  errno = 0;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  return errno || *end != '\0' ? fallback : d;
}

std::vector<std::pair<std::string, std::string>> with_prefix(std::string_view prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    if (entry.substr(0, prefix.size()) != prefix) continue;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) out.emplace_back(std::string(entry), std::string());
    else out.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
void unset(const char* name) { ::unsetenv(name); }

char** all() { return environ; }

}  // namespace lazyjit::env
