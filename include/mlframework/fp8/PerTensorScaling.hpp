#pragma once
/// @file PerTensorScaling.hpp
/// @brief The part of the per-tensor recipes (DelayedScaling, CurrentScaling) that does not
/// depend on how a scale is chosen: the registered tensors and their state on the device.

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/export.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>

namespace mlframework::fp8 {

namespace detail {
class ScaleTable;
}  // namespace detail

/// A recipe with one scale, inverse scale and amax history per registered tensor, kept in one
/// FP32 state tensor per device (Transformer Engine's `scale`, `scale_inv` and
/// `amax_history`). Subclasses say how Quantize() and UpdateScales() choose the scales and
/// what their StateDict() holds besides the per-tensor entries.
class MLFRAMEWORK_EXPORT PerTensorScaling : public IScalingRecipe {
 public:
  /// Releases the state tensors.
  ~PerTensorScaling() override;
  /// Not copyable (the state tensors are not shared).
  PerTensorScaling(const PerTensorScaling&) = delete;
  /// Not copy-assignable.
  PerTensorScaling& operator=(const PerTensorScaling&) = delete;

  void Register(const std::string& name, TensorRole role, const ITensor& like) override;
  bool IsRegistered(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  DataType Float8TypeOf(const std::string& name) const override;
  void Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                  std::span<const TensorPtr> dst) const override;
  TensorPtr Scale(const std::string& name) const override;
  TensorPtr ScaleInv(const std::string& name) const override;
  TensorPtr Amax(const std::string& name) const override;

 protected:
  /// The state of @p format with @p history_rows amax entries per tensor.
  PerTensorScaling(Format format, std::size_t history_rows);
  /// Movable (for the subclasses' moves).
  PerTensorScaling(PerTensorScaling&&) noexcept;
  /// Move-assignable.
  PerTensorScaling& operator=(PerTensorScaling&&) noexcept;

  /// The registered tensors' state; InvalidOperationError once the recipe was moved from.
  detail::ScaleTable& Table() const;

 private:
  std::unique_ptr<detail::ScaleTable> table_;
};

}  // namespace mlframework::fp8
