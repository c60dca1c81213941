#pragma once
// Private, for tests: a Driver that runs no kernel and checks stream order (tests/cuda/StreamOrderTests.cpp).
//
// It plays a machine with `devices` GPUs on the host: device memory is host memory, copies
// and memsets are done at once, kernels are recorded but not run (so it checks ordering, not
// values). Every operation is recorded with its lane (the host, or a stream) and the memory
// ranges it reads and writes, and a checker keeps happens-before as vector clocks:
//
//   - operations on one stream are ordered; an operation queued by the host is ordered after
//     everything the host did or learned before queuing it;
//   - an event carries the clock of its stream at its record; a stream that waits for it
//     joins that clock; the host joins it when it synchronises with the event or a query
//     says it is done; a stream synchronisation (or a copy into pageable host memory, which
//     returns when done) joins the stream's clock into the host's;
//   - the legacy default stream (stream 0, cudaStreamLegacy) as the runtime has it: an
//     operation on it waits for the work queued before on every blocking stream (made without
//     cudaStreamNonBlocking), and later work on a blocking stream waits for it.
//
// Violations, collected in Violations():
//   - an access to memory not ordered after its last write on another lane (or a write not
//     ordered after the reads since), and any access to freed memory;
//   - a stream-ordered free not ordered after the memory's last use; a host release of
//     memory (ReleaseOnHost, as a framework's allocator does) likewise;
//   - a host synchronisation, an allocation or a stream-ordered free while a region is marked
//     as captured (a graph's free node may free only memory a graph allocated), an event
//     query there from a thread not in relaxed capture mode (the runtime forbids it during a
//     capture in global mode and fails it; so does this driver), and a host query of or wait for
//     an event recorded inside such a region (the runtime answers cudaErrorCapturedEvent; so
//     does this driver); a stream forked into the region (it waited for an event recorded
//     there on a stream in it; the first stream to queue work in the region is in it) whose
//     work there is not all joined back into the stream it was forked from at the region's end
//     (cudaErrorStreamCaptureUnjoined);
//   - a host wait for work that never ends (after Stall(): a dead peer's collective), which
//     would hang; the call returns cudaErrorLaunchTimeout instead of blocking.
// Memory the recorder did not hand out (a pageable host vector) is not tracked.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mlframework/backends/cuda/Driver.hpp"

namespace mlframework::backends::cuda {

class RecordingDriver final : public Driver {
 public:
  explicit RecordingDriver(int devices = 1);
  ~RecordingDriver() override;

  /// What went wrong so far, one line each (empty: every recorded operation was ordered).
  std::vector<std::string> Violations() const;
  /// Operations recorded so far (launches, copies, memsets, allocations, frees, waits).
  std::size_t OperationCount() const;
  /// Kernels launched so far.
  std::size_t LaunchCount() const;
  /// The kernels launched (by name) and the copies made ("cudaMemcpyAsync") so far, in call
  /// order: what a test reads to see which work an entry point queued.
  std::vector<std::string> Trace() const;
  /// Whether @p pointer is inside memory of this recorder that was allocated and not yet freed.
  bool Live(const void* pointer);
  /// Names @p stream in reports ("framework").
  void NameStream(cudaStream_t stream, const std::string& name);
  /// Marks the start and end of a region a framework captures into a CUDA graph (every stream
  /// counts as capturing inside it: StreamIsCapturing()).
  void BeginCapture();
  void EndCapture();
  /// The host hands memory of this recorder back to its owner (a framework's caching
  /// allocator, which may give it out again at once): it must be ordered after its last use.
  void ReleaseOnHost(void* pointer);
  /// From now on the work queued on @p stream never ends (a collective whose peer is dead), nor
  /// does any stream's work after a wait for it; until Unstall() (an abort makes it return).
  void Stall(cudaStream_t stream);
  void Unstall();

  bool RecordsOperands() const noexcept override { return true; }
  cudaError_t GetDeviceCount(int* count) override;
  cudaError_t GetDevice(int* device) override;
  cudaError_t SetDevice(int device) override;
  cudaError_t DeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) override;
  cudaError_t MemPoolCreate(cudaMemPool_t* pool, int device) override;
  cudaError_t MemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) override;
  cudaError_t StreamCreate(cudaStream_t* stream, unsigned int flags) override;
  cudaError_t StreamDestroy(cudaStream_t stream) override;
  cudaError_t StreamGetDevice(cudaStream_t stream, int* device) override;
  cudaError_t StreamSynchronize(cudaStream_t stream) override;
  cudaError_t EventCreate(cudaEvent_t* event) override;
  cudaError_t EventDestroy(cudaEvent_t event) override;
  cudaError_t EventRecord(cudaEvent_t event, cudaStream_t stream) override;
  cudaError_t StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) override;
  cudaError_t EventQuery(cudaEvent_t event) override;
  cudaError_t EventSynchronize(cudaEvent_t event) override;
  cudaError_t StreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) override;
  cudaError_t ThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) override;
  cudaError_t MallocFromPoolAsync(void** pointer, std::size_t bytes, cudaMemPool_t pool, cudaStream_t stream) override;
  cudaError_t FreeAsync(void* pointer, cudaStream_t stream) override;
  cudaError_t Malloc(void** pointer, std::size_t bytes) override;
  cudaError_t Free(void* pointer) override;
  cudaError_t MallocHost(void** pointer, std::size_t bytes) override;
  cudaError_t FreeHost(void* pointer) override;
  cudaError_t MemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                          cudaStream_t stream) override;
  cudaError_t MemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream) override;
  void Launch(const char* kernel, cudaStream_t stream, const KernelOperands& operands,
              const std::function<void()>& launch) override;
  void HostAccess(std::span<const BufferUse> buffers) override;

 private:
  using Clock = std::vector<std::uint64_t>;
  struct Record {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    std::size_t lane = 0;
    std::uint64_t tick = 0;
    bool write = false;
    std::string what;
  };
  struct Allocation {
    std::size_t bytes = 0;
    int id = 0;
    std::vector<Record> records;
  };

  static constexpr std::size_t kHost = 0;
  static constexpr std::size_t kLegacy = 1;  // the legacy default stream's lane

  std::size_t LaneOf(cudaStream_t stream);
  // Starts an operation on @p lane: joins the host's clock into a stream's, advances the lane.
  std::uint64_t Begin(std::size_t lane);
  void Join(Clock& into, const Clock& from);
  void Access(std::size_t lane, std::uint64_t tick, const void* pointer, std::size_t bytes, Use use,
              const std::string& what);
  void ReleaseLocked(void* pointer, std::size_t lane, const std::string& what);
  void* AllocateLocked(std::size_t bytes, std::size_t lane, const std::string& what);
  // Malloc() and MallocHost(); Free() and FreeHost(), which wait for the whole device.
  cudaError_t AllocateOnHost(void** pointer, std::size_t bytes, const char* what);
  cudaError_t FreeAfterAll(void* pointer, const char* what);
  void HostSynchronizationLocked(const std::string& what);
  void AllocationLocked(const std::string& what);
  void SynchronizeAllLocked();
  // The host waits for @p lane (or for an event that never completes, @p never): a violation
  // and false when that wait would never end.
  bool HostWaitLocked(std::size_t lane, bool never, const std::string& what);
  // A violation and true when @p event was last recorded inside a captured region.
  bool CapturedEventLocked(cudaEvent_t event, const std::string& what);
  std::map<std::uintptr_t, Allocation>::iterator Find(const void* pointer);
  std::string LaneName(std::size_t lane) const;

  mutable std::mutex mutex_;
  int devices_;
  int current_ = 0;
  std::vector<Clock> clocks_;  // per lane: the host, then each stream
  std::map<cudaStream_t, std::size_t> lanes_;
  std::set<std::size_t> blocking_;  // lanes of streams that synchronise with the legacy default stream
  std::map<std::size_t, std::string> names_;
  std::map<cudaEvent_t, Clock> events_;
  std::map<std::size_t, bool> stalled_;             // lanes whose work never ends
  std::map<cudaEvent_t, bool> never_;               // events recorded after such work
  std::map<cudaEvent_t, bool> captured_events_;     // events last recorded inside a captured region
  std::set<std::thread::id> relaxed_threads_;       // threads in relaxed capture mode
  std::map<cudaEvent_t, std::size_t> recorded_on_;  // the lane of each event's last record
  std::optional<std::size_t> capture_origin_;       // the lane that queued first in the captured region
  std::map<std::size_t, std::size_t> forked_;       // lanes forked into the region -> the lane forked from
  std::map<std::uintptr_t, Allocation> live_;
  std::map<std::uintptr_t, std::size_t> freed_;  // base -> bytes of freed allocations
  std::uintptr_t next_handle_ = 0x1000;
  int next_id_ = 0;
  bool capturing_ = false;
  std::size_t operations_ = 0;
  std::size_t launches_ = 0;
  std::vector<std::string> trace_;
  std::vector<std::string> violations_;
};

}  // namespace mlframework::backends::cuda
