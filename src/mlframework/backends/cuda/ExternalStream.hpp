#pragma once
// Private: the framework streams StreamGuard installs on the calling thread, and the join
// that orders a device's library stream between a framework stream's earlier and later work.

#include <cuda_runtime_api.h>

namespace mlframework::backends::cuda {

/// A framework stream a StreamGuard installed, with the guard's two events.
struct ExternalStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on `stream`; the library's stream waits for it
  cudaEvent_t done = nullptr;   // recorded on the library's stream; `stream` waits for it
};

/// The calling thread's innermost framework stream for @p device, if it has one.
bool FindExternalStream(int device, ExternalStream& found) noexcept;

/// Queues on @p library a wait for everything queued so far on the calling thread's framework
/// stream of @p device; nothing without one. Returns whether there was one.
bool WaitForExternal(int device, cudaStream_t library);

/// For its lifetime, joins the library's stream of a device with the calling thread's
/// framework stream: constructed, the library's stream waits for the framework's earlier work;
/// destroyed, the framework's stream waits for the library's work queued meanwhile. Both are
/// queued waits; the host never blocks.
class ExternalOrder {
 public:
  ExternalOrder(int device, cudaStream_t library);
  ~ExternalOrder();
  ExternalOrder(const ExternalOrder&) = delete;
  ExternalOrder& operator=(const ExternalOrder&) = delete;

 private:
  ExternalStream external_;
  cudaStream_t library_ = nullptr;
  bool joined_ = false;
};

}  // namespace mlframework::backends::cuda
