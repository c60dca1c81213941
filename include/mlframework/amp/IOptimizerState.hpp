#pragma once
/// @file IOptimizerState.hpp
/// @brief An optimizer's state as checkpoints move it; implement it so that your optimizer's
/// state takes part in resharding checkpoints (distributed::fsdp::FSDP::SaveShardedCheckpoint()).

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// One parameter's FP32 state, as IOptimizerState::ImportState() takes it.
struct OptimizerParameterState {
  /// Master weights, one per element (rounded into FP16/BF16 parameters).
  std::vector<float> Master;
  /// The per-element state vectors in IOptimizerState::StateVectorNames() order, each one per
  /// element, or empty: no such vector yet (SGD's momentum before its first step).
  std::vector<std::vector<float>> Vectors;
};

/// Whether loading optimizer state may change how it is stored (optimizers::Adam::LoadStateDict(),
/// optimizers::SGD::LoadStateDict()).
///
/// - None: a state stored in another StateFormat or block size than the optimizer keeps, or
///   masters of another MasterFormat, are an ArgumentError naming them; what loads is bit for bit
///   what was saved.
/// - Convert: such states are decoded into FP32 and encoded in the optimizer's format (as its step
///   encodes them), masters likewise (FP32 into BF16 rounds to nearest even; into a BF16 parameter
///   with a remainder and back into FP32 is exact). A value the target format cannot hold (a
///   non-finite value, a finite one that would overflow, a negative second moment into unsigned
///   codes) is an ArgumentError naming the state, the parameter and the element.
enum class StateConversion : std::uint8_t {
  None,     ///< Formats must match.
  Convert,  ///< Convert into the optimizer's formats.
};

/// One state vector as the optimizer stores it: its format, its block size and its raw bytes.
/// Valid until the next step or load of the optimizer.
struct StoredStateVector {
  StateFormat Format = StateFormat::Float32;       ///< How the elements are stored.
  std::size_t BlockSize = kDefaultStateBlockSize;  ///< Elements per scale (block-scaled formats).
  std::span<const std::byte> Codes{};              ///< The elements: 4, 2 or 1 bytes each; empty: no such vector yet.
  std::span<const float> Scales{};                 ///< Block-scaled formats: one FP32 scale per block; else empty.
  /// A second moment: encoding keeps its positive values positive (StateFormat).
  bool KeepPositive = false;
};

/// One state vector in stored form, owned, as IOptimizerState::ImportStoredState() takes it.
struct StoredStateValues {
  StateFormat Format = StateFormat::Float32;       ///< How Codes are stored.
  std::size_t BlockSize = kDefaultStateBlockSize;  ///< Elements per scale (block-scaled formats).
  std::vector<std::byte> Codes;                    ///< The elements; empty: no such vector yet.
  /// Block-scaled formats: one per block; else empty. Float16 codes without scales are taken as
  /// plain FP16 values (as Float16 states were stored before that format was block-scaled) and
  /// converted to the block-scaled format on import.
  std::vector<float> Scales;
};

/// One parameter's master weights and state vectors in stored form (ImportStoredState()).
struct OptimizerStoredParameterState {
  std::vector<float> Master;               ///< Master weights in FP32, one per element.
  std::vector<StoredStateValues> Vectors;  ///< In IOptimizerState::StateVectorNames() order.
};

/// An optimizer's state in plain form: its kind and options, its step count and learning rate,
/// and per parameter its state vectors of one FP32 value per element (Adam's moments, SGD's
/// momentum buffer). A checkpoint that cuts the parameters differently from the optimizer
/// (FSDP's resharding checkpoints) cuts each state vector like its parameter and hands the
/// pieces back through ImportState(). An optimizer hands this interface out through
/// IOptimizer::State(); optimizers::Adam and optimizers::SGD implement it.
class MLFRAMEWORK_EXPORT IOptimizerState {
 public:
  virtual ~IOptimizerState();

  /// The optimizer's kind as a checkpoint stores it: a load accepts only state of the same
  /// kind. "SGD" and "Adam" are the library's optimizers; give your own another name.
  virtual std::string StateKind() const = 0;
  /// The options a load must find equal, by name, in a fixed order: every hyper-parameter but
  /// the learning rate, which a load restores (a scheduler changes it). Flags as 0 or 1.
  virtual std::vector<std::pair<std::string, double>> StateOptions() const = 0;
  /// The current learning rate.
  virtual double StateLearningRate() const noexcept = 0;
  /// Changes the learning rate; ArgumentError when not finite and positive.
  virtual void SetLearningRate(double learning_rate) = 0;
  /// Steps taken.
  virtual std::int64_t StepCount() const noexcept = 0;
  /// The parameter tensors the optimizer was built over, by name.
  virtual const GradientMap& Parameters() const noexcept = 0;
  /// Names of the per-element state vectors each parameter has (Adam: exp_avg, exp_avg_sq;
  /// SGD: momentum_buffer), in a fixed order; at most 16.
  virtual std::vector<std::string> StateVectorNames() const = 0;
  /// State vector @p index (StateVectorNames() order) of parameter @p name: one FP32 value per
  /// element, or empty when the optimizer has none yet; valid until the next step or import.
  /// ArgumentError naming `name` for an unknown parameter, `index` when out of range.
  virtual std::span<const float> StateVector(const std::string& name, std::size_t index) const = 0;
  /// State vector @p index of parameter @p name as it is stored. The default: StateVector()'s
  /// values as Float32; an optimizer that keeps states in lower precision overrides it.
  /// ArgumentError as StateVector().
  virtual StoredStateVector StoredState(const std::string& name, std::size_t index) const;
  /// ImportState() with the vectors in stored form: each in the format and block size
  /// StoredState() reports for it (a resharding checkpoint moves the codes and scales of
  /// block-scaled states as they are when the shards fall on whole blocks). ArgumentError naming
  /// `state` as ImportState(), and for a vector in another format or block size; nothing
  /// changes then. The default decodes Float32 vectors and calls ImportState().
  virtual void ImportStoredState(const std::map<std::string, OptimizerStoredParameterState>& state, std::int64_t steps);
  /// Replaces every parameter's master weights and state vectors, and the step count, at once.
  /// ArgumentError naming `state` when a parameter is missing or unknown, a vector has the
  /// wrong length or the wrong number of vectors is given, naming `steps` when negative;
  /// nothing changes then.
  virtual void ImportState(const std::map<std::string, OptimizerParameterState>& state, std::int64_t steps) = 0;
  /// How the master weights are kept. The default: MasterFormat::Float32 (FP32 parameters updated
  /// in place, or FP32 copies of 16-bit ones); optimizers::Adam and optimizers::SGD report their
  /// options' Masters. FSDP matches it against its shards' dtype (FSDPConfig::MasterDType).
  virtual MasterFormat StateMasterFormat() const noexcept;
  /// The master weights of parameter @p name in FP32, exact for every MasterFormat (under
  /// BFloat16Remainder the BF16 parameter joined with its remainder), as a resharding checkpoint
  /// stores them. The default: the parameter's own values, right for an optimizer that updates
  /// its parameters in place. ArgumentError naming `name` for an unknown parameter.
  virtual std::vector<float> StateMasterValues(const std::string& name) const;
  /// Sets, by parameter name, the index that element 0 of each parameter has in the counter of
  /// stochastic rounding (OptimizerStepLists::ElementOffsets); parameters not named get 0. A
  /// parameter that is a shard of a larger tensor gets the index of its first element in that
  /// tensor, so its steps draw the random bits of the same elements however the tensor is cut:
  /// distributed::fsdp::FSDP::Step() sets each unit's ShardOffset() before the step, so a run
  /// resharded to another world size continues bit for bit. The default ignores the offsets (an
  /// optimizer that draws no random bits per element needs none); optimizers::Adam and
  /// optimizers::SGD keep them. ArgumentError naming `offsets` for a name that is not a
  /// parameter, or an offset plus the parameter's element count above 2^64 - 1; nothing
  /// changes then.
  virtual void SetElementOffsets(const std::map<std::string, std::uint64_t>& offsets);
  /// The key of the random bits of stochastic rounding (OptimizerStepLists::RoundingSeed), which a
  /// resharding checkpoint stores so that a resumed run draws the bits of the saved one. The
  /// default: 0 (an optimizer that draws no random bits); optimizers::Adam and optimizers::SGD
  /// report their options' RoundingSeed.
  virtual std::uint64_t StateRoundingSeed() const noexcept;
  /// Replaces the rounding seed for the following steps (distributed::fsdp::FSDP::
  /// LoadShardedCheckpoint() restores the saved one, as it restores the learning rate). Every
  /// value is a valid seed. The default ignores it.
  virtual void SetRoundingSeed(std::uint64_t seed) noexcept;

 protected:
  /// Only implementations construct the interface.
  IOptimizerState() = default;
  /// Implementations may be copyable.
  IOptimizerState(const IOptimizerState&) = default;
  /// Implementations may be copy-assignable.
  IOptimizerState& operator=(const IOptimizerState&) = default;
};

}  // namespace mlframework::amp
