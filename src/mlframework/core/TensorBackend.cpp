#include <mlframework/core/TensorBackend.hpp>

#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>

namespace mlframework {

TensorBackend::~TensorBackend() = default;

void TensorBackend::CopyInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const {
  static_cast<void>(CastInto(src, dst, factor));
}

void TensorBackend::AddInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float alpha) const {
  for (std::size_t i = 0; i < src.size(); ++i) {
    const std::vector<float> add = src[i]->ToFloatVector();
    std::vector<float> sum = dst[i]->ToFloatVector();
    for (std::size_t j = 0; j < sum.size(); ++j) {
      const float product = alpha * add[j];
      sum[j] = sum[j] + product;
    }
    dst[i]->CopyFromFloats(sum);
  }
}

TensorPtr TensorBackend::Allocate(const Shape& /*shape*/, DataType /*dtype*/, Device device) const {
  throw InvalidOperationError("the '" + std::string(Name()) + "' tensor backend cannot allocate tensors (asked for " +
                              device.ToString() + ")");
}

TensorPtr TensorBackend::View(const TensorPtr& /*base*/, std::size_t /*offset*/, const Shape& /*shape*/) const {
  throw InvalidOperationError("the '" + std::string(Name()) + "' tensor backend cannot make aliasing views");
}

}  // namespace mlframework
