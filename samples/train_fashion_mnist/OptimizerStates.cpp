#include "OptimizerStates.hpp"

#include <array>
#include <cstddef>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

namespace fashion_mnist {

namespace {

using mlframework::MasterFormat;
using mlframework::StateFormat;

constexpr std::array<OptimizerStates, 9> kStates = {{
    {"fp32", "FP32 moments, FP32 masters (baseline)", StateFormat::Float32, StateFormat::Float32,
     MasterFormat::Float32},
    {"bf16-moments", "BF16 moments", StateFormat::BFloat16, StateFormat::BFloat16, MasterFormat::Float32},
    {"fp16-moments", "FP16 moments", StateFormat::Float16, StateFormat::Float16, MasterFormat::Float32},
    {"8bit-moments", "8-bit block moments (Int8 / UInt8)", StateFormat::Int8Block, StateFormat::UInt8Block,
     MasterFormat::Float32},
    {"fp8-moments", "FP8 E4M3 block moments", StateFormat::Float8E4M3Block, StateFormat::Float8E4M3Block,
     MasterFormat::Float32},
    {"fp8-fp16-moments", "FP8 E4M3 block exp_avg, FP16 exp_avg_sq", StateFormat::Float8E4M3Block, StateFormat::Float16,
     MasterFormat::Float32},
    {"bf16-sr", "BF16 masters, stochastic rounding", StateFormat::Float32, StateFormat::Float32,
     MasterFormat::BFloat16StochasticRounding},
    {"bf16-remainder", "BF16 masters + 16-bit remainder", StateFormat::Float32, StateFormat::Float32,
     MasterFormat::BFloat16Remainder},
    {"8bit-bf16-sr", "8-bit moments, BF16 masters with SR", StateFormat::Int8Block, StateFormat::UInt8Block,
     MasterFormat::BFloat16StochasticRounding},
}};

std::size_t Bytes(const mlframework::GradientMap& tensors) {
  std::size_t bytes = 0;
  for (const auto& [name, tensor] : tensors) {
    bytes += tensor->Size() * mlframework::ElementSize(tensor->GetDataType());
  }
  return bytes;
}

}  // namespace

std::vector<OptimizerStates> AllOptimizerStates() { return {kStates.begin(), kStates.end()}; }

bool IsBaseline(const OptimizerStates& states) {
  return states.first == StateFormat::Float32 && states.second == StateFormat::Float32 &&
         states.masters == MasterFormat::Float32;
}

std::optional<OptimizerStates> ParseOptimizerStates(std::string_view name) {
  for (const OptimizerStates& states : kStates) {
    if (states.name == name) {
      return states;
    }
  }
  return std::nullopt;
}

std::string OptimizerStatesNames() {
  std::string names;
  for (const OptimizerStates& states : kStates) {
    if (!names.empty()) {
      names += ',';
    }
    names += states.name;
  }
  return names;
}

StateBytes MeasureStateBytes(mlframework::amp::IOptimizer& optimizer) {
  mlframework::amp::IOptimizerState* state = optimizer.State();
  if (state == nullptr) {
    throw mlframework::ArgumentError("optimizer", "exposes no state (IOptimizer::State() is null)");
  }
  std::size_t elements = 0;
  std::size_t state_bytes = 0;
  const std::size_t vectors = state->StateVectorNames().size();
  for (const auto& [name, parameter] : state->Parameters()) {
    elements += parameter->Size();
    for (std::size_t v = 0; v < vectors; ++v) {
      const mlframework::amp::StoredStateVector stored = state->StoredState(name, v);
      state_bytes += stored.Codes.size() + stored.Scales.size() * sizeof(float);
    }
  }
  std::size_t master_bytes = 0;
  if (const auto* adam = dynamic_cast<const mlframework::optimizers::Adam*>(&optimizer)) {
    master_bytes = Bytes(adam->MasterWeights()) + Bytes(adam->MasterRemainders());
  } else if (const auto* sgd = dynamic_cast<const mlframework::optimizers::SGD*>(&optimizer)) {
    master_bytes = Bytes(sgd->MasterWeights());
  }
  const auto per_element = [elements](std::size_t bytes) {
    return elements == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(elements);
  };
  return {.state = per_element(state_bytes), .masters = per_element(master_bytes)};
}

}  // namespace fashion_mnist
