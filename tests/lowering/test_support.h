// What the lowering tests share: the CPU target, small IR builders, and typed
// buffers holding a dtype's exact memory image (bf16 rounded to nearest even).
#pragma once
#include <cstdlib>
#include <string>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "lowering/plan.h"
#include "lowering/target.h"
#include "targets/cpu/cpu_target.h"

namespace lazyjit::lowering::test {

using ir::Attr;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The CPU target, with the kind of kernel code LAZYJIT_TEST_SHAPES asks for
// ("off": exact sizes; "all", or unset: auto, shape-generic). ctest runs
// lowering_tests both ways (CMakeLists.txt), so every kernel test checks both
// kinds of code.
class TestTarget : public Target {
 public:
  TestTarget() : t_(make_cpu_target()) {
    const char* e = std::getenv("LAZYJIT_TEST_SHAPES");
    std::string s = e ? e : "";
    shapes_ = s == "all" ? Shapes::All : s == "off" ? Shapes::Off : Shapes::Auto;
  }
  std::string fingerprint() const override { return t_->fingerprint(); }
  std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan, Shapes shapes = Shapes::Auto) override {
    return t_->compile(g, plan, shapes == Shapes::Auto ? shapes_ : shapes);
  }
  std::unique_ptr<CompiledCode> load(const std::string& object, Plan& plan) override { return t_->load(object, plan); }
  void clear_kernels() override { t_->clear_kernels(); }
  Shapes shapes() const { return shapes_; }

 private:
  std::unique_ptr<Target> t_;
  Shapes shapes_;
};

inline TestTarget& target() {
  static TestTarget t;
  return t;
}

inline ir::TensorType tt(DType t, std::vector<int64_t> sizes) {
  return {t, sizes, ir::contiguous_strides(sizes)};
}
inline Attr dt(DType t) { return Attr{static_cast<int64_t>(t)}; }

inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

struct Buf {
  DType t;
  size_t n;
  std::vector<uint8_t> bytes;
  Buf(DType t, size_t n) : t(t), n(n), bytes(n * ir::element_size(t) + 1) {}  // +1: never a null data()
  Buf(DType t, const std::vector<double>& v) : Buf(t, v.size()) {
    for (size_t i = 0; i < v.size(); ++i) set(i, v[i]);
  }
  size_t size() const { return n; }
  template <typename T>
  void put(size_t i, T x) { std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T)); }
  template <typename T>
  T get_as(size_t i) const { T x; std::memcpy(&x, bytes.data() + i * sizeof(T), sizeof(T)); return x; }
  void set(size_t i, double v) {
    switch (t) {
      case DType::Bool: put<uint8_t>(i, v != 0); break;
      case DType::UInt8: put<uint8_t>(i, static_cast<uint8_t>(static_cast<int64_t>(v))); break;
      case DType::Int8: put<int8_t>(i, static_cast<int8_t>(v)); break;
      case DType::Int16: put<int16_t>(i, static_cast<int16_t>(v)); break;
      case DType::Int32: put<int32_t>(i, static_cast<int32_t>(v)); break;
      case DType::Int64: put<int64_t>(i, static_cast<int64_t>(v)); break;
      case DType::Float16: put<_Float16>(i, static_cast<_Float16>(static_cast<float>(v))); break;
      case DType::BFloat16: put<uint16_t>(i, bf16_bits(static_cast<float>(v))); break;
      case DType::Float32: put<float>(i, static_cast<float>(v)); break;
      case DType::Float64: put<double>(i, v); break;
      default: ADD_FAILURE() << "dtype";
    }
  }
  double get(size_t i) const {
    switch (t) {
      case DType::Bool: return get_as<uint8_t>(i);
      case DType::UInt8: return get_as<uint8_t>(i);
      case DType::Int8: return get_as<int8_t>(i);
      case DType::Int16: return get_as<int16_t>(i);
      case DType::Int32: return get_as<int32_t>(i);
      case DType::Int64: return static_cast<double>(get_as<int64_t>(i));
      case DType::Float16: return static_cast<float>(get_as<_Float16>(i));
      case DType::BFloat16: {
        uint32_t u = static_cast<uint32_t>(get_as<uint16_t>(i)) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      }
      case DType::Float32: return get_as<float>(i);
      case DType::Float64: return get_as<double>(i);
      default: ADD_FAILURE() << "dtype"; return 0;
    }
  }
  std::vector<double> values(size_t k) const {
    std::vector<double> out(k);
    for (size_t i = 0; i < k; ++i) out[i] = get(i);
    return out;
  }
  std::vector<double> values() const { return values(n); }
};

// What a value of dtype t holds after a store of v.
inline double round_to(DType t, double v) { return Buf(t, std::vector<double>{v}).get(0); }

}  // namespace lazyjit::lowering::test
