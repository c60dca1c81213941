#include "mlframework/distributed/fsdp/MasterShards.hpp"

#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::distributed::fsdp::detail {

void ValidateMasterDType(DataType dtype, const std::string& parameter) {
  if (dtype != DataType::Float32 && dtype != DataType::BFloat16) {
    throw ArgumentError(parameter, "a master shard is Float32 or BFloat16, got " +
                                       (IsValid(dtype) ? std::string(ToString(dtype))
                                                       : "DataType " + std::to_string(static_cast<int>(dtype))));
  }
}

MasterFormat ShardMasterFormat(const FSDPShardingUnit& unit, const amp::IOptimizerState* optimizer) {
  if (unit.MasterDType() == DataType::Float32) return MasterFormat::Float32;
  return optimizer != nullptr ? optimizer->StateMasterFormat() : MasterFormat::BFloat16StochasticRounding;
}

void RequireMatchingMasters(const FSDPShardingUnit& unit, const amp::IOptimizerState* optimizer,
                            const std::string& parameter) {
  if (optimizer == nullptr) return;
  const MasterFormat format = optimizer->StateMasterFormat();
  const bool bf16_shard = unit.MasterDType() == DataType::BFloat16;
  if (bf16_shard == (format != MasterFormat::Float32)) return;
  const std::string kind = optimizer->StateKind();
  if (bf16_shard) {
    throw ArgumentError(parameter, "unit '" + unit.Name() + "' keeps a BFloat16 master shard but the " + kind +
                                       " keeps Float32 masters (copies the FSDP never sees): set the optimizer's "
                                       "Masters to BFloat16StochasticRounding or BFloat16Remainder, or the "
                                       "unit's MasterDType to Float32");
  }
  throw ArgumentError(parameter, "unit '" + unit.Name() + "' keeps a Float32 master shard but the " + kind + " keeps " +
                                     ToString(format) +
                                     " masters: set FSDPConfig::MasterDType (or the unit's "
                                     "UnitPrecision::MasterDType) to BFloat16, or the optimizer's Masters to Float32");
}

void RequireGradientsFit(const GradientMap& gradients, const amp::IOptimizerState& optimizer,
                         const std::string& parameter) {
  const GradientMap& parameters = optimizer.Parameters();
  const std::string kind = optimizer.StateKind();
  const std::string hint = ": build the optimizer over FSDP::ShardedParameters()";
  for (const auto& [name, gradient] : gradients) {
    const auto it = parameters.find(name);
    std::string message;
    if (it == parameters.end() || !it->second) {
      message.append("unit '").append(name).append("' is not a parameter of the ").append(kind);
    } else if (it->second->GetShape() != gradient->GetShape()) {
      message.append("the ").append(kind).append("'s parameter '").append(name).append("' has shape ");
      message.append(mlframework::ToString(it->second->GetShape())).append(" but unit '").append(name);
      message.append("' has a shard of shape ").append(mlframework::ToString(gradient->GetShape()));
    } else {
      continue;
    }
    throw ArgumentError(parameter, message.append(hint));
  }
  for (const auto& [name, tensor] : parameters) {
    if (gradients.find(name) == gradients.end()) {
      std::string message = "the ";
      message.append(kind).append(" has a parameter '").append(name).append("', which is no unit of this FSDP");
      throw ArgumentError(parameter, message.append(hint));
    }
  }
}

}  // namespace mlframework::distributed::fsdp::detail
