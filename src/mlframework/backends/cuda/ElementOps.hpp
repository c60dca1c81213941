#pragma once
// Private: the element math of the CUDA kernels, on the stored element types.
//
// Every function is MLFW_HOST_DEVICE. On the host they are built from
// FloatBits.hpp, the conversions the CPU backend uses; tests/cuda checks them
// on the host for every FP16 and BF16 value. In device code the 16-bit
// conversions are the hardware's (cvt, round to nearest even, subnormals
// kept), which round exactly as FloatBits.hpp does: the integer versions cost
// a loop and a dozen branches per element, enough to halve an FP16 kernel's
// bandwidth on an H100. test_cuda_device.CudaBackendConformance runs every
// FP16 and BF16 value, and every halfway point between two of them, through
// the kernels against the CPU backend. Only NaN payloads differ (the hardware
// writes 0x7FFF), and no result depends on a NaN's payload.
//
// FP8 (E4M3FN, E5M2) goes through core/Float8Bits.hpp on host and device alike, so the
// kernels write torch's bytes: cuda_fp8.h's __nv_cvt_float_to_fp8 turns every NaN into the
// positive canonical NaN (torch keeps the sign), and its non-saturating E5M2 path is software
// (through double) on every architecture. The hardware's cvt.rn.satfinite.e4m3x2 rounds like
// torch's E4M3FN cast for every non-NaN input and could replace the integer encode once a GPU
// run checks it (test_cuda_device.Float8OnCuda compares every path with the CPU).

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework::backends::cuda {

/// The stored type of one element: float, the 16 bits of a half / bfloat16, or the byte of an FP8.
template <DataType D>
using StoredType =
    std::conditional_t<D == DataType::Float32, float, std::conditional_t<IsFloat8(D), std::uint8_t, std::uint16_t>>;

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
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(stored));
#else
    return detail::HalfBitsToFloat(stored);
#endif
  } else if constexpr (D == DataType::Float8E4M3FN) {
    return detail::Float8E4M3FNBitsToFloat(stored);
  } else if constexpr (D == DataType::Float8E5M2) {
    return detail::Float8E5M2BitsToFloat(stored);
  } else {
    return detail::BFloat16BitsToFloat(stored);
  }
}

/// The sign bit of a stored element, read from its bits (NaN included: the hardware's widening
/// of an FP16 NaN gives the positive canonical NaN).
template <DataType D>
MLFW_HOST_DEVICE inline bool SignBitStored(StoredType<D> stored) {
  if constexpr (D == DataType::Float32) {
    return (detail::FloatAsBits(stored) >> 31) != 0u;
  } else if constexpr (D == DataType::Float8E4M3FN || D == DataType::Float8E5M2) {
    return (stored & 0x80u) != 0u;
  } else {
    return (stored & 0x8000u) != 0u;
  }
}

/// Whether a stored element is a NaN, from its bits.
template <DataType D>
MLFW_HOST_DEVICE inline bool IsNaNStored(StoredType<D> stored) {
  if constexpr (D == DataType::Float32) {
    return (detail::FloatAsBits(stored) & 0x7fffffffu) > 0x7f800000u;
  } else if constexpr (D == DataType::Float16) {
    return (stored & 0x7fffu) > 0x7c00u;
  } else if constexpr (D == DataType::BFloat16) {
    return (stored & 0x7fffu) > 0x7f80u;
  } else if constexpr (D == DataType::Float8E4M3FN) {
    return (stored & 0x7fu) == 0x7fu;
  } else {
    return (stored & 0x7fu) > 0x7cu;
  }
}

/// Round-to-nearest-even narrowing of a float into the stored type.
template <DataType D>
MLFW_HOST_DEVICE inline StoredType<D> FromFloat(float value) {
  if constexpr (D == DataType::Float32) {
    return value;
  } else if constexpr (D == DataType::Float16) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(value));
#else
    return detail::FloatToHalfBits(value);
#endif
  } else if constexpr (D == DataType::Float8E4M3FN) {
    return detail::FloatToFloat8E4M3FNBits(value);
  } else if constexpr (D == DataType::Float8E5M2) {
    return detail::FloatToFloat8E5M2Bits(value);
  } else {
#if defined(__CUDA_ARCH__)
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
#else
    return detail::FloatToBFloat16Bits(value);
#endif
  }
}

/// Finite test on the stored bits (no conversion).
template <DataType D>
MLFW_HOST_DEVICE inline bool IsFiniteStored(StoredType<D> stored) {
  if constexpr (D == DataType::Float32) {
    return detail::IsFiniteFloat(stored);
  } else if constexpr (D == DataType::Float16) {
    return detail::IsFiniteHalfBits(stored);
  } else if constexpr (D == DataType::Float8E4M3FN) {
    return detail::IsFiniteFloat8E4M3FNBits(stored);
  } else if constexpr (D == DataType::Float8E5M2) {
    return detail::IsFiniteFloat8E5M2Bits(stored);
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
