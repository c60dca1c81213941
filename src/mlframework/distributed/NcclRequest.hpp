#pragma once
// Private to the NCCL engine (CUDA types): the request of a non-blocking collective
// (NcclProcessGroup::AllGatherAsync and friends). Those run on the group's communication
// stream: it waits for the work the compute stream queued so far (an event), the NCCL call
// follows, and the request's Wait() makes the compute stream, and the calling thread's
// framework stream (StreamGuard), wait for its completion event. Neither side blocks the
// host, and the GPU overlaps the collective with the kernels queued meanwhile. After the
// group's communicator was aborted (a failure, a timeout) the output is not valid: Test() and
// Wait() throw CommunicationError.

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/CollectiveRequest.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/ExternalStream.hpp"

namespace mlframework::distributed::detail {

// The completion of one collective on the communication stream, as CollectiveRequest.
class NcclRequest final : public CollectiveRequest {
 public:
  /// @p aborted is the group's flag, set when its communicator is aborted.
  NcclRequest(backends::cuda::DeviceContext& context, std::shared_ptr<const std::atomic<bool>> aborted)
      : context_(&context), aborted_(std::move(aborted)) {
    MLFW_CUDA_CHECK(Driver().EventCreate(&done_));
  }
  ~NcclRequest() override {
    try {
      if (!waited_) Wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the group's watchdog reports the failure
    }
    MLFW_CUDA_CHECK_NOTHROW(Driver().EventDestroy(done_));
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  cudaEvent_t Event() const noexcept { return done_; }
  bool Test() override {
    ThrowIfAborted();
    backends::cuda::DeviceGuard guard(context_->DeviceIndex());
    const cudaError_t status = Driver().EventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw CommunicationError(
          "a non-blocking NCCL collective failed on cuda:" + std::to_string(context_->DeviceIndex()) + ": " +
          backends::cuda::CudaErrorMessage("cudaEventQuery(done)", status, __FILE__, __LINE__));
    }
    ThrowIfAborted();  // the abort makes the collective's kernels return: done, with no valid output
    Wait();
    return true;
  }
  // Stream order, as the blocking calls: later work on the compute stream and on the calling
  // thread's framework stream sees the result. The compute stream waits once; the framework
  // stream at every call, since a later Wait() may come from another thread or under another
  // StreamGuard, whose stream has not waited yet.
  void Wait() override {
    ThrowIfAborted();
    backends::cuda::DeviceGuard guard(context_->DeviceIndex());
    if (!waited_) {
      MLFW_CUDA_CHECK(Driver().StreamWaitEvent(context_->Stream(), done_));
      waited_ = true;
    }
    backends::cuda::ExternalStream external;
    if (backends::cuda::FindExternalStream(context_->DeviceIndex(), external)) {
      MLFW_CUDA_CHECK(Driver().StreamWaitEvent(external.stream, done_));
    }
  }

 private:
  backends::cuda::Driver& Driver() const noexcept { return context_->DeviceDriver(); }
  void ThrowIfAborted() const {
    if (aborted_->load(std::memory_order_acquire)) {
      throw CommunicationError("a non-blocking NCCL collective on cuda:" + std::to_string(context_->DeviceIndex()) +
                               " did not complete: its communicator was aborted, the output is not valid");
    }
  }

  backends::cuda::DeviceContext* context_;
  std::shared_ptr<const std::atomic<bool>> aborted_;
  cudaEvent_t done_ = nullptr;
  bool waited_ = false;
};

}  // namespace mlframework::distributed::detail
