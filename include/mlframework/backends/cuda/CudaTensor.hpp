#pragma once
/// @file CudaTensor.hpp
/// @brief CUDA backend: factories and queries (the tensor class itself is private; no CUDA headers here).
///
/// CUDA tensors keep FP32, FP16 or BF16 elements in device memory of one GPU
/// and run the fused multi-tensor kernels on one stream per device, in the
/// style of Apex's multi_tensor_apply: one launch covers many tensors, cut
/// into chunks of equal work. The element math is the host/device code of
/// FloatBits.hpp, so results are bit-identical to the CPU backend.
///
/// The usual way to make one is the core factory with a CUDA device:
/// `mlframework::Zeros(shape, dtype, Device::CUDA(0))`. Every function works in
/// every build: without the CUDA backend, or on a machine without a driver or
/// a GPU, DeviceCount() is 0, IsAvailable() is false and creating a tensor
/// throws BackendError.

#include <string>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework::backends::cuda {

/// True when this build of mlframework contains the CUDA backend (MLFW_HAS_CUDA).
MLFRAMEWORK_EXPORT bool IsBuilt() noexcept;
/// Number of CUDA devices this process can use; 0 without a driver, without a GPU or without the backend.
MLFRAMEWORK_EXPORT int DeviceCount() noexcept;
/// True when at least one CUDA device can be used.
MLFRAMEWORK_EXPORT bool IsAvailable() noexcept;
/// Why no CUDA device can be used (the driver's error string), or "" when IsAvailable().
MLFRAMEWORK_EXPORT std::string UnavailableReason();
/// Name of device @p device (for example "NVIDIA H100 80GB HBM3"); BackendError when it does not exist.
MLFRAMEWORK_EXPORT std::string DeviceName(int device);

/// A CUDA tensor of @p shape and @p dtype on GPU @p device, filled with zeros.
/// Throws ArgumentError for an invalid dtype or a negative device, BackendError when the
/// device does not exist, there is no driver, or the allocation fails.
MLFRAMEWORK_EXPORT TensorPtr Empty(const Shape& shape, DataType dtype, int device = 0);
/// True when @p tensor is a CUDA-backend tensor.
MLFRAMEWORK_EXPORT bool IsCudaTensor(const ITensor& tensor) noexcept;
/// A CUDA tensor over device memory of GPU @p device that the caller owns, with no copy: the
/// fused kernels run on @p data directly. The memory is never freed by the library; @p owner is
/// held until the last reference to the tensor (and to any view of it) is gone, so it can keep
/// the memory alive (the framework's tensor, a DLPack capsule), and may be null when the caller
/// guarantees the lifetime. Contiguous, row-major, @p data aligned to the element size. Work on
/// it runs on the library's stream of @p device (StreamHandle()): order it with the framework's
/// stream as with any CUDA tensor (for example an event, or Synchronize()).
/// ArgumentError naming the parameter and its value: @p data null while @p shape has elements,
/// @p data not aligned to the element size, a @p dtype that is not a DataType, a @p shape whose
/// byte size overflows, a negative @p device; BackendError when the device cannot be used.
MLFRAMEWORK_EXPORT TensorPtr Wrap(void* data, Shape shape, DataType dtype, int device, std::shared_ptr<void> owner);
/// Device pointer to the elements of a CUDA tensor (`Size() * ElementSize` bytes), for
/// interoperation with the caller's own kernels; ArgumentError when @p tensor is not a CUDA tensor.
/// Work on it must be ordered after Synchronize() or on the backend's stream (see StreamHandle()).
MLFRAMEWORK_EXPORT void* DevicePointer(ITensor& tensor);
/// The `cudaStream_t` (as an opaque pointer) the backend runs its work for @p device on.
/// The stream synchronises with the legacy default stream. BackendError when the device does not exist.
MLFRAMEWORK_EXPORT void* StreamHandle(int device);
/// Blocks until all work the backend queued on @p device has finished; BackendError on a device error.
MLFRAMEWORK_EXPORT void Synchronize(int device);

/// The CUDA backend's fused kernels, including the device-resident scaling extension.
/// Throws BackendError when this build has no CUDA backend.
MLFRAMEWORK_EXPORT const DeviceScalingBackend& Backend();

}  // namespace mlframework::backends::cuda
