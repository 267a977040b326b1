// The process environment, read in one place. Every layer may include it (it
// includes nothing of lazyjit): the switches users set are read through it by
// runtime::Config (runtime/config.h), which interprets and validates them;
// the test hooks (LAZYJIT_TEST_*) and the variables of other programs
// (HOME, XDG_CACHE_HOME, PATH, CUDA_HOME, TMPDIR, COLUMNS, LOCAL_RANK) are
// read through it where they are used. tests/env_reads_test.sh fails on a
// getenv or environ outside this folder.
//
// Reads are not cached: a caller that reads once keeps its own copy.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lazyjit::env {

// The variable's value; "" when unset.
std::string get(const char* name);
// The variable's value; nullopt when unset (set to "" is a value).
std::optional<std::string> find(const char* name);
// The variable as a decimal number; `fallback` when it is unset, empty or not
// a whole number (test hooks: a bad value is the default, silently).
double number(const char* name, double fallback);
// NAME=value for every variable whose name starts with `prefix`, in the
// environment's order.
std::vector<std::pair<std::string, std::string>> with_prefix(std::string_view prefix);
// Sets (overwriting) or removes a variable, for this process and the ones it
// starts (lazyjit-repro re-executes itself with a repro's switches).
void set(const char* name, const std::string& value);
void unset(const char* name);
// The environment as execve takes it (a child process inherits it as is).
char** all();

}  // namespace lazyjit::env
