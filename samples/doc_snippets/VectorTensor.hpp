#pragma once
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <mlframework/mlframework.hpp>

// Your framework's own tensor (here: FP32 in a std::vector) plugged into the library.
// It has no fused backend (Backend() returns null); HostStorage() tells the library where its
// elements lie, so the fused list operations run the CPU kernels on them in place.
class VectorTensor final : public mlframework::ITensor {
 public:
  explicit VectorTensor(std::vector<float> values) : values_(std::move(values)), shape_{values_.size()} {}
  mlframework::DataType GetDataType() const override { return mlframework::DataType::Float32; }
  mlframework::Device GetDevice() const override { return mlframework::Device::CPU(); }
  const mlframework::Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return values_.size(); }
  std::vector<float> ToFloatVector() const override { return values_; }
  void CopyFromFloats(std::span<const float> values) override {
    if (values.size() != values_.size()) {
      throw mlframework::ArgumentError(
          "values", "has " + std::to_string(values.size()) + " elements, expected " + std::to_string(values_.size()));
    }
    std::copy(values.begin(), values.end(), values_.begin());
  }

 protected:
  std::span<std::byte> HostStorage() const noexcept override {
    return std::as_writable_bytes(std::span<float>(const_cast<float*>(values_.data()), values_.size()));
  }

 private:
  std::vector<float> values_;
  mlframework::Shape shape_;
};
