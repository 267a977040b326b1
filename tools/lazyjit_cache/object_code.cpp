#include "tools/lazyjit_cache/object_code.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <variant>

#include "cache/entry_file.h"
#include "targets/cuda/kernel_archive.h"
#include "formats/program_bytes.h"
#include "graph_ir/bytes.h"

namespace lazyjit::cache_tool {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_capture(const std::string& command, int* status) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

ObjectCode object_code(const std::string& file, const std::string& key, const nlohmann::json& manifest) {
  ObjectCode out;
  auto decoded = cache::entry_file::decode(file, "", key);
  if (auto* err = std::get_if<cache::entry_file::DecodeError>(&decoded)) {
    out.error = "entry is damaged: " + err->message;
    return out;
  }
  std::string_view payload = std::get<cache::entry_file::Decoded>(decoded).payload;
  uint64_t n = manifest.value("object_bytes", uint64_t{0});
  try {
    out.bytes.assign(formats::program_tail_from_end(payload, n).object);
  } catch (const formats::ProgramBytesError& e) {
    std::string what = e.what();
    if (what.rfind("lazyjit: ", 0) == 0) what.erase(0, 9);
    out.error = "payload does not end with an object of object_bytes=" + std::to_string(n) + " bytes: " + what;
    return out;
  }
  if (out.bytes.empty()) return out;
  const std::string tag = out.bytes.substr(0, 4);
  if (tag == formats::kCudaArchiveTag || tag == formats::kSimArchiveTag) {
    // The targets' own reader (every length and field checked), any version
    // this tool can show.
    auto head = [](const formats::UnitHead& h) {
      ObjectCode::Unit u;
      u.symbol = h.symbol;
      u.generic = h.generic;
      u.grid = h.launch.grid == formats::KernelLaunch::Grid::Rows ? "rows" : "elements";
      u.block = h.launch.block;
      u.shared_bytes = h.launch.shared_bytes;
      u.elements_per_thread = h.launch.elements_per_thread;
      u.rows_per_block = h.launch.rows_per_block;
      return u;
    };
    try {
      if (tag == formats::kCudaArchiveTag) {
        out.format = ObjectCode::Format::Cuda;
        formats::CudaArchive a = formats::read_cuda_archive(out.bytes, /*oldest_version=*/1);
        out.arch = std::move(a.arch);
        out.ptx_isa = a.ptx_isa;
        for (formats::CudaUnit& cu : a.units) {
          ObjectCode::Unit& u = out.units.emplace_back(head(cu));
          u.ptx = std::move(cu.ptx);
          u.cubin = std::move(cu.cubin);
        }
        out.kernel_units = std::move(a.kernel_units);
      } else {
        out.format = ObjectCode::Format::CudaSim;
        formats::SimArchive a = formats::read_sim_archive(out.bytes);
        for (formats::SimUnit& su : a.units) out.units.emplace_back(head(su)).object = std::move(su.object);
        out.kernel_units = std::move(a.kernel_units);
      }
    } catch (const formats::ArchiveError& e) {
      std::string what = e.what();
      if (what.rfind("lazyjit: ", 0) == 0) what.erase(0, 9);
      out.error = what;
    }
    return out;
  }
  if (tag == "LJKO") out.format = ObjectCode::Format::Cpu;
  try {
    ir::ByteReader r(out.bytes);
    r.expect_header("LJKO", 1, "kernel objects");
    uint32_t units = r.u32();
    for (uint32_t u = 0; u < units; ++u) {
      r.u64();
      r.u64();
      ObjectCode::Unit unit;
      unit.generic = r.u8() != 0;
      unit.symbol = r.str();
      unit.object = r.str();
      out.units.push_back(std::move(unit));
    }
    out.kernel_units = r.u32s();
    r.expect_end("kernel objects");
  } catch (const std::exception& e) {
    out.error = std::string("object code is not a kernel archive: ") + e.what();
  }
  return out;
}

std::string disassemble(const std::string& object, std::string* note) {
  int status = 0;
  std::string tool = run_capture("command -v llvm-objdump-19 || command -v llvm-objdump || command -v objdump", &status);
  while (!tool.empty() && (tool.back() == '\n' || tool.back() == '\r')) tool.pop_back();
  if (size_t nl = tool.find('\n'); nl != std::string::npos) tool.resize(nl);
  if (tool.empty()) {
    *note = "no disassembler found (install llvm-19 for llvm-objdump-19); object code is " +
            std::to_string(object.size()) + " bytes";
    return "";
  }
  char path[] = "/tmp/lazyjit-cache-obj.XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0 || ::write(fd, object.data(), object.size()) != (ssize_t)object.size()) {
    if (fd >= 0) ::close(fd), ::unlink(path);
    *note = "cannot write a temporary file for the disassembler";
    return "";
  }
  ::close(fd);
  std::string text = run_capture(tool + " -d --no-show-raw-insn " + shell_quote(path) + " 2>&1", &status);
  ::unlink(path);
  if (status != 0) {
    *note = tool + " failed: " + text;
    return "";
  }
  // Drop objdump's "file format" preamble naming our temporary file.
  if (size_t at = text.find("Disassembly of section"); at != std::string::npos) text.erase(0, at);
  return text;
}

}  // namespace lazyjit::cache_tool
