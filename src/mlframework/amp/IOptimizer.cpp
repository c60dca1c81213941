#include <mlframework/amp/IOptimizer.hpp>

#include <cstring>
#include <string>
#include <utility>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/Error.hpp>

namespace mlframework::amp {

// Out of line so the vtable and type info live in the library (one definition across the boundary).
IOptimizer::~IOptimizer() = default;

IOptimizerState* IOptimizer::State() noexcept { return nullptr; }

IOptimizerState::~IOptimizerState() = default;

MasterFormat IOptimizerState::StateMasterFormat() const noexcept { return MasterFormat::Float32; }

std::vector<float> IOptimizerState::StateMasterValues(const std::string& name) const {
  const GradientMap& parameters = Parameters();
  const auto it = parameters.find(name);
  if (it == parameters.end() || !it->second) {
    throw ArgumentError("name", "the optimizer has no parameter '" + name + "'");
  }
  return it->second->ToFloatVector();
}

void IOptimizerState::SetElementOffsets(const std::map<std::string, std::uint64_t>& /*offsets*/) {}

std::uint64_t IOptimizerState::StateRoundingSeed() const noexcept { return 0; }

void IOptimizerState::SetRoundingSeed(std::uint64_t /*seed*/) noexcept {}

StoredStateVector IOptimizerState::StoredState(const std::string& name, std::size_t index) const {
  return StoredStateVector{.Format = StateFormat::Float32, .Codes = std::as_bytes(StateVector(name, index))};
}

void IOptimizerState::ImportStoredState(const std::map<std::string, OptimizerStoredParameterState>& state,
                                        std::int64_t steps) {
  std::map<std::string, OptimizerParameterState> plain;
  for (const auto& [name, entry] : state) {
    OptimizerParameterState& out = plain[name];
    out.Master = entry.Master;
    for (std::size_t v = 0; v < entry.Vectors.size(); ++v) {
      const StoredStateValues& stored = entry.Vectors[v];
      if (stored.Format != StateFormat::Float32) {
        throw ArgumentError("state", "state vector " + std::to_string(v) + " of parameter '" + name + "' is " +
                                         ToString(stored.Format) + ", but " + StateKind() +
                                         " takes its state in FP32 (StoredState() reports Float32)");
      }
      std::vector<float> values(stored.Codes.size() / sizeof(float));
      if (!values.empty()) std::memcpy(values.data(), stored.Codes.data(), values.size() * sizeof(float));
      out.Vectors.push_back(std::move(values));
    }
  }
  ImportState(plain, steps);
}

}  // namespace mlframework::amp
