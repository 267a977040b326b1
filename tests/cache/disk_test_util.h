// Helpers for the disk store tests: a private temporary directory, raw file
// access to entries, and forked child processes.
#pragma once
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cache/disk_store.h"

namespace lazyjit::cache::testing {

// A fresh mode-0700 directory, removed (permissions restored first) at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/lazyjit_disk_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec)) ::chmod(it->path().c_str(), 0700);
    ::chmod(path_.c_str(), 0700);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string cache() const { return path_ + "/cache"; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  return names;
}

// Runs `body` in a forked child; its return value is the exit status. Nothing
// in the child may use gtest assertions: the parent checks the status.
inline pid_t spawn(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 98;
    try {
      rc = body();
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  return pid;
}

// Exit status of a child, or 128 + signal if it was killed.
inline int wait_for(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// A store on `dir` that records every error it reports.
struct RecordingStore {
  std::unique_ptr<DiskStore> store;
  std::vector<std::pair<DiskError, std::string>> errors;
  std::string warning;

  explicit RecordingStore(DiskStoreOptions options) {
    store = DiskStore::open(options, &warning);
    if (store) store->on_error = [this](DiskError k, DiskOp, const std::string& m) { errors.emplace_back(k, m); };
  }
  RecordingStore(RecordingStore&&) = delete;  // on_error points at `errors`
  DiskStore* operator->() { return store.get(); }
  std::string entry(const std::string& key) const { return store->root() + "/entries/" + key + ".ljc"; }
};

}  // namespace lazyjit::cache::testing
