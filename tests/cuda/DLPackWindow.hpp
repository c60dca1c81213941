#pragma once
// A DLPack view into a CUDA tensor's memory at a byte offset, as a framework hands over a slice of
// its own storage (`data` at the allocation's start, `byte_offset` to the slice). Shared by the
// byte_offset and large-tensor device suites of test_cuda_device.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include <dlpack/dlpack.h>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/DataType.hpp>

namespace mlfw_cuda_test {

// What the managed tensor owns: the tensor whose memory it shows (kept alive until the deleter),
// its one-dimensional shape, and a counter of deleter calls the test can read afterwards.
struct WindowOwner {
  mlframework::TensorPtr base;
  std::int64_t shape[1] = {0};
  std::shared_ptr<int> deleter_calls;
};

// A DLManagedTensor over @p count elements of @p base starting at element @p first: `data` is the
// start of @p base's memory and `byte_offset` is `first` elements. The caller owns the result
// until FromDLPack() accepts it.
inline DLManagedTensor* DLPackWindow(const mlframework::TensorPtr& base, std::size_t first, std::size_t count,
                                     std::shared_ptr<int> deleter_calls) {
  const mlframework::DataType dtype = base->GetDataType();
  auto owner = std::make_unique<WindowOwner>();
  owner->base = base;
  owner->shape[0] = static_cast<std::int64_t>(count);
  owner->deleter_calls = std::move(deleter_calls);
  auto managed = std::make_unique<DLManagedTensor>();
  managed->dl_tensor.data = mlframework::backends::cuda::DevicePointer(*base);
  managed->dl_tensor.device = DLDevice{kDLCUDA, base->GetDevice().Index};
  managed->dl_tensor.ndim = 1;
  managed->dl_tensor.dtype =
      DLDataType{static_cast<std::uint8_t>(dtype == mlframework::DataType::BFloat16 ? kDLBfloat : kDLFloat),
                 static_cast<std::uint8_t>(mlframework::ElementSize(dtype) * 8), 1};
  managed->dl_tensor.shape = owner->shape;
  managed->dl_tensor.strides = nullptr;
  managed->dl_tensor.byte_offset = static_cast<std::uint64_t>(first * mlframework::ElementSize(dtype));
  managed->manager_ctx = owner.release();
  managed->deleter = [](DLManagedTensor* self) {
    auto* window_owner = static_cast<WindowOwner*>(self->manager_ctx);
    if (window_owner->deleter_calls) {
      ++*window_owner->deleter_calls;
    }
    delete window_owner;
    delete self;
  };
  return managed.release();
}

}  // namespace mlfw_cuda_test
