#pragma once
/// @file MultiTensor.hpp
/// @brief Fused operations over lists of tensors: the hot path of every scaler.
///
/// Each function validates its arguments (null tensors, size mismatches),
/// hands groups of tensors that share a backend to that backend's fused
/// kernel in one call, and handles tensors without a backend on the CPU
/// backend's kernels when their ITensor::HostBytes() are their elements, else
/// through the per-tensor virtual functions of ITensor (the table in ITensor.hpp).
///
/// Lists of CPU tensors are checked and planned in one walk over the tensor objects. A list of
/// 64 tensors or more holding the same tensor objects in the same order as one already planned
/// twice skips that walk (the CPU backend keeps the plans of the last four such lists, and of
/// four casts, until any tensor they hold is destroyed). So pass a training step's lists again each step instead
/// of making new tensors: a new std::vector of the same TensorPtrs is the same list.

#include <span>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// The tensors of @p gradients in key order (throws ArgumentNullError naming a null entry).
MLFRAMEWORK_EXPORT std::vector<TensorPtr> TensorList(const GradientMap& gradients);

/// @name The two routes (every list function below is one of them with its options)
///@{
/// The read pass of @p options over @p tensors (TensorBackend::Read): the whole list to its first
/// tensor's backend, else the list checked and grouped by backend, each group to its backend,
/// the tensors without one through their ITensor members. With a scale state
/// (ReadPassOptions::State): a HostScaleState records the plain pass's flag; a state in device
/// memory goes with the list to the list's one backend (ArgumentError naming the first tensor of
/// another backend), which records on the device without waiting.
MLFRAMEWORK_EXPORT ReadPassResult ReadPass(std::span<const TensorPtr> tensors, const ReadPassOptions& options);
/// The write pass of @p options: in place over @p src (WriteOp::Scale, @p dst empty) or pairwise
/// from @p src into @p dst (TensorBackend::Write). The same route as ReadPass(), pairs checked
/// (non-null, one count, one shape pairwise) before they are grouped; a scale state
/// (WritePassOptions::State) is taken as ReadPass() takes it: a HostScaleState's factor is read
/// here and the plain pass's answer recorded into it.
MLFRAMEWORK_EXPORT WritePassResult WritePass(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                             const WritePassOptions& options);
///@}

/// Multiplies every element by @p factor in place; true when any result is Inf or NaN. One pass.
MLFRAMEWORK_EXPORT bool UnscaleAndCheck(std::span<const TensorPtr> tensors, float factor);
/// True when any element is Inf or NaN. One read pass.
MLFRAMEWORK_EXPORT bool HasNonFinite(std::span<const TensorPtr> tensors);
/// Sum of the squares of `factor * x` over all elements (FP32 partials per chunk, combined in FP64).
MLFRAMEWORK_EXPORT double SumOfSquares(std::span<const TensorPtr> tensors, float factor = 1.0f);
/// One read pass: non-finite flag and sum of squares of `factor * x`.
MLFRAMEWORK_EXPORT NonFiniteAndNorm CheckAndSumSquares(std::span<const TensorPtr> tensors, float factor = 1.0f);
/// Multiplies every element by @p factor in place.
MLFRAMEWORK_EXPORT void ScaleInPlace(std::span<const TensorPtr> tensors, float factor);
/// Writes `src[i] * factor` rounded into the dtype of `dst[i]`; shapes must match pairwise.
/// Returns true when any written value is Inf or NaN (one pass: this is unscale-to-FP32 plus check).
MLFRAMEWORK_EXPORT bool CastInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor = 1.0f);
/// Writes `src[i] * factor` rounded into the dtype of `dst[i]` like CastInto(), without the
/// non-finite flag: on a device backend it returns without waiting for the device.
MLFRAMEWORK_EXPORT void CopyInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor = 1.0f);
/// `dst[i] = round(dst[i] + alpha * src[i])` (WriteOp::Add); shapes must match pairwise.
/// Pairs on two backends go through the host. On a device backend it does not wait for the device.
MLFRAMEWORK_EXPORT void AddInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float alpha = 1.0f);
/// @name The check passes with the amax (headroom telemetry)
/// The same one-pass operations that also return the largest finite absolute value of the values
/// they write or read (NonFiniteAndAmax in TensorBackend.hpp): a tensor of a backend with fused
/// amax kernels (CPU, CUDA) costs one pass, a host-addressable tensor without a backend takes the
/// CPU kernels, and other tensors are read once through ToFloatVector() and written through
/// CopyFromFloats(). Amax is exact (a maximum): it does not depend on threads or chunking.
///@{
/// UnscaleAndCheck() and the amax of `x * factor` (the unscaled values when factor is the inverse scale).
MLFRAMEWORK_EXPORT NonFiniteAndAmax UnscaleCheckAndAmax(std::span<const TensorPtr> tensors, float factor);
/// HasNonFinite() and the amax of the values; reads every value (no early exit).
MLFRAMEWORK_EXPORT NonFiniteAndAmax CheckAndAmax(std::span<const TensorPtr> tensors);
/// CastInto() and the amax of `src * factor`.
MLFRAMEWORK_EXPORT NonFiniteAndAmax CastIntoAndAmax(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                                    float factor = 1.0f);
///@}
/// New tensors holding `src[i] * factor` in @p dtype, on the sources' devices: views of one
/// contiguous buffer per device (ZerosContiguousLike() in Tensor.hpp).
MLFRAMEWORK_EXPORT std::vector<TensorPtr> Cast(std::span<const TensorPtr> src, DataType dtype, float factor = 1.0f);

}  // namespace mlframework
