#pragma once
/// @file Adam.hpp
/// @brief Reference Adam / AdamW, keeping FP32 master weights for FP16/BF16 parameters.

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

/// Hyper-parameters of Adam (PyTorch's semantics); AdamW when DecoupledWeightDecay is set.
///
/// Doubles, as torch holds them (Python floats): `lr=1e-3` here is the double 1e-3, and the
/// step's constants are computed from the doubles as torch computes them (AdamStepScalars).
struct AdamOptions {
  double LearningRate = 1e-3;         ///< Step size (> 0, finite).
  double Beta1 = 0.9;                 ///< First-moment decay in [0, 1).
  double Beta2 = 0.999;               ///< Second-moment decay in [0, 1).
  double Epsilon = 1e-8;              ///< Denominator term (> 0).
  double WeightDecay = 0.0;           ///< Weight decay (>= 0).
  bool DecoupledWeightDecay = false;  ///< true: AdamW (decay applied to weights, not gradients).
  /// How exp_avg is stored between steps: Float32, BFloat16, Float16, Int8Block or Float8E4M3Block.
  StateFormat FirstMomentFormat = StateFormat::Float32;
  /// How exp_avg_sq is stored between steps: Float32, BFloat16, Float16, UInt8Block or Float8E4M3Block.
  StateFormat SecondMomentFormat = StateFormat::Float32;
  /// Elements per FP32 scale of the block-scaled formats: a power of two from 32 to 2048.
  std::size_t StateBlockSize = kDefaultStateBlockSize;
  /// How the master weights are kept: Float32 (FP32 parameters are their own masters, FP16/BF16
  /// parameters get an FP32 copy), or, for BF16 parameters in host memory only, the parameters
  /// themselves rounded stochastically (BFloat16StochasticRounding) or with a 16-bit remainder
  /// the optimizer keeps (BFloat16Remainder: exact FP32 masters at 4 bytes per parameter).
  MasterFormat Masters = MasterFormat::Float32;
  /// BFloat16StochasticRounding: the Philox key (OptimizerStepLists::RoundingSeed).
  std::uint64_t RoundingSeed = 0;
  /// ArgumentError naming the first invalid field and its value.
  MLFRAMEWORK_EXPORT void Validate() const;
  /// AdamW options with @p learning_rate and @p weight_decay.
  static AdamOptions AdamW(double learning_rate = 1e-3, double weight_decay = 1e-2) {
    return AdamOptions{.LearningRate = learning_rate, .WeightDecay = weight_decay, .DecoupledWeightDecay = true};
  }
};

/// One parameter's state in FP32, for Adam::RestoreState(): what a checkpoint that reshards
/// parameters (distributed::fsdp::FSDP::LoadShardedCheckpoint()) moves between shardings.
struct AdamParameterState {
  std::vector<float> Master;         ///< Master weights (rounded into FP16/BF16 parameters).
  std::vector<float> FirstMoments;   ///< exp_avg, one per element.
  std::vector<float> SecondMoments;  ///< exp_avg_sq, one per element.
};

/// Adam over named parameters, with moments and master weights in the formats of its options.
///
/// By default the moments and masters are FP32: FP32 parameters are updated in place (no extra
/// copy: 16 bytes of state per parameter with its gradient, the ZeRO figure), and for FP16/BF16
/// parameters the optimizer keeps an FP32 master copy and writes the rounded values back in the
/// same pass. AdamOptions::FirstMomentFormat / SecondMomentFormat store the moments in BF16, FP16
/// or 8-bit block-scaled codes, and AdamOptions::Masters updates BF16 parameters directly
/// (stochastic rounding, or exact with a 16-bit remainder). Each Step() is one fused list step
/// (FusedAdamStep()) with these formats: the same bits as that step over the same lists.
/// Gradients of any dtype are accepted and read in FP32.
class MLFRAMEWORK_EXPORT Adam final : public amp::IOptimizer, public amp::IOptimizerState {
 public:
  /// Optimizes @p parameters (name to tensor; tensors are updated in place).
  /// ArgumentError for an empty map, ArgumentNullError for a null tensor, invalid options, and
  /// for one tensor under two names or two tensors over overlapping host memory (a tied weight
  /// goes in once: under two names it would be updated twice a step), naming both entries.
  explicit Adam(GradientMap parameters, AdamOptions options = {});
  /// Releases the master weights and moments.
  ~Adam() override;

  /// The gradients set by the last SetGradients() (empty before the first).
  GradientMap GetGradients() override;
  /// Every parameter needs a gradient of its shape (any dtype; read in FP32); unknown names,
  /// missing names, null tensors, shape mismatches and one tensor (or overlapping host memory)
  /// for two parameters, which a scaler would unscale twice, are ArgumentError and change nothing.
  void SetGradients(const GradientMap& gradients) override;
  /// Applies the current gradients with PyTorch's Adam/AdamW update, bit for bit the parameters
  /// and moments of `torch.optim.Adam/AdamW(foreach=False)` on the CPU under the matching CPU
  /// capability (AdamStepScalars), then rounds the FP32 masters into FP16/BF16 parameters. InvalidOperationError when
  /// no gradients were set.
  void Step() override;
  /// Step() unless the found-inf flag of @p skip_if_found_inf is set (a scaler's overflow):
  /// then nothing is read or written, the step count stays, and false is returned.
  bool Step(const DeviceScaleState& skip_if_found_inf);

  /// The parameter tensors as given.
  const GradientMap& Parameters() const noexcept override;
  /// The weights the update is applied to: the parameters themselves when they are FP32 or the
  /// masters are BF16 (AdamOptions::Masters), else their FP32 copies.
  const GradientMap& MasterWeights() const noexcept;
  /// AdamOptions::Masters BFloat16Remainder: each parameter's 16-bit remainders by name (BF16
  /// tensors of the parameter's shape holding raw bits: the FP32 master's low halves, which
  /// with the BF16 parameter reconstruct it exactly); empty under the other master formats.
  /// With MasterWeights() it is everything the masters occupy.
  const GradientMap& MasterRemainders() const noexcept;
  /// Current hyper-parameters.
  const AdamOptions& Options() const noexcept;
  /// Changes the learning rate (schedulers); ArgumentError when not finite and positive.
  void SetLearningRate(double learning_rate) override;
  /// Steps taken (bias correction uses it).
  std::int64_t StepCount() const noexcept override;

  /// First moments (exp_avg) of parameter @p name, one FP32 value per element (decoded from the
  /// stored format), valid until the next Step() or load; ArgumentError naming `name` for an
  /// unknown parameter.
  std::span<const float> FirstMoments(const std::string& name) const;
  /// Second moments (exp_avg_sq) of parameter @p name, as FirstMoments().
  std::span<const float> SecondMoments(const std::string& name) const;
  /// Replaces every parameter's master weights (rounded back into FP16/BF16 parameters; into BF16
  /// masters rounded to nearest, or split exactly with a remainder) and moments (encoded in the
  /// options' formats: exact for values of the same FP32/BF16/FP16 format, block-scaled states get
  /// new scales), and the step count, at once: for checkpoints that cut the state differently from
  /// StateDict() (resharding). ArgumentError naming `state` when a parameter is missing or
  /// unknown, a vector has the wrong length or holds a value its format cannot hold, naming
  /// `steps` when negative; nothing changes then.
  void RestoreState(const std::map<std::string, AdamParameterState>& state, std::int64_t steps);

  /// This optimizer's state for checkpoints: itself.
  amp::IOptimizerState* State() noexcept override { return this; }
  /// "Adam".
  std::string StateKind() const override;
  /// Beta1, Beta2, Epsilon, WeightDecay, DecoupledWeightDecay (0 or 1).
  std::vector<std::pair<std::string, double>> StateOptions() const override;
  /// Options().LearningRate.
  double StateLearningRate() const noexcept override;
  /// {"exp_avg", "exp_avg_sq"}.
  std::vector<std::string> StateVectorNames() const override;
  /// FirstMoments() (index 0) or SecondMoments() (index 1) of @p name.
  std::span<const float> StateVector(const std::string& name, std::size_t index) const override;
  /// exp_avg (index 0) or exp_avg_sq (index 1) of @p name as stored: its format, block size, codes and scales.
  amp::StoredStateVector StoredState(const std::string& name, std::size_t index) const override;
  /// RestoreState() with the vectors in StateVectorNames() order.
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

  /// Versioned blob of options, the master format and FP32 master weights (exact for every
  /// MasterFormat), each moment as stored (format, block size, codes, scales) and the step count.
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(): the hyper-parameters, the rounding seed, the masters, the
  /// moments and the step count; a blob of an older version holds FP32 moments and masters. The
  /// states and masters keep this optimizer's formats and block size: a blob that stores them
  /// otherwise is an ArgumentError naming `state` unless @p conversion is
  /// amp::StateConversion::Convert. ArgumentError for a corrupted or mismatched blob or a value
  /// that cannot be converted; the state is unchanged then.
  void LoadStateDict(std::span<const std::byte> state, amp::StateConversion conversion = amp::StateConversion::None);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::optimizers
