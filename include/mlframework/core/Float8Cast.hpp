#pragma once
/// @file Float8Cast.hpp
/// @brief Fused FP8 kernels over lists of tensors: per-tensor amax, the scaled saturating cast
/// into FP8 that takes the input's amax in the same pass, and dequantization.
///
/// These are the kernels under FP8 scaling recipes (Transformer Engine's `DelayedScaling` and
/// current scaling): every tensor `i` of a list has its own scale `scale[i]`, and the per-tensor
/// scales, inverse scales and amaxes live in FP32 tensors of N elements on the tensors' device,
/// so a step never waits for the device to read them (as TE keeps its `scale`, `scale_inv` and
/// `amax_history` on the GPU).
///
/// Semantics follow Transformer Engine's casts (the specs do not cover FP8):
/// - the product `x * scale[i]` is computed in FP32 (x widened exactly from FP32/FP16/BF16), then
///   rounded to nearest even into the destination's format, exactly as `Float8E4M3FN(x * s)` /
///   `Float8E5M2(x * s)` of core/Float8.hpp round it;
/// - the cast saturates: a product beyond the format's largest finite value (448 for E4M3FN,
///   57344 for E5M2), infinities included, becomes +-that value, as CUDA's
///   `__nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...)` does; NaN stays NaN (sign kept, the bytes
///   core/Float8Bits.hpp writes). E4M3FN's plain cast already saturates, so for E4M3FN the scaled
///   cast writes the plain cast's bytes; for E5M2 it differs from the plain cast (which
///   overflows to infinity) only where that one writes an infinity from a non-NaN value;
/// - amax is `max |x|` over the INPUT values (before the scale) and propagates NaN: a tensor
///   holding a NaN has amax NaN, one holding an infinity (and no NaN) has amax +Inf, an empty
///   tensor has amax 0. Like `torch.amax`, and unlike the check passes' telemetry amax of
///   MultiTensor.hpp (finite values only), because a scaling recipe must see that the amax is
///   not finite to keep its previous scale.
///
/// Every tensor of a call (lists, scale and amax tensors) must be on one backend and one device:
/// the CPU backend and the CUDA backend run fused, multi-threaded or multi-tensor kernels; a
/// tensor without a backend whose ITensor::HostBytes() are its elements takes the CPU kernels;
/// another backend's tensors take TensorBackend's defaults (the CPU kernels on their host bytes
/// when the host addresses them, else InvalidOperationError naming the backend).
///
/// Bad arguments throw before anything is written: ArgumentNullError for a null entry,
/// ArgumentError naming the parameter, index and value for a list length, a size, a dtype or a
/// device that does not fit.

#include <span>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// `amax[i] = max |tensors[i]|` for every tensor of the list (NaN when the tensor holds a NaN,
/// 0 for an empty tensor). @p tensors may hold any floating-point dtype (FP32, FP16, BF16,
/// E4M3FN, E5M2); @p amax is an FP32 tensor of `tensors.size()` elements on the tensors' device.
/// On a device backend it returns without waiting for the device.
MLFRAMEWORK_EXPORT void Amax(std::span<const TensorPtr> tensors, const TensorPtr& amax);

/// The largest `|x|` over every element of every tensor of @p tensors, on the host (NaN when an
/// element is NaN, 0 for an empty list). One pass over the list like Amax(); it waits for the
/// device to read the answer.
MLFRAMEWORK_EXPORT float ListAmax(std::span<const TensorPtr> tensors);

/// `dst[i] = saturate_to_fp8(src[i] * scale[i])` (see the file comment) and, in the same pass,
/// `amax[i] = max |src[i]|` of the input.
///
/// @param src FP32, FP16 or BF16 tensors.
/// @param dst Float8E4M3FN or Float8E5M2 tensors (the format may differ per tensor), the same
///        count as @p src and the same shape pairwise.
/// @param scale FP32 tensor of `src.size()` elements: the scale of each tensor.
/// @param amax FP32 tensor of `src.size()` elements that receives the amaxes; null: not taken.
/// On a device backend it returns without waiting for the device.
MLFRAMEWORK_EXPORT void ScaledCastToFloat8(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                           const TensorPtr& scale, const TensorPtr& amax);

/// `dst[i] = round_to_dst(float(src[i]) * scale_inv[i])`: the FP8 value widened exactly, the
/// product in FP32, rounded to nearest even into FP32 (exact product), FP16 or BF16.
///
/// @param src Float8E4M3FN or Float8E5M2 tensors.
/// @param dst FP32, FP16 or BF16 tensors, the same count as @p src and the same shape pairwise.
/// @param scale_inv FP32 tensor of `src.size()` elements (the inverse of each tensor's scale).
/// On a device backend it returns without waiting for the device.
MLFRAMEWORK_EXPORT void DequantizeFloat8(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                         const TensorPtr& scale_inv);

}  // namespace mlframework
