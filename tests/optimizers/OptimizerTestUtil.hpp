#pragma once
// Helpers shared by the optimizer tests.

#include <cmath>
#include <cstddef>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/mlframework.hpp>

namespace mlframework {
// Boost.Test prints the operands of a failed check.
inline std::ostream& operator<<(std::ostream& out, DataType dtype) { return out << ToString(dtype); }
}  // namespace mlframework

namespace mlfw_test {

// Gradients of mixed magnitudes (including zeros and values far from 1), weights around 1.
inline std::vector<float> Random(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(-6, 3);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = i % 97 == 5 ? 0.0f : scale * normal(rng) * std::ldexp(1.0f, magnitude(rng));
  }
  return v;
}

inline std::vector<float> Values(const mlframework::TensorPtr& tensor) { return tensor->ToFloatVector(); }

inline mlframework::GradientMap OneParam(const std::vector<float>& values, mlframework::DataType dtype) {
  return {{"w", mlframework::FromVector(values, {values.size()}, dtype)}};
}

inline mlframework::GradientMap OneGrad(const std::vector<float>& values, mlframework::DataType dtype) {
  return {{"w", mlframework::FromVector(values, {values.size()}, dtype)}};
}

// A framework's own tensor (no backend of ours) delegating to a CPU tensor; with
// `host_memory` it hands out the elements' memory (ITensor::HostBytes()).
class ForeignTensor final : public mlframework::ITensor {
 public:
  ForeignTensor(mlframework::TensorPtr inner, bool host_memory) : inner_(std::move(inner)), host_memory_(host_memory) {}
  mlframework::DataType GetDataType() const override { return inner_->GetDataType(); }
  mlframework::Device GetDevice() const override { return inner_->GetDevice(); }
  const mlframework::Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override { return inner_->ToFloatVector(); }
  void CopyFromFloats(std::span<const float> values) override { inner_->CopyFromFloats(values); }

 protected:
  std::span<std::byte> HostStorage() const noexcept override {
    return host_memory_ ? inner_->MutableHostBytes() : std::span<std::byte>{};
  }

 private:
  mlframework::TensorPtr inner_;
  bool host_memory_;
};

inline float RoundTo(float value, mlframework::DataType dtype) {
  return mlframework::FromVector({value}, {1}, dtype)->ToFloatVector()[0];
}

}  // namespace mlfw_test
