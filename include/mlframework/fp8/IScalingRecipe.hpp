#pragma once
/// @file IScalingRecipe.hpp
/// @brief The interface of FP8 scaling recipes: per-tensor scales, quantize, update, state.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>
#include <mlframework/fp8/Format.hpp>

namespace mlframework::fp8 {

/// An FP8 scaling recipe: the scale of every registered tensor, how quantizing records its amax,
/// and how the scales follow the amax (Transformer Engine's recipes: DelayedScaling,
/// CurrentScaling). Implement it, as you subclass amp::ILossScaler, for a policy of your own.
///
/// Use per training iteration: Quantize() the registered tensors into FP8 (each cast multiplies
/// by the tensor's scale and records the input's amax), compute on them (Dequantize() decodes
/// with scale_inv), and call UpdateScales() once at the end of the iteration, as Transformer
/// Engine updates its scales after the step.
///
/// The scale state of a registered tensor lives on that tensor's device: Scale() and ScaleInv()
/// are one-element FP32 tensors there. Every member that takes names throws ArgumentError naming
/// the parameter and the value for a name that is not registered, and changes nothing then.
class MLFRAMEWORK_EXPORT IScalingRecipe {
 public:
  /// Implementations are destroyed through the interface.
  virtual ~IScalingRecipe();

  /// Short name of the recipe ("DelayedScaling", "CurrentScaling").
  virtual std::string_view Name() const noexcept = 0;

  /// Registers @p name with @p role; its state (scale 1, amax history 0) lives on the device of
  /// @p like, a tensor of the kind that will be quantized under this name (its backend allocates
  /// the state). ArgumentError for an empty or already registered name.
  virtual void Register(const std::string& name, TensorRole role, const ITensor& like) = 0;
  /// True when @p name is registered.
  virtual bool IsRegistered(const std::string& name) const = 0;
  /// The registered names, in registration order.
  virtual std::vector<std::string> Names() const = 0;
  /// The FP8 element type the recipe quantizes @p name into (its format and role).
  virtual DataType Float8TypeOf(const std::string& name) const = 0;

  /// `dst[i] = saturate(src[i] * scale(names[i]))` rounded into dst[i]'s FP8 type, recording the
  /// amax of src[i] for names[i]. ArgumentError (nothing written) when the spans differ in size, a
  /// name is unknown, a source is FP8, a destination is not the name's FP8 type, shapes differ, or
  /// a tensor is not on the name's device and backend (a tensor without a backend counts as on the
  /// CPU backend when the host addresses its elements, and is refused otherwise).
  virtual void Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                        std::span<const TensorPtr> dst) = 0;
  /// `dst[i] = src[i] * scale_inv(names[i])` widened into dst[i]'s type (FP32, FP16, BF16); the
  /// checks of Quantize() with the roles of source and destination swapped.
  virtual void Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                          std::span<const TensorPtr> dst) const = 0;
  /// Turns the recorded amax into new scales (the end of an iteration).
  virtual void UpdateScales() = 0;

  /// The scale of @p name: a one-element FP32 view of the state on its device (valid until the
  /// next Register()).
  virtual TensorPtr Scale(const std::string& name) const = 0;
  /// The inverse scale of @p name, as Scale().
  virtual TensorPtr ScaleInv(const std::string& name) const = 0;
  /// The amax recorded for @p name since the last UpdateScales(), as Scale(): writing it replaces
  /// the recorded value (how an amax agreed across ranks, all-reduced MAX, goes back in).
  virtual TensorPtr Amax(const std::string& name) const = 0;

  /// The state as a versioned, checksummed blob (core's state blob frame). Its size depends on
  /// the registered tensors and the configuration only, never on how often it was saved.
  virtual std::vector<std::byte> StateDict() const = 0;
  /// Restores StateDict() output. ArgumentError naming what differs (version, configuration,
  /// names, formats) or what is wrong (truncation, checksum, values), with the state unchanged.
  virtual void LoadStateDict(std::span<const std::byte> state) = 0;

 protected:
  /// Only implementations construct the interface.
  IScalingRecipe() = default;
  /// Implementations may be copyable.
  IScalingRecipe(const IScalingRecipe&) = default;
  /// Implementations may be copy-assignable.
  IScalingRecipe& operator=(const IScalingRecipe&) = default;
};

}  // namespace mlframework::fp8
