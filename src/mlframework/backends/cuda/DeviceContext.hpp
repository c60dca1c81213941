#pragma once
// Private: what the CUDA backend keeps per device: the stream all its work
// runs on, the allocator, and the scratch memory of the reductions.
//
// Contexts are created on first use and intentionally never destroyed:
// tensors held in static objects may be freed after any static context
// would be, and the driver releases everything at process exit.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/ExternalStream.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"
#include "mlframework/backends/cuda/TableCache.hpp"

namespace mlframework::backends::cuda {

/// Device count, or 0 with the runtime's reason (no driver, no device) in *reason.
int QueryDeviceCount(std::string* reason) noexcept;

/// Makes @p device current for the guard's lifetime and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class DeviceContext {
 public:
  /// The context of @p device; BackendError when the device does not exist or there is no driver.
  static DeviceContext& Get(int device);

  int DeviceIndex() const noexcept { return device_; }
  cudaStream_t Stream() const noexcept { return stream_; }
  /// The driver this context was made with; every call on its device goes through it.
  Driver& DeviceDriver() const noexcept { return *driver_; }
  /// Held by every backend call while it uses the scratch memory below.
  std::mutex& Mutex() noexcept { return mutex_; }

  /// @p bytes of device memory, ordered on the stream (stream-ordered pool when the device has one).
  void* Allocate(std::size_t bytes);
  /// Frees memory from Allocate(), ordered on the stream (and after the calling thread's
  /// framework stream: StreamGuard); never throws. While the stream or that framework stream
  /// captures a CUDA graph, the memory is held instead (a free would be captured, and a graph
  /// may free only memory a graph allocated) and freed by the first Free(), ReleaseAfterWork()
  /// or RetireDeferred() after the capture, ordered after the framework stream's work by then.
  void Free(void* pointer) noexcept;

  /// Releases @p owner (what keeps caller-owned memory alive) once the work queued on the stream
  /// so far has run; the host does not wait (owners whose work is done are released by this
  /// and later calls). Never throws: when no event can be recorded, it waits for the stream.
  /// During a capture (see Free()) the owner is held until the first such call after it: an
  /// event recorded in a capture completes only when the graph runs, and cannot be queried.
  void ReleaseAfterWork(std::shared_ptr<const void> owner) noexcept;
  /// Releases the owners of ReleaseAfterWork() whose work has run (and what a capture held).
  void RetireDeferred() noexcept;
  /// Whether the stream, or the calling thread's framework stream (StreamGuard), captures work
  /// into a CUDA graph now: what Free() and ReleaseAfterWork() hold until after the capture.
  bool CaptureUnderway() noexcept;

  /// Orders every later Free() and ReleaseAfterWork() after the work recorded in @p event when
  /// they are called (a communication stream's last collective, re-recorded by its owner), so
  /// that memory a collective on another stream still uses is not handed out. Until
  /// StopOrderingFreesAfter(@p event).
  void OrderFreesAfter(cudaEvent_t event);
  void StopOrderingFreesAfter(cudaEvent_t event) noexcept;

  /// Result block (flag and sum) in device memory and its pinned host mirror.
  DeviceResult* DeviceResultBlock() noexcept { return device_result_; }
  DeviceResult* HostResultBlock() noexcept { return host_result_; }
  /// At least @p count floats of device scratch for the sum-of-squares partials (mutex held).
  float* Partials(std::size_t count);

  /// The one launch of @p entries with the chunk size of @p access (mutex held): its table image
  /// inline when it fits; otherwise the table kept on the device for the same memory
  /// (TableCache), or else a new table, written to a pinned staging buffer, copied on the
  /// stream to new device memory and kept for the next call. Queue the kernel before releasing
  /// the mutex and before the next Stage(), which may evict (free, stream-ordered) this table.
  /// `blocks` is 0 when every entry is empty.
  Launch Stage(std::span<const ListEntry> entries, Access access);

  /// Device memory holding the bytes of @p image (mutex held), for a kernel's table of another
  /// layout than Stage()'s (the fused optimizer steps): the copy kept from an earlier call with
  /// the same bytes, or else a new one, staged through pinned memory, copied on the stream and
  /// kept (the oldest of kKeptImages is evicted, freed in stream order). A kept image is never
  /// written again, so kernels queued earlier keep reading their own. Queue the kernel before
  /// releasing the mutex.
  const void* UploadKept(std::span<const std::byte> image);

  /// Clears the result flag, runs nothing else (mutex held).
  void ClearResult();
  /// Copies the result block to the host and waits for the stream (mutex held).
  DeviceResult ReadResult();

  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

 private:
  explicit DeviceContext(int device);

  int device_;
  Driver* driver_;
  bool stream_ordered_ = false;
  cudaMemPool_t pool_ = nullptr;  // the library's own pool (stream_ordered_)
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  DeviceResult* device_result_ = nullptr;
  DeviceResult* host_result_ = nullptr;
  float* partials_ = nullptr;
  std::size_t partials_capacity_ = 0;

  // Pinned host buffers the table images are copied from. A buffer is rewritten only after
  // its last copy has run (its event); several buffers let the host stage the next calls
  // while the device still works through earlier ones.
  struct StagingBuffer {
    std::byte* host = nullptr;
    std::size_t capacity = 0;
    cudaEvent_t copied = nullptr;  // recorded after the buffer's last copy
  };
  static constexpr std::size_t kStagingBuffers = 4;
  std::array<StagingBuffer, kStagingBuffers> staging_{};
  std::size_t next_staging_ = 0;
  // The uploaded table images, kept for lists passed again (see Stage()); an evicted one is
  // freed at once. The context lives until the process exits (see above), where the driver
  // reclaims the tables still kept.
  TableCache tables_{TableCache::kDefaultCapacity, [this](std::byte* table) { Free(table); }};

  StagingBuffer& StagingFor(std::size_t bytes);

  // UploadKept()'s images, newest last.
  struct KeptImage {
    std::vector<std::byte> bytes;
    void* device = nullptr;
  };
  static constexpr std::size_t kKeptImages = 8;
  std::vector<KeptImage> kept_images_;

  // Owners waiting for the stream to pass their event (ReleaseAfterWork), and spare events.
  struct Deferred {
    cudaEvent_t done = nullptr;
    std::shared_ptr<const void> owner;
  };
  std::mutex deferred_mutex_;
  std::vector<Deferred> deferred_;
  std::vector<cudaEvent_t> spare_events_;
  // Events of other streams that frees wait for (OrderFreesAfter), behind their own lock: a
  // free may come from any thread.
  std::mutex side_mutex_;
  std::vector<cudaEvent_t> side_events_;
  // Queues on the stream a wait for each of side_events_.
  void WaitForSideStreams() noexcept;
  // Memory of Free() and owners of ReleaseAfterWork() that came during a capture, with the
  // framework stream of the thread that let them go (a StreamGuard's; that stream must still
  // exist when they are released, as for an export).
  struct Held {
    void* pointer = nullptr;
    std::shared_ptr<const void> owner;
    bool guarded = false;
    cudaStream_t external = nullptr;
  };
  std::mutex held_mutex_;
  std::vector<Held> held_;
  // Whether @p stream captures work into a CUDA graph (an error counts as not capturing).
  bool Capturing(cudaStream_t stream) noexcept;
  // Holds @p pointer or @p owner (moved from only then) when the stream or the calling thread's
  // framework stream captures; false otherwise, or when it cannot be held.
  bool HoldWhileCapturing(void* pointer, std::shared_ptr<const void>& owner) noexcept;
  // Frees or releases what was held, once neither the stream nor its framework stream captures.
  void ReleaseHeld() noexcept;
  // ReleaseAfterWork() outside a capture.
  void ReleaseNow(std::shared_ptr<const void> owner) noexcept;
  // Under deferred_mutex_: moves the owners whose work is done to @p released.
  void RetireDeferredLocked(std::vector<std::shared_ptr<const void>>& released) noexcept;
};

/// What a backend call that queues work on a device holds for its duration: the device's mutex
/// (see Stage()), the device made current, and the join with the calling thread's framework
/// stream (StreamGuard).
class StreamUse {
 public:
  explicit StreamUse(DeviceContext& context)
      : lock_(context.Mutex()), device_(context.DeviceIndex()), order_(context.DeviceIndex(), context.Stream()) {}

 private:
  std::lock_guard<std::mutex> lock_;
  DeviceGuard device_;
  ExternalOrder order_;
};

}  // namespace mlframework::backends::cuda
