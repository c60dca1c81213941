#pragma once
// Private: one element of each dtype, loaded, rounded and tested with the
// scalar functions of core/FloatBits.hpp. Included only by files built with
// the baseline flags (KernelsPortable.cpp, MultiTensorKernels.cpp), never by a
// per-ISA source, so no copy of these inline functions carries ISA code.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>

namespace mlframework::backends::cpu::scalar {

// The FP32 bits of every code of an FP8 format, built at compile time: widening an FP8 element
// is one table load instead of a branch and a normalisation loop per subnormal.
template <unsigned kMantissa, unsigned kBias, bool kIeee>
inline constexpr std::array<std::uint32_t, 256> kFloat8Decode = [] {
  std::array<std::uint32_t, 256> table{};
  for (unsigned code = 0; code < 256; ++code) {
    table[code] = detail::Float8ToFloatBits<kMantissa, kBias, kIeee>(static_cast<std::uint8_t>(code));
  }
  return table;
}();

template <DataType D>
float Load(const void* base, std::size_t i) {
  if constexpr (D == DataType::Float32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (D == DataType::Float16) {
    return detail::HalfBitsToFloat(static_cast<const std::uint16_t*>(base)[i]);
  } else if constexpr (D == DataType::Float8E4M3FN) {
    return std::bit_cast<float>(kFloat8Decode<3, 7, false>[static_cast<const std::uint8_t*>(base)[i]]);
  } else if constexpr (D == DataType::Float8E5M2) {
    return std::bit_cast<float>(kFloat8Decode<2, 15, true>[static_cast<const std::uint8_t*>(base)[i]]);
  } else {
    return detail::BFloat16BitsToFloat(static_cast<const std::uint16_t*>(base)[i]);
  }
}

template <DataType D>
void Store(void* base, std::size_t i, float value) {
  if constexpr (D == DataType::Float32) {
    static_cast<float*>(base)[i] = value;
  } else if constexpr (D == DataType::Float16) {
    static_cast<std::uint16_t*>(base)[i] = detail::FloatToHalfBits(value);
  } else if constexpr (D == DataType::Float8E4M3FN) {
    static_cast<std::uint8_t*>(base)[i] = detail::FloatToFloat8E4M3FNBits(value);
  } else if constexpr (D == DataType::Float8E5M2) {
    static_cast<std::uint8_t*>(base)[i] = detail::FloatToFloat8E5M2Bits(value);
  } else {
    static_cast<std::uint16_t*>(base)[i] = detail::FloatToBFloat16Bits(value);
  }
}

// Finite test on the stored bits: exponent field not all ones (E4M3FN: not S.1111.111).
template <DataType D>
bool IsFiniteAt(const void* base, std::size_t i) {
  if constexpr (D == DataType::Float32) {
    return detail::IsFiniteFloat(static_cast<const float*>(base)[i]);
  } else if constexpr (D == DataType::Float16) {
    return (static_cast<const std::uint16_t*>(base)[i] & 0x7c00u) != 0x7c00u;
  } else if constexpr (D == DataType::Float8E4M3FN) {
    return detail::IsFiniteFloat8E4M3FNBits(static_cast<const std::uint8_t*>(base)[i]);
  } else if constexpr (D == DataType::Float8E5M2) {
    return detail::IsFiniteFloat8E5M2Bits(static_cast<const std::uint8_t*>(base)[i]);
  } else {
    return (static_cast<const std::uint16_t*>(base)[i] & 0x7f80u) != 0x7f80u;
  }
}

// Calls fn.template operator()<D>() for the runtime dtype (once per call, never per element).
template <typename Fn>
decltype(auto) DispatchDtype(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::Float16:
      return fn.template operator()<DataType::Float16>();
    case DataType::BFloat16:
      return fn.template operator()<DataType::BFloat16>();
    case DataType::Float8E4M3FN:
      return fn.template operator()<DataType::Float8E4M3FN>();
    case DataType::Float8E5M2:
      return fn.template operator()<DataType::Float8E5M2>();
    case DataType::Float32:
      break;
  }
  return fn.template operator()<DataType::Float32>();
}

}  // namespace mlframework::backends::cpu::scalar
