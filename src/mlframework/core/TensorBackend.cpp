#include <mlframework/core/TensorBackend.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/core/HostNonFiniteScan.hpp"
#include "mlframework/core/HostWrite.hpp"
#include "mlframework/core/TensorGroups.hpp"

namespace mlframework {

TensorBackend::~TensorBackend() = default;

ReadPassResult detail::ReadEachTensor(std::span<const TensorPtr> tensors, const ReadPassOptions& options) {
  ReadPassResult total;
  std::vector<float> values;
  for (const TensorPtr& tensor : tensors) {
    values.resize(tensor->Size());
    tensor->CopyToFloats(values);
    double sum = 0.0;
    for (const float x : values) {
      const float v = std::fabs(x);
      if (!std::isfinite(v)) {
        total.FoundNonFinite = true;
      } else if (options.Amax) {
        total.Amax = std::max(total.Amax, v);
      }
      if (options.SumOfSquares) {
        sum += static_cast<double>(x) * x;
      }
    }
    const double factor = options.Factor;
    total.SumOfSquares += sum * factor * factor;
    if (total.FoundNonFinite && !options.SumOfSquares && !options.Amax) {
      break;  // nothing else to read
    }
  }
  return total;
}

void RejectScaleState(const DeviceScaleState* state, const TensorBackend& backend) {
  if (state != nullptr) {
    throw ArgumentError("options", "State is a scale state in " + state->GetDevice().ToString() + " memory, but the " +
                                       std::string(backend.Name()) + " backend's passes take no scale state");
  }
}

std::optional<WritePassResult> TensorBackend::Write(TensorListView src, TensorListView dst,
                                                    const WritePassOptions& options) const {
  ValidateWritePassOptions(options);
  RejectScaleState(options.State, *this);
  if (!src.Grouped) {
    return std::nullopt;
  }
  return detail::WriteThroughFloats(src.Tensors, dst.Tensors, options);
}

std::optional<ReadPassResult> TensorBackend::Read(TensorListView tensors, const ReadPassOptions& options) const {
  ValidateReadPassOptions(options);
  RejectScaleState(options.State, *this);
  if (!tensors.Grouped) {
    return std::nullopt;
  }
  return detail::ReadEachTensor(tensors.Tensors, options);
}

void TensorBackend::ScanNonFinite(std::span<const ITensor* const> tensors, std::span<NonFiniteScan> out) const {
  for (std::size_t i = 0; i < tensors.size(); ++i) out[i] = detail::HostScanNonFinite(*tensors[i]);
}

bool TensorBackend::AdamStep(const OptimizerStepLists& /*lists*/, const AdamStepScalars& /*scalars*/,
                             const DeviceScaleState* /*skip_if_found_inf*/) const {
  return false;
}

bool TensorBackend::SGDStep(const OptimizerStepLists& /*lists*/, const SGDStepScalars& /*scalars*/,
                            const DeviceScaleState* /*skip_if_found_inf*/) const {
  return false;
}

void TensorBackend::EncodeFloat8Blocks(const ITensor& /*values*/, const Float8BlockRuns& /*runs*/, ITensor& /*codes*/,
                                       ITensor& /*scale_inv*/) const {
  throw InvalidOperationError("the '" + std::string(Name()) +
                              "' tensor backend has no FP8 block wire encoder (TensorBackend::EncodeFloat8Blocks)");
}

void TensorBackend::DecodeSumFloat8Blocks(const ITensor& /*codes*/, const ITensor& /*scale_inv*/, std::size_t /*parts*/,
                                          std::size_t /*length*/, ITensor& /*out*/, std::size_t /*offset*/) const {
  throw InvalidOperationError("the '" + std::string(Name()) +
                              "' tensor backend has no FP8 block wire decoder (TensorBackend::DecodeSumFloat8Blocks)");
}

TensorPtr TensorBackend::Allocate(const Shape& /*shape*/, DataType /*dtype*/, Device device) const {
  throw InvalidOperationError("the '" + std::string(Name()) + "' tensor backend cannot allocate tensors (asked for " +
                              device.ToString() + ")");
}

TensorPtr TensorBackend::View(const TensorPtr& /*base*/, std::size_t /*offset*/, const Shape& /*shape*/) const {
  throw InvalidOperationError("the '" + std::string(Name()) + "' tensor backend cannot make aliasing views");
}

}  // namespace mlframework
