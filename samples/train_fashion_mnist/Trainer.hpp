#pragma once
// Trains the MLP on Fashion-MNIST in one precision mode and measures what the
// loss scaling did: accuracy, loss, underflow, skipped steps, scale, timing.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/DataType.hpp>

#include "IdxReader.hpp"
#include "Mlp.hpp"
#include "OptimizerStates.hpp"

namespace fashion_mnist {

/// The precision modes compared side by side.
enum class Mode {
  kFp32,            ///< FP32 everywhere (the reference).
  kFp16,            ///< FP16 storage, no loss scaling.
  kFp16Scaler,      ///< FP16 storage, amp::GradScaler (dynamic) through GradScalerContext.
  kFp16Conversion,  ///< FP16 storage, GradientConversionLayer (dynamic scaling and clipping).
  kBf16,            ///< BF16 storage, no loss scaling.
  /// FP8 storage (E4M3 weights and activations, E5M2 gradients) under fp8::DelayedScaling, FP32
  /// master weights and biases; the products run in FP32 on the decoded values.
  kFp8,
};

/// Command-line name of @p mode ("fp32", "fp16", "fp16-scaler", "fp16-layer", "bf16", "fp8").
std::string_view ModeName(Mode mode);
/// One-line description of @p mode for the table.
std::string_view ModeDescription(Mode mode);
/// Storage dtype of @p mode (Float8E4M3FN for fp8, whose gradients are Float8E5M2).
mlframework::DataType ModeStorage(Mode mode);
/// The mode named @p name, if any.
std::optional<Mode> ParseMode(std::string_view name);
/// All modes in table order.
std::vector<Mode> AllModes();

/// How the loss is reduced over a batch.
enum class Reduction { kMean, kSum };

/// Everything that shapes a run; the same for every mode.
struct TrainConfig {
  std::vector<std::size_t> hidden = {128};  ///< Hidden layer widths.
  int epochs = 2;                           ///< Passes over the training subset.
  std::size_t batch_size = 128;             ///< Examples per step.
  std::size_t subset = 0;                   ///< Training examples used (0: all).
  std::string optimizer = "adam";           ///< "adam" or "sgd".
  float learning_rate = 1e-3f;              ///< Optimizer step size.
  Reduction reduction = Reduction::kMean;   ///< Loss reduction over the batch.
  float loss_weight = 1.0f;                 ///< Factor on the loss (as an auxiliary loss weight would be).
  float init_gain = 1.0f;                   ///< Factor on the He initialization.
  float initial_scale = 65536.0f;           ///< Initial loss scale of the scaling modes.
  int growth_interval = 100;   ///< Clean steps before the scale doubles (short, so a demo run shows it move).
  float max_grad_norm = 1.0f;  ///< Clipping threshold of the fp16-layer mode.
  std::uint64_t seed = 42;     ///< Initialization and shuffling seed.
  bool progress = true;        ///< Print a progress line on stderr.
  /// Overflow summaries of the scaling modes on stderr (the library's OverflowLogger: one line
  /// per burst of overflows, not one per overflow).
  bool log_overflows = true;
  /// When not empty: the scaling modes also write the library's per-step CSV (TrainingCsvWriter:
  /// step, scale, skipped, grad_norm, overflowing tensors) to `<steps_csv_dir>/<mode>-steps.csv`.
  std::string steps_csv_dir;
  int fp8_margin = 0;                  ///< DelayedScaling margin of the fp8 mode.
  std::size_t fp8_history_len = 1024;  ///< DelayedScaling amax history length of the fp8 mode.
  std::string fp8_amax_algo = "max";   ///< DelayedScaling amax_compute_algo: "max" or "most_recent".
  /// How Adam keeps its moments and masters (BF16 masters need the bf16 mode's parameters);
  /// the rounding seed of stochastic rounding is `seed`.
  OptimizerStates states;
};

/// One training step as recorded in the CSV.
struct StepRecord {
  std::int64_t step = 0;  ///< 1-based step number.
  double loss = 0.0;      ///< Mean cross-entropy per example of the batch (before weight and scale).
  float scale = 1.0f;     ///< Loss scale used for this step (1 without scaling).
  bool skipped = false;   ///< The optimizer step was skipped (overflow).
};

/// One FP8 tensor's delayed-scaling state at the end of a step.
struct Fp8Record {
  std::int64_t step = 0;  ///< 1-based step number.
  std::string tensor;     ///< The recipe's name of the tensor ("layer0.weight", "layer1.grad_output", ...).
  float amax = 0.0f;      ///< The amax the step's casts of the tensor recorded.
  float scale = 1.0f;     ///< The scale UpdateScales() computed for the next step.
};

/// What one mode achieved.
struct ModeResult {
  Mode mode = Mode::kFp32;          ///< The mode.
  double test_accuracy = 0.0;       ///< Share of the test set classified correctly.
  double final_loss = 0.0;          ///< Mean training loss over the last epoch.
  UnderflowCount underflow;         ///< Backward values flushed to zero when rounded into storage.
  std::int64_t steps = 0;           ///< Steps taken (including skipped ones).
  std::int64_t skipped = 0;         ///< Steps the scaler skipped.
  float final_scale = 1.0f;         ///< Loss scale at the end (1 without scaling).
  std::int64_t clip_count = 0;      ///< Times the gradient pipeline clipped (fp16-layer only).
  double seconds_per_step = 0.0;    ///< CPU time (all threads) per step: forward, backward, scaling, optimizer.
  double scaling_seconds = 0.0;     ///< CPU time inside the library's scaling code (not the optimizer).
  double total_seconds = 0.0;       ///< CPU time of all steps.
  std::vector<StepRecord> records;  ///< Per-step loss and scale.
  std::vector<Fp8Record> fp8;       ///< Per-step amax and scale of every FP8 tensor (fp8 mode only).
  OptimizerStates states;           ///< How the optimizer kept its moments and masters.
  StateBytes state_bytes;           ///< What they took per parameter, measured at the end.
};

/// Trains one mode from the same initialization and batch order as every other mode.
ModeResult TrainMode(const Dataset& data, const TrainConfig& config, Mode mode);

/// The training examples a run uses: the first `config.subset` (all when 0). ArgumentError
/// naming `batch_size` unless `config.batch_size` is 1 to that count.
std::size_t TrainingExamples(const Split& train, const TrainConfig& config);
/// The order of the training examples in epoch @p epoch: the same for every mode and rank.
std::vector<std::size_t> EpochOrder(std::size_t examples, std::uint64_t seed, int epoch);
/// Copies the examples @p indices of @p split into @p inputs (one row each) and @p labels.
void FillBatch(const Split& split, std::span<const std::size_t> indices, std::span<float> inputs,
               std::span<std::uint8_t> labels);
/// Share of @p test that @p model classifies correctly.
double Evaluate(Mlp& model, const Split& test);

}  // namespace fashion_mnist
