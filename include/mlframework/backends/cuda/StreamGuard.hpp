#pragma once
/// @file StreamGuard.hpp
/// @brief CUDA backend: the library's work in the order of the framework's own CUDA stream.
///
/// A framework that owns its CUDA streams hands the library the one it computes on, as
/// PyTorch's `torch.cuda.ExternalStream` and CuPy's `cupy.cuda.ExternalStream` accept a
/// foreign stream:
///
/// ```cpp
/// namespace cuda = mlframework::backends::cuda;
/// {
///   const cuda::StreamGuard on_torch(at::cuda::getCurrentCUDAStream().stream(), device);
///   context.Step(gradients);  // reads what the framework queued before, on its stream
/// }                           // the framework's later work sees the unscaled gradients
/// ```
///
/// While the guard lives, every CUDA backend call of the calling thread on @p device (kernels,
/// copies, frees of library memory, NCCL collectives) is ordered after the work queued on the
/// framework's stream so far, and the framework's stream waits for that call's work before
/// running what it queues next. No event or synchronisation is needed by the caller, and the
/// host never waits for the device because of the guard.
///
/// Why the library keeps its own stream underneath: its scratch memory, uploaded tables and
/// stream-ordered allocations stay private to it, so frameworks need not know about them. The
/// join costs two event records and two stream waits per backend call (a few microseconds of
/// host time, no device time).

#include <mlframework/export.hpp>

namespace mlframework::backends::cuda {

/// Orders the CUDA backend's work on one device, queued by the calling thread while the guard
/// lives, with a framework's stream (see the file comment). Guards nest: the innermost guard of
/// a device wins, and destroying it restores the one before. A guard belongs to the thread that
/// made it; destroy guards in reverse order of construction.
class MLFRAMEWORK_EXPORT StreamGuard {
 public:
  /// Installs @p stream (a `cudaStream_t`; nullptr is the default stream) for @p device on the
  /// calling thread. ArgumentError: a negative @p device, or a @p stream that belongs to another
  /// device (the message names both). BackendError: the device does not exist, there is no
  /// driver, or this build has no CUDA backend.
  StreamGuard(void* stream, int device);
  /// Restores the calling thread's previous stream for the device; never throws.
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  StreamGuard(StreamGuard&&) = delete;
  StreamGuard& operator=(StreamGuard&&) = delete;

  /// The framework's stream this guard installed.
  void* Stream() const noexcept { return stream_; }
  /// The device it applies to.
  int Device() const noexcept { return device_; }

 private:
  void* stream_ = nullptr;
  int device_ = -1;
  // Events (cudaEvent_t) of the join, owned by the guard. Only the CUDA build's StreamGuard.cu
  // uses them; the build without CUDA keeps the same layout, so clang's unused-field warning is off.
  [[maybe_unused]] void* ready_ = nullptr;
  [[maybe_unused]] void* done_ = nullptr;
};

/// The stream of the calling thread's innermost StreamGuard for @p device, or nullptr when the
/// thread has none (the library's work then runs on its own stream only: see StreamHandle()).
MLFRAMEWORK_EXPORT void* CurrentExternalStream(int device) noexcept;

}  // namespace mlframework::backends::cuda
