#pragma once
/// @file TensorBackend.hpp
/// @brief The fused multi-tensor kernels a backend provides (the Apex multi_tensor_apply seam).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/core/ReadPass.hpp>
#include <mlframework/core/TensorListView.hpp>
#include <mlframework/core/WritePass.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

class DeviceScaleState;
struct Float8ScaleUpdate;

/// Result of one read pass over a gradient list: non-finite flag and sum of squares.
struct NonFiniteAndNorm {
  bool FoundNonFinite = false;  ///< Any element was Inf or NaN.
  double SumOfSquares = 0.0;    ///< Sum of squares of the (scaled) elements.
};

/// What one tensor's non-finite values are (an overflow report's per-tensor line).
struct NonFiniteScan {
  std::uint64_t Count = 0;        ///< Elements that are Inf or NaN.
  std::uint64_t FirstIndex = 0;   ///< Flat (row-major) index of the first of them; 0 when Count is 0.
  bool HasNaN = false;            ///< Some element is NaN.
  bool HasPosInf = false;         ///< Some element is +Inf.
  bool HasNegInf = false;         ///< Some element is -Inf.
  std::uint64_t NaNCount = 0;     ///< Elements that are NaN.
  std::uint64_t PosInfCount = 0;  ///< Elements that are +Inf.
  std::uint64_t NegInfCount = 0;  ///< Elements that are -Inf.
};

/// Result of a check pass that also takes the largest absolute value (amax, the headroom telemetry).
///
/// Amax is the largest `|x * factor|` over the elements whose product `x * factor` (computed in
/// FP32, before any rounding into a narrower destination) is finite: Inf and NaN are left out, so
/// a pass that finds them still reports the amax of the finite values. 0 when no value is finite.
/// The check is the one of the pass without amax (the written values for an unscale or a cast).
struct NonFiniteAndAmax {
  bool FoundNonFinite = false;  ///< Any checked value was Inf or NaN.
  float Amax = 0.0f;            ///< Largest finite |x * factor| (0 when none).
};

/// Where the FP8 block gradient wire's encoder reads (TensorBackend::EncodeFloat8Blocks()):
/// `Runs` runs of `Length` values, run r from element `Offset + r * Stride` of the values (a
/// reduce-scatter encodes one run per destination rank, an all-reduce one run).
struct Float8BlockRuns {
  /// Values per FP32 block scale (distributed::kFloat8WireBlock, Float8BlockReduce.hpp).
  static constexpr std::size_t kBlockValues = 256;

  std::size_t Runs = 1;    ///< Runs to encode.
  std::size_t Length = 0;  ///< Values per run.
  std::size_t Offset = 0;  ///< Element of the values where run 0 starts.
  std::size_t Stride = 0;  ///< Elements from the start of one run to the next.
};

/// Fused kernels over a whole list of tensors at once.
///
/// A backend receives every tensor of a step in one call, cuts the list into
/// chunks of equal work across all tensors and runs each job in as few passes
/// over memory as it can. Every tensor handed to a backend returns that same
/// backend from ITensor::Backend(); the free functions in MultiTensor.hpp do
/// that grouping and validate arguments, so implementations may assume it.
class MLFRAMEWORK_EXPORT TensorBackend {
 public:
  virtual ~TensorBackend();

  /// Short name ("cpu", "cuda").
  virtual std::string_view Name() const noexcept = 0;

  /// One read pass over @p tensors: the non-finite flag, and the sum of squares or the amax when
  /// @p options ask for one (ArgumentError naming `options` when they ask for both). A backend
  /// that keeps scale states in device memory (DeviceScalingBackend) takes its own state in
  /// `options.State` and records into it without waiting; core runs the passes of host states
  /// itself (MultiTensor.hpp's ReadPass()), so the others reject a state (RejectScaleState()). nullopt when
  /// the backend declines a list that is not Grouped (TensorListView). For a Grouped list the
  /// default reads each tensor's floats (ITensor::CopyToFloats()): correct for any tensor; the CPU and CUDA backends
  /// override it with one fused pass.
  virtual std::optional<ReadPassResult> Read(TensorListView tensors, const ReadPassOptions& options) const;
  /// One write pass (WritePass.hpp): scales @p src in place (@p dst empty), or casts or adds @p src
  /// into @p dst pairwise, and returns the non-finite flag and the amax of what it wrote when
  /// @p options ask for them. A device backend queues a pass that asks for neither and returns
  /// without waiting. A scale state in `options.State` is taken as Read() takes it. nullopt when the backend declines
  /// lists that are not Grouped: offered before core's checks, a backend runs them only when it can tell they pass
  /// those checks (the CPU backend: pairs of lists it kept from an earlier call; an in-place list of its own tensors,
  /// which it checks while planning it). Grouped lists have passed core's checks (entries non-null and of this backend;
  /// for pairs, the same count and the same shapes pairwise). The default runs a Grouped list through each tensor's
  /// ToFloatVector() and CopyFromFloats() (a host round trip per tensor, correct for any tensor); the CPU and CUDA
  /// backends override it with one fused pass.
  virtual std::optional<WritePassResult> Write(TensorListView src, TensorListView dst,
                                               const WritePassOptions& options) const;
  /// `out[i]` = the non-finite values of `tensors[i]` (count, first flat index, NaN/+Inf/-Inf);
  /// the spans have the same size. Front ends call it only on overflow steps, to build an
  /// OverflowReport, so it reads each tensor once and waits for the answer. The default reads
  /// the tensor's HostBytes() with a tight bit-level loop when it has them (CPU tensors, host
  /// wrappers), else widens it with CopyToFloats(): correct for any tensor. The CUDA backend
  /// overrides it with a kernel.
  virtual void ScanNonFinite(std::span<const ITensor* const> tensors, std::span<NonFiniteScan> out) const;

  /// @name Fused optimizer steps
  /// One pass per step over the lists (core/OptimizerStep.hpp; optimizers/FusedSteps.hpp validates
  /// them, then calls the CPU backend's for host memory, else the tensors' backend's). When
  /// @p skip_if_found_inf is not null and its found-inf flag is set, the step changes nothing; a
  /// device backend reads the flag on the device, so the call never waits for it. Each returns
  /// false when the backend has no fused optimizer kernels for these tensors (the defaults).
  ///@{
  /// Adam/AdamW over @p lists (Parameters, Gradients, FirstState, SecondState, LowPrecisionCopies).
  virtual bool AdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars,
                        const DeviceScaleState* skip_if_found_inf) const;
  /// SGD over @p lists (FirstState: the momentum buffers, empty when the momentum is 0).
  virtual bool SGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars,
                       const DeviceScaleState* skip_if_found_inf) const;
  ///@}

  /// @name FP8 scale state (core/Float8ScaleUpdate.hpp)
  /// The fused update of the FP8 scaling recipes: one call updates every scale kept in @p state,
  /// an FP32 tensor of this backend laid out as Float8ScaleUpdate describes. A device backend
  /// queues the work without waiting for it. The defaults run UpdateFloat8ScalesOnHost() /
  /// FoldFloat8AmaxOnHost() on the tensor's HostBytes() in place, or, for a tensor the host
  /// cannot address, on a ToFloatVector() copy written back with CopyFromFloats() (correct for
  /// any tensor); the CUDA backend overrides them with kernels. ArgumentError when @p state is not
  /// FP32 or does not fit @p update.
  ///@{
  /// Rolls the amax history and computes the new scales and inverse scales of @p update's slots.
  virtual void UpdateFloat8Scales(ITensor& state, const Float8ScaleUpdate& update) const;
  /// Folds the amax a cast wrote into the scratch row into the current amax (row 0) of @p update's slots.
  virtual void FoldFloat8Amax(ITensor& state, const Float8ScaleUpdate& update) const;
  ///@}

  /// @name FP8 kernels (core/Float8Cast.hpp)
  /// The free functions of Float8Cast.hpp validate every argument (counts, shapes, dtypes, one
  /// backend and one device for all the tensors of a call, the FP32 per-tensor tensors of
  /// `src.size()` elements) before they call these, so implementations may assume it. The
  /// defaults run the CPU backend's kernels on the tensors' ITensor::HostBytes() when every
  /// tensor has them (right for a backend whose memory the host addresses), else throw
  /// InvalidOperationError naming the backend. The CPU and CUDA backends override them.
  ///@{
  /// `amax[i] = max |tensors[i]|` (NaN propagates; Float8Cast.hpp's Amax()).
  virtual void AmaxInto(std::span<const ITensor* const> tensors, ITensor& amax) const;
  /// `dst[i] = saturate_to_fp8(src[i] * scale[i])` and `amax[i] = max |src[i]|` when @p amax is
  /// not null (Float8Cast.hpp's ScaledCastToFloat8()).
  virtual void ScaledCastToFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                  const ITensor& scale, ITensor* amax) const;
  /// `dst[i] = round_to_dst(float(src[i]) * scale_inv[i])` (Float8Cast.hpp's DequantizeFloat8()).
  virtual void DequantizeFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                const ITensor& scale_inv) const;
  ///@}

  /// @name FP8 block gradient wire (distributed/Float8BlockReduce.hpp)
  /// The wire's sender and receiver kernels on the memory of a backend the host cannot address,
  /// with the bits of the wire's CPU codec (blocks of Float8BlockRuns::kBlockValues, one FP32
  /// scale 2^-k each, E4M3FN codes). The reductions of Float8BlockReduce.hpp call these for
  /// tensors without ITensor::HostBytes() (host tensors go through the codec itself) after
  /// checking every argument (FP32 values and sums, E4M3FN codes, FP32 scales, all of this
  /// backend on one device, and every range inside its tensor), so implementations may assume
  /// it. A device backend queues the work on its stream without waiting. The CUDA backend
  /// overrides them with kernels; the default throws InvalidOperationError naming the backend.
  ///@{
  /// Encodes each run of @p runs on its own (its last block may be short): run r's codes go to
  /// `codes[r * runs.Length ...]` and its block scales (2^-k, NaN for a block holding Inf or NaN)
  /// to `scale_inv[r * blocks ...]`, `blocks` being the blocks of kFloat8WireBlock that cover
  /// `runs.Length` values.
  virtual void EncodeFloat8Blocks(const ITensor& values, const Float8BlockRuns& runs, ITensor& codes,
                                  ITensor& scale_inv) const;
  /// `out[offset + i] = sum over p = 0, 1, ..., parts - 1 of decode(part p)[i]` for i below
  /// @p length, added in FP32 in that order; part p's codes start at `codes[p * length]` and its
  /// scales at `scale_inv[p * blocks]` (the layout EncodeFloat8Blocks() writes).
  virtual void DecodeSumFloat8Blocks(const ITensor& codes, const ITensor& scale_inv, std::size_t parts,
                                     std::size_t length, ITensor& out, std::size_t offset) const;
  ///@}

  /// A new zero-filled tensor of this backend on @p device. The default throws
  /// InvalidOperationError naming the backend (it cannot allocate); the CPU and CUDA backends
  /// override it and throw ArgumentError for a device they do not serve.
  virtual TensorPtr Allocate(const Shape& shape, DataType dtype, Device device) const;
  /// A tensor of @p shape whose elements are @p base's elements from element @p offset on: it
  /// shares @p base's memory and keeps it alive (writes through either are seen by both).
  /// @p base is a tensor of this backend. ArgumentNullError for a null @p base, ArgumentError
  /// when the view does not fit; the default throws InvalidOperationError naming the backend.
  virtual TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) const;

 protected:
  /// Only implementations construct the interface.
  TensorBackend() = default;
  /// Implementations may be copyable.
  TensorBackend(const TensorBackend&) = default;
  /// Implementations may be copy-assignable.
  TensorBackend& operator=(const TensorBackend&) = default;
};

/// ArgumentError naming `options` when @p state is not null: the passes of @p backend take no
/// scale state (a host state's pass is run by core's ReadPass() and WritePass(), a device state's
/// by the backend that made it).
MLFRAMEWORK_EXPORT void RejectScaleState(const DeviceScaleState* state, const TensorBackend& backend);

}  // namespace mlframework
