#pragma once
// Private to the NCCL engine (CUDA types): the request of a non-blocking collective
// (NcclProcessGroup::AllGatherAsync and friends). Those run on the group's communication
// stream: it waits for the work the compute stream queued so far (an event), the NCCL call
// follows, and the request's Wait() makes the compute stream wait for its completion event.
// Neither side blocks the host, and the GPU overlaps the collective with the kernels queued
// meanwhile.

#include <cuda_runtime_api.h>

#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/CollectiveRequest.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"

namespace mlframework::distributed::detail {

// The completion of one collective on the communication stream, as CollectiveRequest.
class NcclRequest final : public CollectiveRequest {
 public:
  NcclRequest(int device, cudaStream_t compute) : device_(device), compute_(compute) {
    MLFW_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclRequest() override {
    try {
      Wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the group's watchdog reports the failure
    }
    MLFW_CUDA_CHECK_NOTHROW(cudaEventDestroy(done_));
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  cudaEvent_t Event() const noexcept { return done_; }
  bool Test() override {
    backends::cuda::DeviceGuard guard(device_);
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw CommunicationError("a non-blocking NCCL collective failed on cuda:" + std::to_string(device_) + ": " +
                               backends::cuda::CudaErrorMessage("cudaEventQuery(done)", status, __FILE__, __LINE__));
    }
    Wait();
    return true;
  }
  // Stream order, as the blocking calls: later work on the compute stream sees the result.
  void Wait() override {
    if (waited_) return;
    backends::cuda::DeviceGuard guard(device_);
    MLFW_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    waited_ = true;
  }

 private:
  int device_;
  cudaStream_t compute_;
  cudaEvent_t done_ = nullptr;
  bool waited_ = false;
};

}  // namespace mlframework::distributed::detail
