#include "targets/cuda/ptxas.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "env/env.h"

namespace lazyjit::lowering::cuda {

namespace {

// A directory of its own under $TMPDIR (or /tmp), removed with what is in it.
class TempDir {
 public:
  TempDir() {
    const std::string t = env::get("TMPDIR");
    std::string tmpl = (t.empty() ? std::string("/tmp") : t) + "/lazyjit-ptxas-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw std::runtime_error("lazyjit: CUDA target: cannot make a temporary directory " + tmpl + ": " +
                               std::strerror(errno));
    path_ = buf.data();
  }
  ~TempDir() {
    for (const std::string& f : files_) ::unlink((path_ + "/" + f).c_str());
    ::rmdir(path_.c_str());
  }
  std::string file(const std::string& name) {
    files_.push_back(name);
    return path_ + "/" + name;
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("lazyjit: CUDA target: cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string();
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv with stdout and stderr into `log`; the exit status (or -signal).
int run(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), env::all());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("lazyjit: CUDA target: cannot run " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("lazyjit: CUDA target: waitpid for " + argv[0] + ": " + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string run_ptxas(const std::string& ptxas, const std::string& arch, const std::string& ptx, int opt_level,
                      const std::string& what) {
  TempDir dir;
  const std::string in = dir.file("kernel.ptx"), out = dir.file("kernel.cubin"), log = dir.file("ptxas.log");
  write_file(in, ptx);
  int o = opt_level < 0 ? 0 : opt_level > 3 ? 3 : opt_level;
  std::vector<std::string> argv{ptxas, "-arch=" + arch, "-O" + std::to_string(o), in, "-o", out};
  int rc = run(argv, log);
  if (rc != 0) {
    std::string msg = trim(read_file(log));
    if (msg.size() > 4000) msg = msg.substr(0, 4000) + "\n[...]";
    throw std::runtime_error("lazyjit: CUDA target: ptxas (" + ptxas + " -arch=" + arch + ") failed on " + what +
                             (rc < 0 ? " (killed by signal " + std::to_string(-rc) + ")"
                                     : " (exit status " + std::to_string(rc) + ")") +
                             (msg.empty() ? std::string() : ":\n" + msg));
  }
  std::string cubin = read_file(out);
  if (cubin.size() < 4 || cubin.compare(0, 4, "\x7f" "ELF") != 0)
    throw std::runtime_error("lazyjit: CUDA target: ptxas (" + ptxas + ") made no cubin for " + what);
  return cubin;
}

std::string ptxas_version(const std::string& ptxas) {
  TempDir dir;
  const std::string log = dir.file("version.log");
  int rc = run({ptxas, "--version"}, log);
  std::string text = read_file(log);
  if (rc != 0) throw std::runtime_error("lazyjit: CUDA target: " + ptxas + " --version failed: " + trim(text));
  // "Cuda compilation tools, release 13.0, V13.0.88"
  size_t v = text.rfind(", V");
  if (v == std::string::npos) return trim(text.substr(0, 60));
  size_t end = text.find_first_of("\n ", v + 3);
  return text.substr(v + 3, end == std::string::npos ? std::string::npos : end - (v + 3));
}

}  // namespace lazyjit::lowering::cuda
