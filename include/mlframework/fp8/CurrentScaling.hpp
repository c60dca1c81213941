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

namespace mlframework::fp8 {

namespace detail {
class ScaleTable;
}  // namespace detail

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
/// Scale(), ScaleInv() and Amax() are those of the latest Quantize() of the name;
/// UpdateScales() changes nothing (the scales follow each cast). StateDict() holds the format
/// and, per tensor, its name, role, latest amax, scale and scale_inv.
class MLFRAMEWORK_EXPORT CurrentScaling final : public IScalingRecipe {
 public:
  /// ArgumentError naming `config.Fp8Format` for a format outside the enum.
  explicit CurrentScaling(CurrentScalingConfig config = {});
  /// Releases the state tensors.
  ~CurrentScaling() override;
  /// Movable.
  CurrentScaling(CurrentScaling&&) noexcept;
  /// Move-assignable.
  CurrentScaling& operator=(CurrentScaling&&) noexcept;
  /// Not copyable (the state tensors are not shared).
  CurrentScaling(const CurrentScaling&) = delete;
  /// Not copy-assignable.
  CurrentScaling& operator=(const CurrentScaling&) = delete;

  /// The configuration.
  const CurrentScalingConfig& Config() const noexcept { return config_; }

  std::string_view Name() const noexcept override { return "CurrentScaling"; }
  void Register(const std::string& name, TensorRole role, const ITensor& like) override;
  bool IsRegistered(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  DataType Float8TypeOf(const std::string& name) const override;
  void Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                std::span<const TensorPtr> dst) override;
  void Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                  std::span<const TensorPtr> dst) const override;
  void UpdateScales() override;
  TensorPtr Scale(const std::string& name) const override;
  TensorPtr ScaleInv(const std::string& name) const override;
  TensorPtr Amax(const std::string& name) const override;
  std::vector<std::byte> StateDict() const override;
  void LoadStateDict(std::span<const std::byte> state) override;

 private:
  CurrentScalingConfig config_;
  std::unique_ptr<detail::ScaleTable> table_;
};

}  // namespace mlframework::fp8
