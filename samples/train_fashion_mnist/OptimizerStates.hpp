#pragma once
// The optimizer-state scenario's rows: how Adam keeps its moments and master weights, and
// what that costs in bytes, measured on the optimizer's own state.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/core/OptimizerStep.hpp>

namespace fashion_mnist {

/// How Adam stores exp_avg, exp_avg_sq and the master weights (AdamOptions formats).
struct OptimizerStates {
  std::string_view name = "fp32";  ///< Command-line name ("fp32", "bf16-moments", ...).
  std::string_view description = "FP32 moments, FP32 masters (baseline)";  ///< One line for the table.
  mlframework::StateFormat first = mlframework::StateFormat::Float32;      ///< exp_avg.
  mlframework::StateFormat second = mlframework::StateFormat::Float32;     ///< exp_avg_sq.
  mlframework::MasterFormat masters = mlframework::MasterFormat::Float32;  ///< Master weights.
};

/// Every row in table order; the first is the FP32 baseline.
std::vector<OptimizerStates> AllOptimizerStates();
/// True for FP32 moments and FP32 masters (the baseline the other rows are compared with).
bool IsBaseline(const OptimizerStates& states);
/// The row named @p name, if any.
std::optional<OptimizerStates> ParseOptimizerStates(std::string_view name);
/// The names of all rows, comma-separated (for messages).
std::string OptimizerStatesNames();

/// Bytes per parameter element an optimizer keeps beside the model's own parameters.
struct StateBytes {
  double state = 0.0;    ///< Per-element state vectors as stored: codes plus block scales.
  double masters = 0.0;  ///< Master weights: FP32 copies, or BF16 parameters and their remainders.
};

/// Measures @p optimizer's state (amp::IOptimizerState::StoredState() of every vector of every
/// parameter) and, for optimizers::Adam and optimizers::SGD, its masters (MasterWeights(), plus
/// Adam's MasterRemainders()), divided by the parameters' element count. Parameters that are
/// their own FP32 masters count 4 bytes, as the masters they are.
StateBytes MeasureStateBytes(mlframework::amp::IOptimizer& optimizer);

}  // namespace fashion_mnist
