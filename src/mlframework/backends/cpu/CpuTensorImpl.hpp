#pragma once
// Private: the CPU tensor class. Elements live in xtensor containers; FP16 and
// BF16 are stored as their 16-bit words, FP8 as bytes.

#include <atomic>
#include <cstdint>

#include <xtensor/xtensor.hpp>

#include <mlframework/core/ITensor.hpp>

#include "mlframework/backends/cpu/SmallBufferPool.hpp"

namespace mlframework::backends::cpu {

// Element storage aligned to 64 bytes (a cache line, one AVX-512 register): malloc's
// 16-byte alignment would make most full-register loads and non-temporal stores of a
// tensor straddle two cache lines, and two tensors of different dtypes could never be
// aligned together (casts between separately allocated small tensors ran 1.5x slower).
// Tensors of up to 32 KiB come from SmallBufferPool, which places them one after another.
template <typename T>
using Storage = xt::xtensor<T, 1, XTENSOR_DEFAULT_LAYOUT, TensorAllocator<T>>;

class CpuTensor final : public ITensor {
 public:
  CpuTensor(Shape shape, DataType dtype);
  // `count(shape)` elements from `data` on that this tensor does not own: a view of another
  // tensor, or memory the framework owns (Wrap); `owner` keeps the memory alive.
  CpuTensor(Shape shape, DataType dtype, std::shared_ptr<void> owner, void* data);

  DataType GetDataType() const override { return dtype_; }
  Device GetDevice() const override { return Device::CPU(); }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return size_; }

  std::vector<float> ToFloatVector() const override;
  void CopyFromFloats(std::span<const float> values) override;

  const TensorBackend* Backend() const noexcept override;
  std::span<std::byte> HostStorage() const noexcept override {
    return {static_cast<std::byte*>(data_), size_ * ElementSize(dtype_)};
  }

  void* Data() noexcept { return data_; }
  const void* Data() const noexcept { return data_; }

  ~CpuTensor() override;
  CpuTensor(const CpuTensor&) = delete;
  CpuTensor& operator=(const CpuTensor&) = delete;

  /// Marks this tensor as held by a kept plan's key (ListKey): destroying it then advances
  /// KeptGeneration(), which ends the keys' fast path of comparing tensor objects.
  void MarkKept() const noexcept { kept_.store(true, std::memory_order_relaxed); }

 private:
  // What the kernels read per tensor (data_, size_, dtype_) sits next to the vtable pointer,
  // in the object's first cache line: planning a list of thousands of small tensors costs
  // one cache miss per tensor instead of three, and so does comparing a list with a kept plan's
  // key (ListKey.hpp).
  void* data_ = nullptr;  // first element (own storage or the view's start)
  std::size_t size_;
  DataType dtype_;
  mutable std::atomic<bool> kept_{false};  // see MarkKept()
  Shape shape_;
  Storage<float> f32_;           // used when dtype_ is Float32
  Storage<std::uint16_t> u16_;   // used when dtype_ is Float16 or BFloat16
  Storage<std::uint8_t> u8_;     // used when dtype_ is Float8E4M3FN or Float8E5M2
  std::shared_ptr<void> owner_;  // set for a view or a wrap: what keeps the memory alive
};

}  // namespace mlframework::backends::cpu
