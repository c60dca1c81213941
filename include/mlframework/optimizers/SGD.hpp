#pragma once
/// @file SGD.hpp
/// @brief Reference SGD with momentum, keeping FP32 master weights for FP16/BF16 parameters.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/export.hpp>

namespace mlframework::optimizers {

/// Hyper-parameters of SGD (PyTorch's semantics).
///
/// Doubles, as torch holds them (Python floats); the step's constants are computed from them as
/// torch computes them (SGDStepScalars).
struct SGDOptions {
  double LearningRate = 0.01;  ///< Step size (> 0, finite).
  double Momentum = 0.0;       ///< Momentum factor in [0, 1).
  double WeightDecay = 0.0;    ///< L2 penalty added to the gradient (>= 0).
  double Dampening = 0.0;      ///< Dampening of the gradient in the momentum buffer, in [0, 1].
  bool Nesterov = false;       ///< Nesterov momentum (needs Momentum > 0 and Dampening 0).
  /// How the momentum buffers are stored between steps: Float32, BFloat16, Float16, Int8Block or
  /// Float8E4M3Block.
  StateFormat MomentumFormat = StateFormat::Float32;
  /// Elements per FP32 scale of the block-scaled formats: a power of two from 32 to 2048.
  std::size_t StateBlockSize = kDefaultStateBlockSize;
  /// How the master weights are kept, as AdamOptions::Masters.
  MasterFormat Masters = MasterFormat::Float32;
  /// BFloat16StochasticRounding: the Philox key (OptimizerStepLists::RoundingSeed).
  std::uint64_t RoundingSeed = 0;
  /// ArgumentError naming the first invalid field and its value.
  MLFRAMEWORK_EXPORT void Validate() const;
};

/// One parameter's FP32 state, for SGD::RestoreState(): what a checkpoint that reshards
/// parameters (distributed::fsdp::FSDP::LoadShardedCheckpoint()) moves between shardings.
struct SGDParameterState {
  std::vector<float> Master;          ///< Master weights (rounded into FP16/BF16 parameters).
  std::vector<float> MomentumBuffer;  ///< One per element, or empty: no buffer yet (made at the next step).
};

/// Stochastic gradient descent over named parameters.
///
/// FP32 parameters are updated in place. For FP16/BF16 parameters the optimizer keeps an FP32
/// master copy, updates it, and writes the rounded values back into the parameter tensors in the
/// same pass. SGDOptions::MomentumFormat stores the momentum buffers in BF16, FP16 or 8-bit
/// block-scaled codes, and SGDOptions::Masters updates BF16 parameters directly (as Adam). Each
/// Step() runs the fused list step (FusedSGDStep()) with these formats: the same bits as that step
/// over the same lists (one call for the buffers this step makes, one for the others).
/// Gradients of any dtype are accepted and read in FP32.
class MLFRAMEWORK_EXPORT SGD final : public amp::IOptimizer, public amp::IOptimizerState {
 public:
  /// Optimizes @p parameters (name to tensor; tensors are updated in place).
  /// ArgumentError for an empty map, ArgumentNullError for a null tensor, invalid options, and
  /// for one tensor under two names or two tensors over overlapping host memory (a tied weight
  /// goes in once: under two names it would be updated twice a step), naming both entries.
  explicit SGD(GradientMap parameters, SGDOptions options = {});
  /// Releases the master weights and buffers.
  ~SGD() override;

  /// The gradients set by the last SetGradients() (empty before the first).
  GradientMap GetGradients() override;
  /// Every parameter needs a gradient of its shape (any dtype; read in FP32); unknown names,
  /// missing names, null tensors, shape mismatches and one tensor (or overlapping host memory)
  /// for two parameters, which a scaler would unscale twice, are ArgumentError and change nothing.
  void SetGradients(const GradientMap& gradients) override;
  /// Applies the current gradients (PyTorch's update: `d = g + wd*w`; momentum buffer
  /// `b = mu*b + (1 - dampening)*d`, a copy of `d` on the first step; `w -= lr * (nesterov ? d + mu*b : b)`),
  /// bit for bit the parameters and buffers of `torch.optim.SGD(foreach=False)` on the CPU under the
  /// matching CPU capability (SGDStepScalars), then rounds the FP32 masters into FP16/BF16 parameters.
  /// InvalidOperationError when no gradients were set.
  void Step() override;
  /// Step() unless the found-inf flag of @p skip_if_found_inf is set (a scaler's overflow):
  /// then nothing is read or written, the step count stays, and false is returned.
  bool Step(const DeviceScaleState& skip_if_found_inf);

  /// The parameter tensors as given.
  const GradientMap& Parameters() const noexcept override;
  /// The weights the update is applied to: the parameters themselves when they are FP32 or the
  /// masters are BF16 (SGDOptions::Masters), else their FP32 copies.
  const GradientMap& MasterWeights() const noexcept;
  /// Current hyper-parameters.
  const SGDOptions& Options() const noexcept;
  /// Changes the learning rate (schedulers); ArgumentError when not finite and positive.
  void SetLearningRate(double learning_rate) override;
  /// Steps taken.
  std::int64_t StepCount() const noexcept override;

  /// Momentum buffer of parameter @p name, one FP32 value per element (decoded from the stored
  /// format), valid until the next
  /// Step() or load; empty until the first step with Momentum > 0 (PyTorch makes it lazily).
  /// ArgumentError naming `name` for an unknown parameter.
  std::span<const float> MomentumBuffer(const std::string& name) const;
  /// Replaces every parameter's master weights (rounded back into FP16/BF16 parameters, into BF16
  /// masters as Adam::RestoreState()) and momentum buffer (encoded in SGDOptions::MomentumFormat),
  /// and the step count, at once: for checkpoints that cut the state differently from
  /// StateDict() (resharding). ArgumentError naming `state` when a parameter is missing or
  /// unknown, a vector has the wrong length (a momentum buffer may be empty) or holds a value its
  /// format cannot hold, naming `steps` when negative; nothing changes then.
  void RestoreState(const std::map<std::string, SGDParameterState>& state, std::int64_t steps);

  /// This optimizer's state for checkpoints: itself.
  amp::IOptimizerState* State() noexcept override { return this; }
  /// "SGD".
  std::string StateKind() const override;
  /// Momentum, WeightDecay, Nesterov (0 or 1).
  std::vector<std::pair<std::string, double>> StateOptions() const override;
  /// Options().LearningRate.
  double StateLearningRate() const noexcept override;
  /// {"momentum_buffer"}.
  std::vector<std::string> StateVectorNames() const override;
  /// MomentumBuffer() of @p name (index 0).
  std::span<const float> StateVector(const std::string& name, std::size_t index) const override;
  /// The momentum buffer of @p name (index 0) as stored: format, block size, codes and scales
  /// (no codes before the buffer is made).
  amp::StoredStateVector StoredState(const std::string& name, std::size_t index) const override;
  /// RestoreState() with the vectors in StateVectorNames() order (an empty vector: no momentum buffer yet).
  void ImportState(const std::map<std::string, amp::OptimizerParameterState>& state, std::int64_t steps) override;
  /// Options().Masters.
  MasterFormat StateMasterFormat() const noexcept override;
  /// The FP32 master weights of @p name, exact for every MasterFormat; ArgumentError naming `name`
  /// for an unknown parameter.
  std::vector<float> StateMasterValues(const std::string& name) const override;
  /// Keeps the offsets for the following steps (OptimizerStepLists::ElementOffsets); ArgumentError
  /// as IOptimizerState::SetElementOffsets().
  void SetElementOffsets(const std::map<std::string, std::uint64_t>& offsets) override;
  /// Options().RoundingSeed.
  std::uint64_t StateRoundingSeed() const noexcept override;
  /// Sets Options().RoundingSeed.
  void SetRoundingSeed(std::uint64_t seed) noexcept override;
  /// The vectors in stored form, each in this optimizer's format and block size (StoredState()),
  /// taken bit for bit; as RestoreState() otherwise.
  void ImportStoredState(const std::map<std::string, amp::OptimizerStoredParameterState>& state,
                         std::int64_t steps) override;

  /// Versioned blob of options, the master format and FP32 master weights, the momentum buffers as
  /// stored (format, block size, codes, scales) and the step count.
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(), as Adam::LoadStateDict(): formats must match unless
  /// @p conversion is amp::StateConversion::Convert; an older blob holds FP32 state.
  /// ArgumentError for a corrupted or mismatched blob (state unchanged).
  void LoadStateDict(std::span<const std::byte> state, amp::StateConversion conversion = amp::StateConversion::None);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::optimizers
