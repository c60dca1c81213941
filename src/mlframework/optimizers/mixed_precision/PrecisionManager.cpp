#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::optimizers::mixed_precision {

namespace {

constexpr const char* kBlobKind = "optimizers.mixed_precision.PrecisionManager";
constexpr std::uint16_t kBlobVersion = 1;

// The tensors of @p map converted to @p dtype in one fused cast, under the same names.
GradientMap CastMap(const GradientMap& map, DataType dtype) {
  const std::vector<TensorPtr> list = TensorList(map);
  const std::vector<TensorPtr> cast = Cast(list, dtype);
  GradientMap result;
  std::size_t i = 0;
  for (const auto& entry : map) {
    result.emplace_hint(result.end(), entry.first, cast[i++]);
  }
  return result;
}

}  // namespace

PrecisionManager::PrecisionManager(const MixedPrecisionOptions& options)
    : options_((options.Validate(), options)), target_(options_.Precision) {}

PrecisionManager::PrecisionManager() : PrecisionManager(MixedPrecisionOptions::ForFP16()) {}

GradientMap PrecisionManager::ConvertToFP32(const GradientMap& gradients) const {
  TensorList(gradients);  // null entries are an error before any work
  GradientMap result;
  GradientMap low;
  for (const auto& [name, tensor] : gradients) {
    if (tensor->GetDataType() == DataType::Float32) {
      result.emplace(name, tensor);
    } else {
      low.emplace(name, tensor);
    }
  }
  result.merge(CastMap(low, DataType::Float32));
  return result;
}

GradientMap PrecisionManager::ConvertToTargetPrecision(const GradientMap& tensors) const {
  return CastMap(tensors, target_);
}

void PrecisionManager::InitializeMasterWeights(const GradientMap& parameters) {
  GradientMap master = CastMap(parameters, DataType::Float32);  // always copies, so master weights are independent
  master_ = std::move(master);
}

void PrecisionManager::CopyMasterToModel(const GradientMap& model_parameters) const {
  if (master_.empty()) {
    throw InvalidOperationError(
        "PrecisionManager::CopyMasterToModel needs master weights: call InitializeMasterWeights first");
  }
  const std::vector<TensorPtr> model = TensorList(model_parameters);
  if (model_parameters.size() != master_.size()) {
    throw ArgumentError("model_parameters", "has " + std::to_string(model_parameters.size()) +
                                                " tensors but there are " + std::to_string(master_.size()) +
                                                " master weights");
  }
  std::vector<TensorPtr> master;
  master.reserve(master_.size());
  auto it = model_parameters.begin();
  for (const auto& [name, weight] : master_) {
    if (it->first != name) {
      throw ArgumentError("model_parameters",
                          "has no tensor \"" + name + "\" (found \"" + it->first + "\" in its place)");
    }
    if (it->second->GetShape() != weight->GetShape()) {
      throw ArgumentError("model_parameters[\"" + name + "\"]", "shape " + ToString(it->second->GetShape()) +
                                                                    " differs from the master weight's " +
                                                                    ToString(weight->GetShape()));
    }
    master.push_back(weight);
    ++it;
  }
  CastInto(master, model);
}

bool PrecisionManager::CheckFallback(DynamicLossScaler& scaler) {
  if (fallen_back_ || !options_.EnableAutoFallback || target_ == DataType::Float32) {
    return false;
  }
  if (scaler.ConsecutiveOverflows() < options_.MaxConsecutiveOverflows) {
    return false;
  }
  scaler.StopScaling();  // first: it writes a device-resident state, which may fail; then commit here
  target_ = DataType::Float32;
  fallen_back_ = true;
  return true;
}

std::vector<std::byte> PrecisionManager::StateDict() const {
  mlframework::detail::BlobWriter writer(kBlobKind, kBlobVersion);
  writer.U8(static_cast<std::uint8_t>(options_.Precision));
  writer.U8(fallen_back_ ? 1 : 0);
  return writer.Finish();
}

void PrecisionManager::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kBlobKind, kBlobVersion, "state");
  const auto precision = static_cast<DataType>(reader.U8());
  const std::uint8_t fallen_back = reader.U8();
  reader.ExpectEnd();
  if (precision != options_.Precision) {
    reader.Fail("was saved for Precision " + std::string(ToString(precision)) + " but this manager's is " +
                std::string(ToString(options_.Precision)));
  }
  if (fallen_back > 1) {
    reader.Fail("stored fallback flag " + std::to_string(fallen_back) + " is not 0 or 1");
  }
  fallen_back_ = fallen_back == 1;
  target_ = fallen_back_ ? DataType::Float32 : options_.Precision;
}

}  // namespace mlframework::optimizers::mixed_precision
