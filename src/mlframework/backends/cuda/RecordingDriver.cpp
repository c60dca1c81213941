#include "mlframework/backends/cuda/RecordingDriver.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace mlframework::backends::cuda {

namespace {

template <typename Handle>
Handle MakeHandle(std::uintptr_t& next) {
  return reinterpret_cast<Handle>(next++);  // NOLINT(performance-no-int-to-ptr): an opaque handle, never dereferenced
}

}  // namespace

RecordingDriver::RecordingDriver(int devices) : devices_(devices), clocks_(1, Clock(1, 0)) {
  lanes_[nullptr] = kLegacy;
  lanes_[cudaStreamLegacy] = kLegacy;
  clocks_.emplace_back(2, 0);
}

RecordingDriver::~RecordingDriver() {
  // Freed memory stays allocated until here, so that no address is handed out twice.
  for (const auto& [base, allocation] : live_) {
    std::free(reinterpret_cast<void*>(base));  // NOLINT(performance-no-int-to-ptr, cppcoreguidelines-no-malloc)
  }
  for (const auto& [base, bytes] : freed_) {
    std::free(reinterpret_cast<void*>(base));  // NOLINT(performance-no-int-to-ptr, cppcoreguidelines-no-malloc)
  }
}

std::vector<std::string> RecordingDriver::Violations() const {
  const std::lock_guard lock(mutex_);
  return violations_;
}

std::size_t RecordingDriver::OperationCount() const {
  const std::lock_guard lock(mutex_);
  return operations_;
}

std::size_t RecordingDriver::LaunchCount() const {
  const std::lock_guard lock(mutex_);
  return launches_;
}

std::vector<std::string> RecordingDriver::Trace() const {
  const std::lock_guard lock(mutex_);
  return trace_;
}

bool RecordingDriver::Live(const void* pointer) {
  const std::lock_guard lock(mutex_);
  return Find(pointer) != live_.end();
}

void RecordingDriver::NameStream(cudaStream_t stream, const std::string& name) {
  const std::lock_guard lock(mutex_);
  names_[LaneOf(stream)] = name;
}

void RecordingDriver::BeginCapture() {
  const std::lock_guard lock(mutex_);
  capturing_ = true;
  capture_origin_.reset();
  forked_.clear();
}

void RecordingDriver::EndCapture() {
  const std::lock_guard lock(mutex_);
  // A stream forked into the capture must be joined back into the stream it was forked from,
  // all of its captured work, before the capture ends (else cudaErrorStreamCaptureUnjoined).
  for (const auto& [lane, origin] : forked_) {
    const Clock& joined = clocks_[origin];
    if (lane >= joined.size() || joined[lane] < clocks_[lane][lane]) {
      violations_.push_back(LaneName(lane) + " was forked into the captured region from " + LaneName(origin) +
                            " and not joined back before its end (cudaErrorStreamCaptureUnjoined)");
    }
  }
  capturing_ = false;
  capture_origin_.reset();
  forked_.clear();
}

void RecordingDriver::ReleaseOnHost(void* pointer) {
  const std::lock_guard lock(mutex_);
  ReleaseLocked(pointer, kHost, "the owner's release on the host");
}

void RecordingDriver::Stall(cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  stalled_[LaneOf(stream)] = true;
}

void RecordingDriver::Unstall() {
  const std::lock_guard lock(mutex_);
  stalled_.clear();
  never_.clear();
}

bool RecordingDriver::HostWaitLocked(std::size_t lane, bool never, const std::string& what) {
  if (never || stalled_.contains(lane)) {
    violations_.push_back("the host waits for good (" + what + " on " + LaneName(lane) +
                          ", behind work that never ends): a dead peer would hang the caller");
    return false;
  }
  return true;
}

// ---- devices ----

cudaError_t RecordingDriver::GetDeviceCount(int* count) {
  *count = devices_;
  return devices_ > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t RecordingDriver::GetDevice(int* device) {
  const std::lock_guard lock(mutex_);
  *device = current_;
  return cudaSuccess;
}

cudaError_t RecordingDriver::SetDevice(int device) {
  if (device < 0 || device >= devices_) {
    return cudaErrorInvalidDevice;
  }
  const std::lock_guard lock(mutex_);
  current_ = device;
  return cudaSuccess;
}

cudaError_t RecordingDriver::DeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device < 0 || device >= devices_) {
    return cudaErrorInvalidDevice;
  }
  *value = attribute == cudaDevAttrMemoryPoolsSupported ? 1 : 0;
  return cudaSuccess;
}

cudaError_t RecordingDriver::MemPoolCreate(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= devices_) {
    return cudaErrorInvalidDevice;
  }
  const std::lock_guard lock(mutex_);
  *pool = MakeHandle<cudaMemPool_t>(next_handle_);
  return cudaSuccess;
}

cudaError_t RecordingDriver::MemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr /*attribute*/, void* /*value*/) {
  return pool != nullptr ? cudaSuccess : cudaErrorInvalidValue;
}

// ---- streams and events ----

cudaError_t RecordingDriver::StreamCreate(cudaStream_t* stream, unsigned int flags) {
  const std::lock_guard lock(mutex_);
  *stream = MakeHandle<cudaStream_t>(next_handle_);
  const std::size_t lane = LaneOf(*stream);
  if ((flags & cudaStreamNonBlocking) == 0) {
    blocking_.insert(lane);
  }
  return cudaSuccess;
}

cudaError_t RecordingDriver::StreamDestroy(cudaStream_t /*stream*/) { return cudaSuccess; }

cudaError_t RecordingDriver::StreamGetDevice(cudaStream_t /*stream*/, int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t RecordingDriver::StreamSynchronize(cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  HostSynchronizationLocked("cudaStreamSynchronize");
  const std::size_t lane = LaneOf(stream);
  if (!HostWaitLocked(lane, false, "cudaStreamSynchronize")) {
    return cudaErrorLaunchTimeout;
  }
  Begin(kHost);
  Join(clocks_[kHost], clocks_[lane]);
  return cudaSuccess;
}

cudaError_t RecordingDriver::EventCreate(cudaEvent_t* event) {
  const std::lock_guard lock(mutex_);
  *event = MakeHandle<cudaEvent_t>(next_handle_);
  events_[*event] = Clock();
  return cudaSuccess;
}

cudaError_t RecordingDriver::EventDestroy(cudaEvent_t event) {
  const std::lock_guard lock(mutex_);
  events_.erase(event);
  captured_events_.erase(event);
  return cudaSuccess;
}

cudaError_t RecordingDriver::EventRecord(cudaEvent_t event, cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  const std::size_t lane = LaneOf(stream);
  Begin(lane);
  events_[event] = clocks_[lane];
  recorded_on_[event] = lane;
  if (capturing_) {
    captured_events_[event] = true;
  } else {
    captured_events_.erase(event);
  }
  if (stalled_.contains(lane)) {
    never_[event] = true;
  } else {
    never_.erase(event);
  }
  return cudaSuccess;
}

cudaError_t RecordingDriver::StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  const std::size_t lane = LaneOf(stream);
  if (capturing_ && captured_events_.contains(event)) {
    // A wait for an event of the capture makes a stream not yet in it part of it (a fork).
    const std::size_t from = recorded_on_[event];
    if (lane != from && lane != capture_origin_ && !forked_.contains(lane)) {
      forked_[lane] = from;
    }
  }
  Begin(lane);
  Join(clocks_[lane], events_[event]);
  if (never_.contains(event)) {
    stalled_[lane] = true;
  }
  return cudaSuccess;
}

cudaError_t RecordingDriver::EventQuery(cudaEvent_t event) {
  // Nothing runs, so every event is done unless stalled; a query that says done orders the
  // host after the event.
  const std::lock_guard lock(mutex_);
  if (capturing_ && !relaxed_threads_.contains(std::this_thread::get_id())) {
    violations_.emplace_back("cudaEventQuery inside a captured region from a thread not in relaxed capture mode");
    return cudaErrorStreamCaptureUnsupported;
  }
  if (CapturedEventLocked(event, "cudaEventQuery")) {
    return cudaErrorCapturedEvent;
  }
  if (never_.contains(event)) {
    return cudaErrorNotReady;
  }
  Begin(kHost);
  Join(clocks_[kHost], events_[event]);
  return cudaSuccess;
}

cudaError_t RecordingDriver::EventSynchronize(cudaEvent_t event) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  HostSynchronizationLocked("cudaEventSynchronize");
  if (CapturedEventLocked(event, "cudaEventSynchronize")) {
    return cudaErrorCapturedEvent;
  }
  if (!HostWaitLocked(kHost, never_.contains(event), "cudaEventSynchronize")) {
    return cudaErrorLaunchTimeout;
  }
  Begin(kHost);
  Join(clocks_[kHost], events_[event]);
  return cudaSuccess;
}

cudaError_t RecordingDriver::StreamIsCapturing(cudaStream_t /*stream*/, cudaStreamCaptureStatus* status) {
  const std::lock_guard lock(mutex_);
  *status = capturing_ ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t RecordingDriver::ThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  const std::lock_guard lock(mutex_);
  const auto self = std::this_thread::get_id();
  const cudaStreamCaptureMode previous =
      relaxed_threads_.contains(self) ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeGlobal;
  if (*mode == cudaStreamCaptureModeRelaxed) {
    relaxed_threads_.insert(self);
  } else {
    relaxed_threads_.erase(self);
  }
  *mode = previous;
  return cudaSuccess;
}

bool RecordingDriver::CapturedEventLocked(cudaEvent_t event, const std::string& what) {
  if (!captured_events_.contains(event)) {
    return false;
  }
  violations_.push_back(what +
                        " of an event recorded inside a captured region (cudaErrorCapturedEvent): it "
                        "completes only when the graph runs");
  return true;
}

// ---- memory ----

cudaError_t RecordingDriver::MallocFromPoolAsync(void** pointer, std::size_t bytes, cudaMemPool_t /*pool*/,
                                                 cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  AllocationLocked("cudaMallocFromPoolAsync");
  *pointer = AllocateLocked(bytes, LaneOf(stream), "cudaMallocFromPoolAsync");
  return cudaSuccess;
}

cudaError_t RecordingDriver::FreeAsync(void* pointer, cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  if (capturing_) {
    // Captured, it would be a graph's free node, which may free only memory a graph allocated:
    // the runtime fails it (and the capture with it).
    violations_.push_back("stream-ordered free inside a captured region: cudaFreeAsync on " + LaneName(LaneOf(stream)));
  }
  ReleaseLocked(pointer, LaneOf(stream), "cudaFreeAsync on " + LaneName(LaneOf(stream)));
  return cudaSuccess;
}

cudaError_t RecordingDriver::Malloc(void** pointer, std::size_t bytes) {
  return AllocateOnHost(pointer, bytes, "cudaMalloc");
}

cudaError_t RecordingDriver::Free(void* pointer) { return FreeAfterAll(pointer, "cudaFree"); }

cudaError_t RecordingDriver::MallocHost(void** pointer, std::size_t bytes) {
  return AllocateOnHost(pointer, bytes, "cudaMallocHost");
}

cudaError_t RecordingDriver::FreeHost(void* pointer) { return FreeAfterAll(pointer, "cudaFreeHost"); }

cudaError_t RecordingDriver::AllocateOnHost(void** pointer, std::size_t bytes, const char* what) {
  const std::lock_guard lock(mutex_);
  AllocationLocked(what);
  *pointer = AllocateLocked(bytes, kHost, what);
  return cudaSuccess;
}

cudaError_t RecordingDriver::FreeAfterAll(void* pointer, const char* what) {
  // cudaFree and cudaFreeHost wait for the whole device first.
  const std::lock_guard lock(mutex_);
  HostSynchronizationLocked(what);
  for (const auto& [lane, stalled] : stalled_) {
    if (!HostWaitLocked(lane, false, what)) {
      return cudaErrorLaunchTimeout;
    }
  }
  SynchronizeAllLocked();
  ReleaseLocked(pointer, kHost, what);
  return cudaSuccess;
}

cudaError_t RecordingDriver::MemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind /*kind*/,
                                         cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  trace_.emplace_back("cudaMemcpyAsync");
  const std::size_t lane = LaneOf(stream);
  const bool pageable_src = Find(src) == live_.end();
  const bool pageable_dst = Find(dst) == live_.end();
  if (pageable_src || pageable_dst) {
    // A copy from or to pageable memory is not a stream operation a graph can hold, and one to
    // pageable memory returns only when done.
    HostSynchronizationLocked("cudaMemcpyAsync with pageable host memory");
  }
  if (pageable_dst && !HostWaitLocked(lane, false, "cudaMemcpyAsync into pageable host memory")) {
    return cudaErrorLaunchTimeout;
  }
  const std::uint64_t tick = Begin(lane);
  Access(lane, tick, src, bytes, Use::Read, "cudaMemcpyAsync (source)");
  Access(lane, tick, dst, bytes, Use::Write, "cudaMemcpyAsync (destination)");
  if (bytes != 0) {
    std::memcpy(dst, src, bytes);
  }
  if (pageable_dst) {
    Begin(kHost);
    Join(clocks_[kHost], clocks_[lane]);
  }
  return cudaSuccess;
}

cudaError_t RecordingDriver::MemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  const std::size_t lane = LaneOf(stream);
  Access(lane, Begin(lane), pointer, bytes, Use::Write, "cudaMemsetAsync");
  if (bytes != 0) {
    std::memset(pointer, value, bytes);
  }
  return cudaSuccess;
}

// ---- work ----

void RecordingDriver::Launch(const char* kernel, cudaStream_t stream, const KernelOperands& operands,
                             const std::function<void()>& /*launch*/) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  ++launches_;
  trace_.emplace_back(kernel);
  const std::size_t lane = LaneOf(stream);
  const std::uint64_t tick = Begin(lane);
  const std::string what = std::string("kernel '") + kernel + "'";
  for (const ListEntry& entry : operands.list) {
    const bool writes = operands.access == Access::Writes;
    const bool in_place = entry.dst == nullptr || entry.dst == entry.src;
    Access(lane, tick, entry.src, entry.size * ElementSize(entry.src_dtype),
           writes && in_place ? Use::ReadWrite : Use::Read, what);
    if (writes && !in_place) {
      Access(lane, tick, entry.dst, entry.size * ElementSize(entry.dst_dtype), Use::Write, what);
    }
  }
  for (const BufferUse& buffer : operands.buffers) {
    Access(lane, tick, buffer.data, buffer.bytes, buffer.use, what);
  }
}

void RecordingDriver::HostAccess(std::span<const BufferUse> buffers) {
  const std::lock_guard lock(mutex_);
  ++operations_;
  const std::uint64_t tick = Begin(kHost);
  for (const BufferUse& buffer : buffers) {
    Access(kHost, tick, buffer.data, buffer.bytes, buffer.use, "a host access");
  }
}

// ---- the checker ----

std::size_t RecordingDriver::LaneOf(cudaStream_t stream) {
  const auto found = lanes_.find(stream);
  if (found != lanes_.end()) {
    return found->second;
  }
  const std::size_t lane = clocks_.size();
  lanes_[stream] = lane;
  clocks_.emplace_back(lane + 1, 0);
  return lane;
}

std::uint64_t RecordingDriver::Begin(std::size_t lane) {
  if (capturing_ && lane != kHost && !capture_origin_ && !forked_.contains(lane)) {
    capture_origin_ = lane;  // the first stream to queue work in the region captures it
  }
  Clock& clock = clocks_[lane];
  if (lane != kHost) {
    Join(clock, clocks_[kHost]);
  }
  if (lane == kLegacy) {
    for (const std::size_t blocking : blocking_) {
      Join(clock, clocks_[blocking]);
    }
  } else if (blocking_.contains(lane)) {
    Join(clock, clocks_[kLegacy]);
  }
  if (clock.size() <= lane) {
    clock.resize(lane + 1, 0);
  }
  return ++clock[lane];
}

void RecordingDriver::Join(Clock& into, const Clock& from) {
  if (into.size() < from.size()) {
    into.resize(from.size(), 0);
  }
  for (std::size_t i = 0; i < from.size(); ++i) {
    into[i] = std::max(into[i], from[i]);
  }
}

std::map<std::uintptr_t, RecordingDriver::Allocation>::iterator RecordingDriver::Find(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto after = live_.upper_bound(address);
  if (after == live_.begin()) {
    return live_.end();
  }
  auto candidate = std::prev(after);
  return address < candidate->first + std::max<std::size_t>(candidate->second.bytes, 1) ? candidate : live_.end();
}

void RecordingDriver::Access(std::size_t lane, std::uint64_t tick, const void* pointer, std::size_t bytes, Use use,
                             const std::string& what) {
  if (pointer == nullptr || bytes == 0) {
    return;
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  const std::uintptr_t end = begin + bytes;
  const auto allocation = Find(pointer);
  if (allocation == live_.end()) {
    const auto after = freed_.upper_bound(begin);
    if (after != freed_.begin() && begin < std::prev(after)->first + std::prev(after)->second) {
      violations_.push_back(what + " on " + LaneName(lane) + " uses freed memory");
    }
    return;  // pageable host memory: not tracked
  }
  const Clock& clock = clocks_[lane];
  const bool writes = use != Use::Read;
  auto ordered = [&](const Record& record) {
    return record.lane == lane || (record.lane < clock.size() && clock[record.lane] >= record.tick);
  };
  for (const Record& record : allocation->second.records) {
    if (record.end <= begin || end <= record.begin || !(record.write || writes)) {
      continue;
    }
    if (!ordered(record)) {
      violations_.push_back(what + " on " + LaneName(lane) + (writes ? " writes" : " reads") + " buffer #" +
                            std::to_string(allocation->second.id) + " [+" + std::to_string(begin - allocation->first) +
                            ", " + std::to_string(bytes) + " bytes], not ordered after " + record.what + " on " +
                            LaneName(record.lane) + (record.write ? ", which writes it" : ", which reads it"));
      break;  // one line per access
    }
  }
  // Records ordered before this access and inside its range add nothing once it is recorded
  // (for a write), or are subsumed by it (an earlier read of this lane).
  std::erase_if(allocation->second.records, [&](const Record& record) {
    return record.begin >= begin && record.end <= end && ordered(record) && (writes || !record.write);
  });
  allocation->second.records.push_back(Record{begin, end, lane, tick, writes, what});
}

void* RecordingDriver::AllocateLocked(std::size_t bytes, std::size_t lane, const std::string& what) {
  ++operations_;
  void* pointer = std::malloc(std::max<std::size_t>(bytes, 1));  // NOLINT(cppcoreguidelines-no-malloc)
  if (pointer == nullptr) {
    throw std::bad_alloc();
  }
  Allocation allocation;
  allocation.bytes = bytes;
  allocation.id = next_id_++;
  const auto base = reinterpret_cast<std::uintptr_t>(pointer);
  // The allocation counts as a write on its lane: a stream-ordered block is usable on another
  // stream only once that stream is ordered after the allocation.
  allocation.records.push_back(Record{base, base + std::max<std::size_t>(bytes, 1), lane, Begin(lane), true, what});
  live_[base] = std::move(allocation);
  return pointer;
}

void RecordingDriver::ReleaseLocked(void* pointer, std::size_t lane, const std::string& what) {
  if (pointer == nullptr) {
    return;
  }
  ++operations_;
  const auto base = reinterpret_cast<std::uintptr_t>(pointer);
  const auto allocation = live_.find(base);
  if (allocation == live_.end()) {
    violations_.push_back(what + " of memory that is not a live allocation");
    return;
  }
  const std::uint64_t tick = Begin(lane);
  static_cast<void>(tick);
  const Clock& clock = clocks_[lane];
  for (const Record& record : allocation->second.records) {
    if (record.lane != lane && (record.lane >= clock.size() || clock[record.lane] < record.tick)) {
      violations_.push_back(what + " frees buffer #" + std::to_string(allocation->second.id) +
                            ", not ordered after its last use: " + record.what + " on " + LaneName(record.lane));
      break;  // one line per free
    }
  }
  freed_[base] = std::max<std::size_t>(allocation->second.bytes, 1);
  live_.erase(allocation);
}

void RecordingDriver::HostSynchronizationLocked(const std::string& what) {
  if (capturing_) {
    violations_.push_back("host synchronisation inside a captured region: " + what);
  }
}

void RecordingDriver::AllocationLocked(const std::string& what) {
  if (capturing_) {
    violations_.push_back("allocation inside a captured region: " + what);
  }
}

void RecordingDriver::SynchronizeAllLocked() {
  Begin(kHost);
  for (std::size_t lane = 1; lane < clocks_.size(); ++lane) {
    Join(clocks_[kHost], clocks_[lane]);
  }
}

std::string RecordingDriver::LaneName(std::size_t lane) const {
  if (lane == kHost) {
    return "the host";
  }
  const auto named = names_.find(lane);
  return named != names_.end() ? "the " + named->second + " stream" : "stream " + std::to_string(lane);
}

}  // namespace mlframework::backends::cuda
