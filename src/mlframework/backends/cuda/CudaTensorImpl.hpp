#pragma once
// Private: the CUDA tensor class. Elements live in device memory of one GPU
// (FP16 and BF16 as their 16-bit words); all work on them is ordered on the
// device's backend stream.

#include <cstddef>
#include <memory>

#include <mlframework/core/ITensor.hpp>

namespace mlframework::backends::cuda {

class DeviceContext;

class CudaTensor final : public ITensor {
 public:
  // Zero-filled tensor on `device` (validated by the caller).
  CudaTensor(Shape shape, DataType dtype, int device);
  // A view of @p count elements of @p base from element @p offset on (ViewByteOffset() checks
  // the range): shares the allocation, which stays alive while any view of it does.
  CudaTensor(const std::shared_ptr<const CudaTensor>& base, std::size_t offset, Shape shape);
  // Memory on `device` that the caller owns (Wrap): never freed here; `owner` keeps it alive.
  CudaTensor(void* data, Shape shape, DataType dtype, int device, std::shared_ptr<void> owner);
  ~CudaTensor() override;
  CudaTensor(const CudaTensor&) = delete;
  CudaTensor& operator=(const CudaTensor&) = delete;

  DataType GetDataType() const override { return dtype_; }
  Device GetDevice() const override { return Device::CUDA(device_); }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return size_; }

  std::vector<float> ToFloatVector() const override;
  void CopyFromFloats(std::span<const float> values) override;

  const TensorBackend* Backend() const noexcept override;

  int DeviceIndex() const noexcept { return device_; }
  void* Data() const noexcept { return data_; }
  std::size_t Bytes() const noexcept { return size_ * ElementSize(dtype_); }

 private:
  Shape shape_;
  std::size_t size_;
  DataType dtype_;
  int device_;
  DeviceContext* context_;
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;  // views and wraps: what keeps the memory alive (null: own allocation)
  bool wrapped_ = false;               // the memory is the caller's (a Wrap, or a view of one)
};

}  // namespace mlframework::backends::cuda
