#pragma once
/// @file CurrentScaling.hpp
/// @brief Transformer Engine's Float8CurrentScaling recipe: scales from this step's amax.

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/export.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>
#include <mlframework/fp8/PerTensorScaling.hpp>

namespace mlframework::fp8 {

/// CurrentScaling's configuration (Transformer Engine's `Float8CurrentScaling` arguments).
struct CurrentScalingConfig {
  Format Fp8Format = Format::HYBRID;  ///< `fp8_format`: E4M3 everywhere, or E5M2 for gradients.
};

/// Transformer Engine's current scaling: every Quantize() first takes the amax of its inputs
/// (one read pass, the amax of each tensor into its state on the device), sets
/// `scale = fp8_max / amax` from it (1 when the amax is 0 or not finite, FLT_MAX when the
/// quotient overflows, as Transformer Engine's `compute_scale_from_amax`), then casts with that
/// scale. So the scale always fits the data being cast, at the price of the extra read pass.
///
/// A name appears at most once in one Quantize() call (ArgumentError naming the later
/// `names[i]` and the earlier index otherwise, nothing cast): a second cast would replace the
/// scale the first destination was cast with. Scale(), ScaleInv() and Amax() are those of the
/// latest Quantize() of the name;
/// UpdateScales() changes nothing (the scales follow each cast). StateDict() holds the format
/// and, per tensor, its name, role, latest amax, scale and scale_inv.
class MLFRAMEWORK_EXPORT CurrentScaling final : public PerTensorScaling {
 public:
  /// ArgumentError naming `config.Fp8Format` for a format outside the enum.
  explicit CurrentScaling(CurrentScalingConfig config = {});
  /// Releases the state tensors.
  ~CurrentScaling() override;
  /// Movable. The moved-from recipe throws InvalidOperationError from every member but Name()
  /// and Config(); it can be destroyed or assigned to.
  CurrentScaling(CurrentScaling&&) noexcept;
  /// Move-assignable (also into a moved-from recipe).
  CurrentScaling& operator=(CurrentScaling&&) noexcept;

  /// The configuration.
  const CurrentScalingConfig& Config() const noexcept { return config_; }

  std::string_view Name() const noexcept override { return "CurrentScaling"; }
  void Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                std::span<const TensorPtr> dst) override;
  void UpdateScales() override;
  std::vector<std::byte> StateDict() const override;
  void LoadStateDict(std::span<const std::byte> state) override;

 private:
  CurrentScalingConfig config_;
};

}  // namespace mlframework::fp8
