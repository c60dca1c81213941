#pragma once
/// @file DelayedScaling.hpp
/// @brief Transformer Engine's DelayedScaling recipe: scales from an amax history.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/export.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>
#include <mlframework/fp8/PerTensorScaling.hpp>

namespace mlframework::fp8 {

/// How DelayedScaling reduces the amax history to one amax (Transformer Engine's `amax_compute_algo`).
enum class AmaxComputeAlgorithm : unsigned char {
  Max,         ///< "max": the largest entry of the history (a NaN entry is skipped, an Inf entry counts).
  MostRecent,  ///< "most_recent": the amax of the step just ended.
};

/// "max" or "most_recent" to the enum; ArgumentError naming `amax_compute_algo` otherwise.
MLFRAMEWORK_EXPORT AmaxComputeAlgorithm ParseAmaxComputeAlgo(std::string_view name);
/// "max", "most_recent"; "unknown" outside the enum.
MLFRAMEWORK_EXPORT std::string_view ToString(AmaxComputeAlgorithm algorithm) noexcept;

/// DelayedScaling's configuration (Transformer Engine's `DelayedScaling` arguments, its defaults).
struct DelayedScalingConfig {
  int Margin = 0;                     ///< `margin`: scale = (fp8_max / amax) / 2^Margin; 0 to kMaxFloat8Margin.
  Format Fp8Format = Format::HYBRID;  ///< `fp8_format`: E4M3 everywhere, or E5M2 for gradients.
  std::size_t AmaxHistoryLen = 1024;  ///< `amax_history_len`: steps of amax kept (at least 1).
  AmaxComputeAlgorithm AmaxComputeAlgo = AmaxComputeAlgorithm::Max;  ///< `amax_compute_algo`.
};

/// Transformer Engine's delayed scaling: each tensor is cast with a scale computed from the amax
/// of earlier steps, so the cast needs no amax pass of its own.
///
/// Quantize() casts with the current scale and records the input's amax (the largest of the
/// step's casts of that tensor) as the newest history entry. UpdateScales() then, for every
/// registered tensor at once (one fused call per device: a host loop on the CPU, a kernel on
/// CUDA, TensorBackend::UpdateFloat8Scales()):
/// - rolls the history as Transformer Engine does (the newest entry moves to the back, the
///   front slot is cleared for the next step);
/// - takes the amax as the history's maximum ("max") or the step's own ("most_recent");
/// - sets `scale = (fp8_max / amax) / 2^margin` in FP32, keeping the previous scale when the
///   amax is 0 or not finite (core/Float8ScaleUpdate.hpp has the exact rule), and
///   `scale_inv = 1 / scale`.
/// fp8_max is 448 for E4M3 tensors and 57344 for E5M2 ones (gradients under HYBRID). With
/// tensors on several devices the update is all or nothing: when a later device's call throws,
/// the devices already updated get back their state from copies taken before (each
/// UpdateScales() copies the state of every device but the last on that device, into a buffer
/// the recipe keeps, so an update after the first allocates nothing and can be captured).
///
/// StateDict() holds the configuration and, per registered tensor, its name, role, history,
/// scale and scale_inv: its size is fixed by the number of tensors and the history length. A
/// restored recipe continues exactly as the saved one would have.
class MLFRAMEWORK_EXPORT DelayedScaling final : public PerTensorScaling {
 public:
  /// ArgumentError naming the field for a history length of 0 or above SIZE_MAX - 4 (the state's
  /// H + 4 rows must fit a size_t), a margin outside
  /// [0, kMaxFloat8Margin], or a format or algorithm outside its enum.
  explicit DelayedScaling(DelayedScalingConfig config = {});
  /// Releases the state tensors.
  ~DelayedScaling() override;
  /// Movable. The moved-from recipe throws InvalidOperationError from every member but Name()
  /// and Config(); it can be destroyed or assigned to.
  DelayedScaling(DelayedScaling&&) noexcept;
  /// Move-assignable (also into a moved-from recipe).
  DelayedScaling& operator=(DelayedScaling&&) noexcept;

  /// The configuration.
  const DelayedScalingConfig& Config() const noexcept { return config_; }
  /// The amax history of @p name read to the host in Transformer Engine's layout (waits for the
  /// device): entry 0 is the amax recorded since the last UpdateScales(), and after an update the
  /// entries that follow run from the oldest kept to the newest (the roll moves each step's amax
  /// to the back).
  std::vector<float> AmaxHistory(const std::string& name) const;

  std::string_view Name() const noexcept override { return "DelayedScaling"; }
  void Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                std::span<const TensorPtr> dst) override;
  void UpdateScales() override;
  std::vector<std::byte> StateDict() const override;
  void LoadStateDict(std::span<const std::byte> state) override;

 private:
  DelayedScalingConfig config_;
};

}  // namespace mlframework::fp8
