#pragma once
// Private: the one place through which the CUDA backend reaches the device. Every launch,
// copy, memset, allocation, free, event record and wait, and host synchronisation of the
// backend is a call on the active Driver. The runtime driver (RuntimeDriver.cpp) calls the
// CUDA runtime; a recording driver (RecordingDriver.hpp, tests only) records each call with
// its stream and the memory it reads and writes, so that a checker proves the stream order of
// every entry point on a machine without a GPU.
//
// The calls mirror the runtime's (same arguments, cudaError_t results, checked with
// MLFW_CUDA_CHECK at the call site), so the real path behaves exactly as a direct call. What
// a kernel touches is declared at its launch (KernelOperands); the runtime driver ignores it.

#include <cstddef>
#include <functional>
#include <span>

#include <cuda_runtime_api.h>

#include <mlframework/export.hpp>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// How a kernel or host step uses a range of memory.
enum class Use : unsigned char { Read, Write, ReadWrite };

/// @p bytes of memory from @p data, used as @p use.
struct BufferUse {
  const void* data = nullptr;
  std::size_t bytes = 0;
  Use use = Use::Read;
};

/// What one kernel launch reads and writes: the tensors of a multi-tensor list (each entry's
/// src is read, and written too when the kernel writes in place; a dst other than src is
/// written; a read-only kernel writes no list entry), plus further buffers.
struct KernelOperands {
  std::span<const ListEntry> list;
  Access access = Access::ReadOnly;
  std::span<const BufferUse> buffers;
};

class Driver {
 public:
  Driver() = default;
  virtual ~Driver() = default;
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // ---- devices ----
  virtual cudaError_t GetDeviceCount(int* count) = 0;
  virtual cudaError_t GetDevice(int* device) = 0;
  virtual cudaError_t SetDevice(int device) = 0;
  virtual cudaError_t DeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) = 0;
  /// A memory pool of @p device owned by the library (never the device's default pool).
  virtual cudaError_t MemPoolCreate(cudaMemPool_t* pool, int device) = 0;
  virtual cudaError_t MemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) = 0;

  // ---- streams and events ----
  virtual cudaError_t StreamCreate(cudaStream_t* stream, unsigned int flags) = 0;
  virtual cudaError_t StreamDestroy(cudaStream_t stream) = 0;
  virtual cudaError_t StreamGetDevice(cudaStream_t stream, int* device) = 0;
  /// Host waits for everything queued on @p stream.
  virtual cudaError_t StreamSynchronize(cudaStream_t stream) = 0;
  /// An event without timing.
  virtual cudaError_t EventCreate(cudaEvent_t* event) = 0;
  virtual cudaError_t EventDestroy(cudaEvent_t event) = 0;
  virtual cudaError_t EventRecord(cudaEvent_t event, cudaStream_t stream) = 0;
  virtual cudaError_t StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) = 0;
  /// cudaSuccess once the event's work is done (the host then knows it), cudaErrorNotReady before.
  virtual cudaError_t EventQuery(cudaEvent_t event) = 0;
  /// Host waits for the event's work.
  virtual cudaError_t EventSynchronize(cudaEvent_t event) = 0;
  /// Whether @p stream is capturing work into a CUDA graph (cudaStreamIsCapturing): what is
  /// queued then runs only when the graph is launched, so an event recorded then must not be
  /// queried or waited for by the host.
  virtual cudaError_t StreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) = 0;
  /// Swaps the calling thread's capture interaction mode with *@p mode
  /// (cudaThreadExchangeStreamCaptureMode): a thread in cudaStreamCaptureModeRelaxed may make
  /// calls (an event query) that a capture in global mode forbids every other thread.
  virtual cudaError_t ThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) = 0;

  // ---- memory ----
  /// Device memory ordered on @p stream from @p pool (cudaMallocFromPoolAsync).
  virtual cudaError_t MallocFromPoolAsync(void** pointer, std::size_t bytes, cudaMemPool_t pool,
                                          cudaStream_t stream) = 0;
  /// Frees memory of MallocFromPoolAsync() ordered on @p stream.
  virtual cudaError_t FreeAsync(void* pointer, cudaStream_t stream) = 0;
  /// Device memory without a pool (cudaMalloc) and its free (waits for the device).
  virtual cudaError_t Malloc(void** pointer, std::size_t bytes) = 0;
  virtual cudaError_t Free(void* pointer) = 0;
  /// Pinned host memory and its free.
  virtual cudaError_t MallocHost(void** pointer, std::size_t bytes) = 0;
  virtual cudaError_t FreeHost(void* pointer) = 0;
  virtual cudaError_t MemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                                  cudaStream_t stream) = 0;
  virtual cudaError_t MemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream) = 0;

  /// Whether Launch() and HostAccess() look at their operands (a recording driver checks them;
  /// the runtime ignores them). Callers whose operand lists cost a pass over thousands of
  /// tensors build them only when it does.
  virtual bool RecordsOperands() const noexcept { return false; }

  // ---- work ----
  /// Queues a kernel: @p launch enqueues it on @p stream (and checks the launch); @p operands
  /// says what it touches. @p kernel names it in reports.
  virtual void Launch(const char* kernel, cudaStream_t stream, const KernelOperands& operands,
                      const std::function<void()>& launch) = 0;
  /// The host reads or writes pinned memory it shares with the device (a result block, a
  /// staging buffer): it must be ordered after the device's last use.
  virtual void HostAccess(std::span<const BufferUse> buffers) = 0;
};

/// The driver every call of the backend goes through: the CUDA runtime unless a test installed another.
MLFRAMEWORK_EXPORT Driver& ActiveDriver() noexcept;

/// Installs @p driver (nullptr: the runtime driver again) and returns the previous one. For
/// tests: install before the first CUDA call of a test and keep it until every object made
/// under it is gone. Device contexts made under one driver are not used under another.
MLFRAMEWORK_EXPORT Driver* InstallDriver(Driver* driver) noexcept;

/// Changes each time InstallDriver() is called (device contexts belong to one generation).
unsigned long DriverGeneration() noexcept;

}  // namespace mlframework::backends::cuda
