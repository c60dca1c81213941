// The FP8 element loops for every CPU: the scalar functions of core/Float8Bits.hpp, element by
// element (the reference the vector sets are bit-identical to), and the integer amax, which the
// compiler vectorises at the baseline width.

#include <cstddef>
#include <cstdint>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/FloatBits.hpp>

#include "mlframework/backends/cpu/Float8Elements.hpp"
#include "mlframework/backends/cpu/Float8Kernels.hpp"

namespace mlframework::backends::cpu {

namespace {

// The element loops of core/Float8Bits.hpp's scalar functions.
struct PortableLoops {
  template <DataType D>
  static std::uint32_t Cast(const float* src, std::uint8_t* dst, std::size_t count, float scale) {
    std::uint32_t amax = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t input = detail::FloatAsBits(src[i]) & 0x7fffffffu;
      amax = input > amax ? input : amax;
      dst[i] = float8::EncodeScalar<D>(src[i] * scale);
    }
    return amax;
  }

  template <DataType D>
  static void Dequantize(const std::uint8_t* src, float* dst, std::size_t count, float scale_inv) {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = float8::DecodeScalar<D>(src[i]) * scale_inv;
    }
  }

  static void CastE4M3FNInRange(const float* src, std::uint8_t* dst, std::size_t count, float scale) {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = float8::EncodeScalar<DataType::Float8E4M3FN>(src[i] * scale);
    }
  }

  template <DataType D>
  static void DecodeSum(const Float8KernelSet::Parts& parts, float* dst, std::size_t count, float factor) {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = float8::DecodeSumScalar<D>(parts, i) * factor;
    }
  }
};

}  // namespace

template <>
const Float8KernelSet& Float8KernelsOf<arch::Portable>() noexcept {
  static const Float8KernelSet kSet = float8::SetOf<PortableLoops>();
  return kSet;
}

}  // namespace mlframework::backends::cpu
