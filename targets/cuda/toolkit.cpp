#include "targets/cuda/toolkit.h"

#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "env/env.h"

namespace lazyjit::lowering::cuda {

namespace {

#ifndef LAZYJIT_DEFAULT_LIBDEVICE
#define LAZYJIT_DEFAULT_LIBDEVICE ""
#endif
#ifndef LAZYJIT_DEFAULT_PTXAS
#define LAZYJIT_DEFAULT_PTXAS ""
#endif

bool is_file(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_executable(const std::string& p) { return is_file(p) && ::access(p.c_str(), X_OK) == 0; }

}  // namespace

std::string join_places(const std::vector<std::string>& places) {
  std::string s;
  for (const std::string& p : places) s += (s.empty() ? "" : ", ") + p;
  return s;
}

std::string find_libdevice(const CudaOptions& o) {
  if (!o.libdevice.empty()) {
    if (is_file(o.libdevice)) return o.libdevice;
    throw std::runtime_error("lazyjit: CudaOptions::libdevice " + o.libdevice + " is not a file");
  }
  if (std::string e = env::get("LAZYJIT_LIBDEVICE"); !e.empty()) {
    if (is_file(e)) return e;
    throw std::runtime_error("lazyjit: LAZYJIT_LIBDEVICE=" + e + " is not a file");
  }
  std::vector<std::string> looked;
  const std::string rel = "/nvvm/libdevice/libdevice.10.bc";
  if (std::string home = env::get("CUDA_HOME"); !home.empty()) looked.push_back(home + rel);
  else looked.push_back("$CUDA_HOME" + rel + " (CUDA_HOME unset)");
  looked.push_back("/usr/local/cuda" + rel);
  if (*LAZYJIT_DEFAULT_LIBDEVICE) looked.push_back(LAZYJIT_DEFAULT_LIBDEVICE);
  else looked.push_back("the nvidia-nvvm wheel (none found in .venv when lazyjit was configured)");
  for (const std::string& p : looked)
    if (is_file(p)) return p;
  throw std::runtime_error(
      "lazyjit: CUDA target: libdevice.10.bc not found; looked in CudaOptions::libdevice (empty), "
      "LAZYJIT_LIBDEVICE (unset), " + join_places(looked) +
      ". Install the nvidia-nvvm wheel (scripts/setup.sh) or set LAZYJIT_LIBDEVICE");
}

std::string find_ptxas(const CudaOptions& o, std::string* looked_out) {
  if (!o.ptxas.empty()) {
    if (is_executable(o.ptxas)) return o.ptxas;
    throw std::runtime_error("lazyjit: CudaOptions::ptxas " + o.ptxas + " is not an executable file");
  }
  if (std::string e = env::get("LAZYJIT_PTXAS"); !e.empty()) {
    if (is_executable(e)) return e;
    throw std::runtime_error("lazyjit: LAZYJIT_PTXAS=" + e + " is not an executable file");
  }
  std::vector<std::string> looked{"CudaOptions::ptxas (empty)", "LAZYJIT_PTXAS (unset)"};
  std::vector<std::string> candidates;
  std::string path = env::get("PATH");
  size_t dirs = 0;
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (!dir.empty()) {
      candidates.push_back(dir + "/ptxas");
      ++dirs;
    }
    start = end + 1;
  }
  looked.push_back("ptxas on PATH (" + std::to_string(dirs) + " directories)");
  std::vector<std::string> rest;
  if (std::string home = env::get("CUDA_HOME"); !home.empty()) rest.push_back(home + "/bin/ptxas");
  else looked.push_back("$CUDA_HOME/bin/ptxas (CUDA_HOME unset)");
  rest.push_back("/usr/local/cuda/bin/ptxas");
  if (*LAZYJIT_DEFAULT_PTXAS) rest.push_back(LAZYJIT_DEFAULT_PTXAS);
  for (const std::string& p : rest) {
    candidates.push_back(p);
    looked.push_back(p);
  }
  if (!*LAZYJIT_DEFAULT_PTXAS)
    looked.push_back("the nvidia-cuda-nvcc wheel (none found in .venv when lazyjit was configured)");
  for (const std::string& p : candidates)
    if (is_executable(p)) return p;
  if (looked_out) *looked_out = join_places(looked);
  return std::string();
}

}  // namespace lazyjit::lowering::cuda
