#pragma once
/// @file Float8ScaleUpdate.hpp
/// @brief The per-tensor FP8 scale state of the scaling recipes and its fused update rule.
///
/// The FP8 scaling recipes (fp8/DelayedScaling.hpp, fp8/CurrentScaling.hpp) keep the state of all
/// the tensors registered on one device in one FP32 tensor on that device, so one kernel updates
/// every scale of a step (Transformer Engine's `amax_and_scale_update` does the same over its
/// `amax_history` / `scale` / `scale_inv` tensors). The state tensor holds `Float8StateRows(H)`
/// rows of N elements (N scales, H the amax history length), row-major:
///
/// | row          | what                                                               |
/// |--------------|--------------------------------------------------------------------|
/// | 0 .. H-1     | amax history; row 0 is the current step's amax (Transformer Engine's layout) |
/// | H            | scale (multiplies a value before its cast into FP8)                |
/// | H + 1        | scale_inv = 1 / scale (multiplies an FP8 value when it is decoded) |
/// | H + 2        | the largest finite value of each tensor's FP8 format (448, 57344)   |
/// | H + 3        | scratch: the amax a cast wrote, before FoldFloat8Amax() folds it into row 0 |
///
/// TensorBackend::UpdateFloat8Scales() and TensorBackend::FoldFloat8Amax() run the rules below on
/// such a tensor; the host loops here are their defaults and the reference of the CUDA kernel.

#include <cstddef>
#include <cstdint>
#include <span>

#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Rows of an FP8 scale state tensor with an amax history of @p history_length rows.
constexpr std::size_t Float8StateRows(std::size_t history_length) noexcept { return history_length + 4; }

/// The largest margin a scale update accepts: `2^margin` stays a finite float and, with any finite
/// amax, the scale stays inside the clamp of Float8ScaleFromAmax().
inline constexpr int kMaxFloat8Margin = 64;

/// What one fused update of an FP8 scale state tensor does (TensorBackend::UpdateFloat8Scales()).
///
/// For each slot j in [First, First + Length):
/// 1. `last = history[0][j]`; with RollHistory the history rolls by one row as Transformer
///    Engine's `amax_and_scale_update` rolls it: `history[i] = history[i + 1]` for i < H - 1,
///    `history[H - 1] = last`, then `history[0] = 0` (the slot of the next step's amax);
/// 2. the amax used is `last` when MostRecent, else the maximum of the H entries (fmaxf, as in
///    Transformer Engine's kernel: a NaN entry is skipped, an Inf entry counts);
/// 3. Float8ScaleFromAmax() turns it into the new scale; scale_inv = 1 / scale.
struct Float8ScaleUpdate {
  std::size_t HistoryLength = 1;   ///< H, rows of amax history (1 to SIZE_MAX - 4).
  std::size_t Count = 0;           ///< N, slots (elements per row) of the state tensor.
  std::size_t First = 0;           ///< First slot updated.
  std::size_t Length = 0;          ///< Slots updated, from First on.
  bool MostRecent = false;         ///< Amax from row 0 only ("most_recent"); else the history's maximum ("max").
  int Margin = 0;                  ///< The scale is divided by `2^Margin`; 0 to kMaxFloat8Margin.
  bool KeepScaleOnBadAmax = true;  ///< A zero or non-finite amax keeps the previous scale (else the scale becomes 1).
  bool RollHistory = true;         ///< Roll the history and clear row 0 (else the history is left as it is).
};

/// The new scale of a slot from its @p amax: `(fp8_max / amax) / 2^margin` in FP32 (IEEE division,
/// round to nearest even) when amax is finite and positive, clamped into [FLT_MIN, FLT_MAX]
/// so that both the scale and its inverse are finite (Transformer Engine clamps an infinite
/// scale to FLT_MAX the same way; the lower clamp only matters for an amax near FLT_MAX with a
/// large margin). A zero, negative or non-finite amax gives @p previous when @p keep, else 1
/// (Transformer Engine's current scaling).
MLFW_HOST_DEVICE inline float Float8ScaleFromAmax(float amax, float fp8_max, int margin, float previous, bool keep) {
  if (!(amax > 0.0f) || !detail::IsFiniteFloat(amax)) {
    return keep ? previous : 1.0f;
  }
  const float power = detail::BitsAsFloat(static_cast<std::uint32_t>(127 + margin) << 23);
  const float scale = (fp8_max / amax) / power;
  constexpr float kFloatMax = 3.40282346638528859812e+38f;
  constexpr float kFloatMin = 1.17549435082228750797e-38f;
  if (scale > kFloatMax) {
    return kFloatMax;
  }
  return scale < kFloatMin ? kFloatMin : scale;
}

/// The larger of a recorded amax and a new one, NaN winning (a NaN seen in a step is kept, so
/// the update sees that step's amax as not finite).
MLFW_HOST_DEVICE inline float FoldAmax(float recorded, float fresh) {
  return (recorded > fresh || recorded != recorded) ? recorded : fresh;
}

/// Runs @p update on @p state, the host elements of a state tensor (`Float8StateRows(H) * N` floats).
/// ArgumentError when @p state has another size, H is 0 or above `SIZE_MAX - 4` (its rows would
/// not fit a size_t), or the slot range or margin is out of range.
MLFRAMEWORK_EXPORT void UpdateFloat8ScalesOnHost(std::span<float> state, const Float8ScaleUpdate& update);

/// `history[0][j] = FoldAmax(history[0][j], scratch[j])` for the slots of @p update (its other
/// fields are not used) on host elements, then clears those scratch entries. ArgumentError as
/// UpdateFloat8ScalesOnHost().
MLFRAMEWORK_EXPORT void FoldFloat8AmaxOnHost(std::span<float> state, const Float8ScaleUpdate& update);

/// ArgumentError unless @p update fits a state tensor of @p elements elements (the checks of the
/// two functions above; backends call it before their kernels).
MLFRAMEWORK_EXPORT void ValidateFloat8ScaleUpdate(const Float8ScaleUpdate& update, std::size_t elements);

}  // namespace mlframework
