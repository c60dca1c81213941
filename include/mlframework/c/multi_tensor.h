/// @file multi_tensor.h
/// @brief C API: fused operations over lists of DLPack tensors (C++ core/MultiTensor.hpp).
///
/// Every function takes an array of @p count `DLTensor*` (CPU or CUDA; float32, float16 or
/// bfloat16; compact row-major), runs the library's fused kernel over all of them in one call
/// and borrows the tensors for the call only. @p stream: a `cudaStream_t` to order the work
/// after (C++ StreamGuard) when the tensors are on a CUDA device, or NULL (the library's own
/// stream); non-null with CPU tensors is MLFW_STATUS_INVALID_ARGUMENT. Errors name the argument
/// and the element (`tensors[2]->dtype`); nothing is written on failure.
#ifndef MLFRAMEWORK_C_MULTI_TENSOR_H_
#define MLFRAMEWORK_C_MULTI_TENSOR_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#include <stddef.h>

#include <dlpack/dlpack.h>

#include <mlframework/c/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Multiplies every element by @p factor in place (the inverse loss scale unscales) and writes
/// 1 into *@p found_inf when any result is Inf or NaN, else 0. With @p amax not NULL, also the
/// largest finite |x * factor| (C++ UnscaleCheckAndAmax; UnscaleAndCheck without it). One pass.
MLFW_C_API mlfw_status mlfw_unscale_and_check(const DLTensor* const* tensors, size_t count, float factor, void* stream,
                                              int* found_inf, float* amax);
/// Writes 1 into *@p found when any element is Inf or NaN, else 0 (C++ HasNonFinite). One read pass.
MLFW_C_API mlfw_status mlfw_has_non_finite(const DLTensor* const* tensors, size_t count, void* stream, int* found);
/// Writes the sum of the squares of `factor * x` over all elements into *@p sum (C++
/// SumOfSquares: FP32 partials per chunk, combined in FP64).
MLFW_C_API mlfw_status mlfw_sum_of_squares(const DLTensor* const* tensors, size_t count, float factor, void* stream,
                                           double* sum);
/// Multiplies every element by @p factor in place (C++ ScaleInPlace).
MLFW_C_API mlfw_status mlfw_scale_in_place(const DLTensor* const* tensors, size_t count, float factor, void* stream);
/// PyTorch's `clip_grad_norm_`: the global L2 norm of the tensors into *@p total_norm, and when
/// it exceeds @p max_norm (> 0, finite) every element multiplied by
/// `max_norm / (total_norm + 1e-6)` (SumOfSquares, then ScaleInPlace). A non-finite norm is
/// returned and nothing is scaled.
MLFW_C_API mlfw_status mlfw_clip_grad_norm(const DLTensor* const* tensors, size_t count, double max_norm, void* stream,
                                           double* total_norm);
/// Writes `src[i] * factor` rounded into the dtype of `dst[i]` (shapes pairwise equal; C++
/// CastInto: FP16/BF16 gradients into FP32 masters and back) and 1 into *@p found_inf when any
/// written value is Inf or NaN. @p found_inf may be NULL (C++ CopyInto: no wait for a device).
MLFW_C_API mlfw_status mlfw_cast_into(const DLTensor* const* src, const DLTensor* const* dst, size_t count,
                                      float factor, void* stream, int* found_inf);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_MULTI_TENSOR_H_
