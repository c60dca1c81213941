#include "mlframework/backends/cuda/CudaTensorImpl.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cpu/MultiTensorKernels.hpp"
#include "mlframework/backends/cuda/CudaBackend.hpp"
#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/ExternalStream.hpp"
#include "mlframework/backends/cuda/ViewRange.hpp"
#include "mlframework/core/BackendTensor.hpp"
#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::backends::cuda {

namespace {

void RequireValidDtype(DataType dtype) {
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
}

void RequireDeviceIndex(int device) {
  if (device < 0) {
    throw ArgumentError("device", "must be >= 0, got " + std::to_string(device));
  }
}

}  // namespace

CudaTensor::CudaTensor(Shape shape, DataType dtype, int device)
    : shape_(std::move(shape)),
      size_(ElementCount(shape_)),
      dtype_(dtype),
      device_(device),
      context_(&DeviceContext::Get(device)) {
  RequireValidDtype(dtype_);
  if (size_ > SIZE_MAX / ElementSize(dtype_)) {
    throw ArgumentError(
        "shape", ToString(shape_) + " of " + std::string(mlframework::ToString(dtype_)) + " does not fit in memory");
  }
  const StreamUse use(*context_);
  data_ = context_->Allocate(Bytes());
  if (data_ != nullptr) {
    try {
      MLFW_CUDA_CHECK(context_->DeviceDriver().MemsetAsync(data_, 0, Bytes(), context_->Stream()));
    } catch (...) {
      context_->Free(data_);
      throw;
    }
  }
}

CudaTensor::CudaTensor(const std::shared_ptr<const CudaTensor>& base, std::size_t offset, Shape shape)
    : shape_(std::move(shape)),
      size_(ElementCount(shape_)),
      dtype_(base->dtype_),
      device_(base->device_),
      context_(base->context_),
      owner_(base->owner_ ? base->owner_ : base),
      wrapped_(base->wrapped_) {
  const std::size_t bytes = ViewByteOffset(base->size_, ElementSize(dtype_), offset, size_);
  data_ = static_cast<std::byte*>(base->data_) + bytes;
}

CudaTensor::CudaTensor(void* data, Shape shape, DataType dtype, int device, std::shared_ptr<void> owner)
    : shape_(std::move(shape)),
      size_(ElementCount(shape_)),
      dtype_(dtype),
      device_(device),
      context_(&DeviceContext::Get(device)),
      data_(data),
      // A wrap with no owner still must not free the caller's memory: hold an empty keeper.
      owner_(owner ? std::move(owner) : std::make_shared<int>(0)),
      wrapped_(true) {}

CudaTensor::~CudaTensor() {
  if (!owner_) {
    context_->Free(data_);
  } else if (wrapped_) {
    // The owner (a framework's tensor, a DLPack capsule) hands the memory back to its allocator
    // when released, which may give it out at once: not before the kernels queued on it ran.
    context_->ReleaseAfterWork(std::move(owner_));
  }
}

std::vector<float> CudaTensor::ToFloatVector() const {
  std::vector<std::uint8_t> raw(Bytes());
  {
    const StreamUse use(*context_);
    Driver& driver = context_->DeviceDriver();
    if (!raw.empty()) {
      MLFW_CUDA_CHECK(driver.MemcpyAsync(raw.data(), data_, raw.size(), cudaMemcpyDeviceToHost, context_->Stream()));
    }
    MLFW_CUDA_CHECK(driver.StreamSynchronize(context_->Stream()));
  }
  // Widened on the host with the CPU backend's conversions (the same bits as everywhere).
  std::vector<float> values(size_);
  cpu::WidenToFloat(raw.data(), dtype_, values.data(), size_);
  return values;
}

void CudaTensor::CopyFromFloats(std::span<const float> values) {
  if (values.size() != size_) {
    throw ArgumentError("values", "has " + std::to_string(values.size()) + " elements, tensor " + ToString(shape_) +
                                      " has " + std::to_string(size_));
  }
  std::vector<std::uint8_t> raw(Bytes());
  cpu::NarrowFromFloat(values.data(), raw.data(), dtype_, size_);
  const StreamUse use(*context_);
  Driver& driver = context_->DeviceDriver();
  if (!raw.empty()) {
    MLFW_CUDA_CHECK(driver.MemcpyAsync(data_, raw.data(), raw.size(), cudaMemcpyHostToDevice, context_->Stream()));
  }
  // The staging vector dies at return: wait until the copy has read it.
  MLFW_CUDA_CHECK(driver.StreamSynchronize(context_->Stream()));
}

const TensorBackend* CudaTensor::Backend() const noexcept { return &BackendInstance(); }

// ---- public factories and queries ----------------------------------------------------------

bool IsBuilt() noexcept { return true; }

int DeviceCount() noexcept { return QueryDeviceCount(nullptr); }

bool IsAvailable() noexcept { return DeviceCount() > 0; }

std::string UnavailableReason() {
  std::string reason;
  return QueryDeviceCount(&reason) > 0 ? std::string() : reason;
}

std::string DeviceName(int device) {
  DeviceContext::Get(device);  // validates the ordinal with a clear message
  cudaDeviceProp properties{};
  MLFW_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

TensorPtr Empty(const Shape& shape, DataType dtype, int device) {
  RequireValidDtype(dtype);
  RequireDeviceIndex(device);
  return std::make_shared<CudaTensor>(shape, dtype, device);
}

TensorPtr Wrap(void* data, Shape shape, DataType dtype, int device, std::shared_ptr<void> owner) {
  mlframework::detail::CheckWrapArguments(data, shape, dtype);
  RequireDeviceIndex(device);
  return std::make_shared<CudaTensor>(data, std::move(shape), dtype, device, std::move(owner));
}

bool IsCudaTensor(const ITensor& tensor) noexcept { return dynamic_cast<const CudaTensor*>(&tensor) != nullptr; }

void* DevicePointer(ITensor& tensor) { return mlframework::detail::BackendTensor<CudaTensor>(tensor, "CUDA").Data(); }

void* StreamHandle(int device) { return DeviceContext::Get(device).Stream(); }

void Synchronize(int device) {
  DeviceContext& context = DeviceContext::Get(device);
  DeviceGuard guard(device);
  MLFW_CUDA_CHECK(context.DeviceDriver().StreamSynchronize(context.Stream()));
  context.RetireDeferred();
}

const DeviceScalingBackend& Backend() { return BackendInstance(); }

namespace {

TensorPtr MakeHook(const Shape& shape, DataType dtype, Device device) { return Empty(shape, dtype, device.Index); }

TensorPtr WrapHook(void* data, const Shape& shape, DataType dtype, Device device, std::shared_ptr<void> owner) {
  return Wrap(data, shape, dtype, device.Index, std::move(owner));
}

void* DataPointerHook(const ITensor& tensor) {
  const auto* cuda_tensor = dynamic_cast<const CudaTensor*>(&tensor);
  return cuda_tensor != nullptr ? cuda_tensor->Data() : nullptr;
}

// ToDLPack(): the receiver reads the memory on its stream and calls the deleter when its host
// code drops the tensor (torch: when the storage goes), with those reads possibly still queued
// and, usually, no StreamGuard installed. A free then ordered on the library stream alone would
// let the pool hand the block to the next allocation, whose kernels write it while the
// receiver's still read it. Exported under a StreamGuard, the export remembers that stream and
// its release makes the library stream wait for the work queued there up to the deleter call
// (so do the later frees of any other holder of the tensor). The stream must still exist then.
// Without a guard the receiver's stream is the legacy default stream (or the library's), which
// the library's blocking stream is ordered with already.
void ReleaseExport(TensorPtr& kept, cudaStream_t stream, int device) noexcept;

// An export dropped while its stream captured a CUDA graph, released after the capture.
struct HeldExport {
  TensorPtr kept;
  cudaStream_t stream = nullptr;
  int device = 0;
  HeldExport() = default;
  HeldExport(const HeldExport&) = delete;
  HeldExport& operator=(const HeldExport&) = delete;
  HeldExport(HeldExport&&) = delete;
  HeldExport& operator=(HeldExport&&) = delete;
  ~HeldExport() { ReleaseExport(kept, stream, device); }
};

// The deleter's work (see ExportHook). While the stream captures, the wait would fork the
// library stream into the capture with no join back: the reference is held instead
// (ReleaseAfterWork() keeps it until after the capture), and released then with the wait.
void ReleaseExport(TensorPtr& kept, cudaStream_t stream, int device) noexcept {
  if (!kept) {
    return;
  }
  try {
    const DeviceGuard current(device);
    const StreamGuard guard(stream, device);  // a free of the last reference waits for it too
    DeviceContext& context = DeviceContext::Get(device);
    if (context.CaptureUnderway()) {
      auto held = std::make_shared<HeldExport>();
      held->stream = stream;
      held->device = device;
      held->kept = std::move(kept);
      context.ReleaseAfterWork(std::move(held));
      return;
    }
    WaitForExternal(device, context.Stream());
    kept.reset();
  } catch (...) {  // a deleter must not throw; the device error surfaces on the next call
    kept.reset();
  }
}

TensorPtr ExportHook(const TensorPtr& tensor) {
  const auto* cuda_tensor = dynamic_cast<const CudaTensor*>(tensor.get());
  ExternalStream external;
  if (cuda_tensor == nullptr || !FindExternalStream(cuda_tensor->DeviceIndex(), external)) {
    return tensor;
  }
  const int device = cuda_tensor->DeviceIndex();
  return {tensor.get(), [kept = tensor, stream = external.stream, device](ITensor* /*unused*/) mutable {
            ReleaseExport(kept, stream, device);
          }};
}

const mlframework::detail::DeviceTensorHooks kHooks{
    .Make = &MakeHook, .Wrap = &WrapHook, .DataPointer = &DataPointerHook, .Export = &ExportHook};

// Core's Zeros(..., Device::CUDA(i)) and FromDLPack reach this backend through the hooks
// registered when libmlframework_cuda is loaded; core itself links no CUDA.
[[maybe_unused]] const bool kRegistered = [] {
  mlframework::detail::RegisterDeviceTensorHooks(DeviceType::CUDA, &kHooks);
  return true;
}();

}  // namespace

}  // namespace mlframework::backends::cuda
