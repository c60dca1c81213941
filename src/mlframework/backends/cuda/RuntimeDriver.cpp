// The Driver that calls the CUDA runtime, and the active-driver switch (Driver.hpp).

#include <atomic>

#include "mlframework/backends/cuda/Driver.hpp"

namespace mlframework::backends::cuda {

namespace {

class RuntimeDriver final : public Driver {
 public:
  cudaError_t GetDeviceCount(int* count) override { return cudaGetDeviceCount(count); }
  cudaError_t GetDevice(int* device) override { return cudaGetDevice(device); }
  cudaError_t SetDevice(int device) override { return cudaSetDevice(device); }
  cudaError_t DeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) override {
    return cudaDeviceGetAttribute(value, attribute, device);
  }
  cudaError_t MemPoolCreate(cudaMemPool_t* pool, int device) override {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    return cudaMemPoolCreate(pool, &props);
  }
  cudaError_t MemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) override {
    return cudaMemPoolSetAttribute(pool, attribute, value);
  }
  cudaError_t StreamCreate(cudaStream_t* stream, unsigned int flags) override {
    return cudaStreamCreateWithFlags(stream, flags);
  }
  cudaError_t StreamDestroy(cudaStream_t stream) override { return cudaStreamDestroy(stream); }
  cudaError_t StreamGetDevice(cudaStream_t stream, int* device) override { return cudaStreamGetDevice(stream, device); }
  cudaError_t StreamSynchronize(cudaStream_t stream) override { return cudaStreamSynchronize(stream); }
  cudaError_t EventCreate(cudaEvent_t* event) override {
    return cudaEventCreateWithFlags(event, cudaEventDisableTiming);
  }
  cudaError_t EventDestroy(cudaEvent_t event) override { return cudaEventDestroy(event); }
  cudaError_t EventRecord(cudaEvent_t event, cudaStream_t stream) override { return cudaEventRecord(event, stream); }
  cudaError_t StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) override {
    return cudaStreamWaitEvent(stream, event, 0);
  }
  cudaError_t EventQuery(cudaEvent_t event) override { return cudaEventQuery(event); }
  cudaError_t EventSynchronize(cudaEvent_t event) override { return cudaEventSynchronize(event); }
  cudaError_t StreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) override {
    return cudaStreamIsCapturing(stream, status);
  }
  cudaError_t ThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) override {
    return cudaThreadExchangeStreamCaptureMode(mode);
  }
  cudaError_t MallocFromPoolAsync(void** pointer, std::size_t bytes, cudaMemPool_t pool, cudaStream_t stream) override {
    return cudaMallocFromPoolAsync(pointer, bytes, pool, stream);
  }
  cudaError_t FreeAsync(void* pointer, cudaStream_t stream) override { return cudaFreeAsync(pointer, stream); }
  cudaError_t Malloc(void** pointer, std::size_t bytes) override { return cudaMalloc(pointer, bytes); }
  cudaError_t Free(void* pointer) override { return cudaFree(pointer); }
  cudaError_t MallocHost(void** pointer, std::size_t bytes) override { return cudaMallocHost(pointer, bytes); }
  cudaError_t FreeHost(void* pointer) override { return cudaFreeHost(pointer); }
  cudaError_t MemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                          cudaStream_t stream) override {
    return cudaMemcpyAsync(dst, src, bytes, kind, stream);
  }
  cudaError_t MemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream) override {
    return cudaMemsetAsync(pointer, value, bytes, stream);
  }
  void Launch(const char* /*kernel*/, cudaStream_t /*stream*/, const KernelOperands& /*operands*/,
              const std::function<void()>& launch) override {
    launch();
  }
  void HostAccess(std::span<const BufferUse> /*buffers*/) override {}
};

RuntimeDriver& Runtime() noexcept {
  static RuntimeDriver runtime;
  return runtime;
}

std::atomic<Driver*> active{nullptr};
std::atomic<unsigned long> generation{0};

}  // namespace

Driver& ActiveDriver() noexcept {
  Driver* driver = active.load(std::memory_order_acquire);
  return driver != nullptr ? *driver : Runtime();
}

Driver* InstallDriver(Driver* driver) noexcept {
  generation.fetch_add(1, std::memory_order_acq_rel);
  Driver* previous = active.exchange(driver, std::memory_order_acq_rel);
  return previous != nullptr ? previous : &Runtime();
}

unsigned long DriverGeneration() noexcept { return generation.load(std::memory_order_acquire); }

}  // namespace mlframework::backends::cuda
