#pragma once
// Private: the element math of the CUDA kernels, on the stored element types.
//
// Every function is MLFW_HOST_DEVICE and built only from FloatBits.hpp, the
// same conversions the CPU backend uses, so a kernel and the CPU backend
// produce the same bits; tests/cuda checks that on the host for every FP16
// and BF16 value.

#include <cstdint>
#include <type_traits>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework::backends::cuda {

/// The stored type of one element: float, or the 16 bits of a half / bfloat16.
template <DataType D>
using StoredType = std::conditional_t<D == DataType::Float32, float, std::uint16_t>;

/// A dtype as a type, for generic lambdas in device code.
template <DataType D>
struct DtypeTag {
  static constexpr DataType value = D;
};

/// Exact widening of a stored element to float.
template <DataType D>
MLFW_HOST_DEVICE inline float ToFloat(StoredType<D> stored) {
  if constexpr (D == DataType::Float32) {
    return stored;
  } else if constexpr (D == DataType::Float16) {
    return detail::HalfBitsToFloat(stored);
  } else {
    return detail::BFloat16BitsToFloat(stored);
  }
}

/// Round-to-nearest-even narrowing of a float into the stored type.
template <DataType D>
MLFW_HOST_DEVICE inline StoredType<D> FromFloat(float value) {
  if constexpr (D == DataType::Float32) {
    return value;
  } else if constexpr (D == DataType::Float16) {
    return detail::FloatToHalfBits(value);
  } else {
    return detail::FloatToBFloat16Bits(value);
  }
}

/// Finite test on the stored bits (no conversion).
template <DataType D>
MLFW_HOST_DEVICE inline bool IsFiniteStored(StoredType<D> stored) {
  if constexpr (D == DataType::Float32) {
    return detail::IsFiniteFloat(stored);
  } else if constexpr (D == DataType::Float16) {
    return detail::IsFiniteHalfBits(stored);
  } else {
    return detail::IsFiniteBFloat16Bits(stored);
  }
}

/// `round_to_T(widen(x) * factor)`: the one formula of scale, unscale and cast (as on the CPU).
template <DataType S, DataType T>
MLFW_HOST_DEVICE inline StoredType<T> ScaleConvert(StoredType<S> x, float factor) {
  return FromFloat<T>(ToFloat<S>(x) * factor);
}

}  // namespace mlframework::backends::cuda
