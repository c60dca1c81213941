#include <mlframework/core/TensorBackend.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/HostAdd.hpp"
#include "mlframework/core/HostNonFiniteScan.hpp"
#include "mlframework/core/TensorGroups.hpp"

namespace mlframework {

TensorBackend::~TensorBackend() = default;

void TensorBackend::CopyInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const {
  static_cast<void>(CastInto(src, dst, factor));
}

void TensorBackend::AddInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float alpha) const {
  for (std::size_t i = 0; i < src.size(); ++i) detail::HostAddInto(*src[i], *dst[i], alpha);
}

ReadPassResult detail::ReadEachTensor(std::span<const TensorPtr> tensors, const ReadPassOptions& options) {
  ReadPassResult total;
  for (const TensorPtr& tensor : tensors) {
    if (options.Amax) {
      for (const float x : tensor->ToFloatVector()) {
        const float v = std::fabs(x);
        if (std::isfinite(v)) {
          total.Amax = std::max(total.Amax, v);
        } else {
          total.FoundNonFinite = true;
        }
      }
      continue;
    }
    total.FoundNonFinite = tensor->HasNonFinite() || total.FoundNonFinite;
    if (options.SumOfSquares) {
      const double factor = options.Factor;
      total.SumOfSquares += tensor->SumOfSquares() * factor * factor;
    } else if (total.FoundNonFinite) {
      break;  // nothing else to read
    }
  }
  return total;
}

std::optional<ReadPassResult> TensorBackend::Read(TensorListView tensors, const ReadPassOptions& options) const {
  ValidateReadPassOptions(options);
  if (!tensors.Grouped) {
    return std::nullopt;
  }
  return detail::ReadEachTensor(tensors.Tensors, options);
}

void TensorBackend::ScanNonFinite(std::span<const ITensor* const> tensors, std::span<NonFiniteScan> out) const {
  for (std::size_t i = 0; i < tensors.size(); ++i) out[i] = detail::HostScanNonFinite(*tensors[i]);
}

std::optional<bool> TensorBackend::UnscaleAndCheckList(std::span<const TensorPtr> /*tensors*/, float /*factor*/) const {
  return std::nullopt;
}

bool TensorBackend::ScaleList(std::span<const TensorPtr> /*tensors*/, float /*factor*/) const { return false; }

std::optional<bool> TensorBackend::CastIntoKnownLists(std::span<const TensorPtr> /*src*/,
                                                      std::span<const TensorPtr> /*dst*/, float /*factor*/) const {
  return std::nullopt;
}

std::optional<bool> TensorBackend::CastIntoLists(std::span<const TensorPtr> /*src*/, std::span<const TensorPtr> /*dst*/,
                                                 float /*factor*/) const {
  return std::nullopt;
}

bool TensorBackend::AdamStep(const OptimizerStepLists& /*lists*/, const AdamStepScalars& /*scalars*/,
                             const DeviceScaleState* /*skip_if_found_inf*/) const {
  return false;
}

bool TensorBackend::SGDStep(const OptimizerStepLists& /*lists*/, const SGDStepScalars& /*scalars*/,
                            const DeviceScaleState* /*skip_if_found_inf*/) const {
  return false;
}

namespace {

// The largest finite |x * factor| over @p tensors' values, read back through the host.
float HostAmax(std::span<const ITensor* const> tensors, float factor) {
  float amax = 0.0f;
  for (const ITensor* tensor : tensors) {
    for (const float x : tensor->ToFloatVector()) {
      const float v = std::fabs(x * factor);
      if (std::isfinite(v)) amax = std::max(amax, v);
    }
  }
  return amax;
}

}  // namespace

NonFiniteAndAmax TensorBackend::UnscaleCheckAndAmax(std::span<ITensor* const> tensors, float factor) const {
  // Read before the unscale: the amax is of the FP32 products, before rounding into the dtype.
  const float amax = HostAmax(std::span<const ITensor* const>(tensors.data(), tensors.size()), factor);
  return {UnscaleAndCheck(tensors, factor), amax};
}

NonFiniteAndAmax TensorBackend::CastIntoAndAmax(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                                float factor) const {
  return {CastInto(src, dst, factor), HostAmax(src, factor)};
}

std::optional<NonFiniteAndAmax> TensorBackend::UnscaleCheckAndAmaxList(std::span<const TensorPtr> /*tensors*/,
                                                                       float /*factor*/) const {
  return std::nullopt;
}

std::optional<NonFiniteAndAmax> TensorBackend::CastIntoAndAmaxLists(std::span<const TensorPtr> /*src*/,
                                                                    std::span<const TensorPtr> /*dst*/,
                                                                    float /*factor*/) const {
  return std::nullopt;
}

TensorPtr TensorBackend::Allocate(const Shape& /*shape*/, DataType /*dtype*/, Device device) const {
  throw InvalidOperationError("the '" + std::string(Name()) + "' tensor backend cannot allocate tensors (asked for " +
                              device.ToString() + ")");
}

TensorPtr TensorBackend::View(const TensorPtr& /*base*/, std::size_t /*offset*/, const Shape& /*shape*/) const {
  throw InvalidOperationError("the '" + std::string(Name()) + "' tensor backend cannot make aliasing views");
}

}  // namespace mlframework
