#pragma once
// Trains the Fashion-MNIST MLP under FSDP (one unit per layer, FP32 masters sharded over the
// ranks, Adam on the shards) with one gradient wire, and counts the bytes each rank sends.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>

#include "CountingProcessGroup.hpp"
#include "IdxReader.hpp"
#include "Trainer.hpp"

namespace fashion_mnist {

/// What FSDP's gradient reductions send (FSDPConfig::ReduceDType and Wire).
struct WireSpec {
  std::string_view name;                                                ///< Command-line name: "fp32", "bf16" or "fp8".
  std::string_view description;                                         ///< One line for the table.
  mlframework::DataType reduce_dtype = mlframework::DataType::Float32;  ///< FSDPConfig::ReduceDType.
  mlframework::distributed::fsdp::GradientWire wire =
      mlframework::distributed::fsdp::GradientWire::ReduceDType;  ///< FSDPConfig::Wire.
};

/// Every wire in table order; the first (FP32) is the baseline.
std::vector<WireSpec> AllWires();
/// The wire named @p name, if any.
std::optional<WireSpec> ParseWire(std::string_view name);

/// What one wire achieved, the same on every rank.
struct WireResult {
  WireSpec wire;               ///< The wire.
  double test_accuracy = 0.0;  ///< Share of the test set classified correctly.
  double final_loss = 0.0;     ///< Mean training loss over the last epoch (all ranks' examples).
  std::int64_t steps = 0;      ///< Optimizer steps.
  SentBytes sent;              ///< Bytes this rank sent over the whole run.
};

/// Trains the MLP of @p config in FP32 under FSDP FullShard over @p world: each step's global
/// batch (the batches TrainMode() uses, `config.batch_size` examples) is split evenly over the
/// ranks, each layer is an FSDP unit gathered in FP32, and the gradients are reduced through
/// @p wire. ArgumentError naming `batch_size` unless it is a multiple of the world size, or
/// naming `optimizer` for anything but Adam with FP32 states. A collective: every rank calls it.
WireResult TrainFsdp(const Dataset& data, const TrainConfig& config, const WireSpec& wire,
                     const std::shared_ptr<mlframework::distributed::IProcessGroup>& world);

}  // namespace fashion_mnist
