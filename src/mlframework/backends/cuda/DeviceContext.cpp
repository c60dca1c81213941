#include "mlframework/backends/cuda/DeviceContext.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"

namespace mlframework::backends::cuda {

int QueryDeviceCount(std::string* reason) noexcept {
  int count = 0;
  const cudaError_t status = ActiveDriver().GetDeviceCount(&count);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    if (reason != nullptr) {
      *reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
                cudaGetErrorString(status) + ")";
    }
    return 0;
  }
  if (count == 0 && reason != nullptr) {
    *reason = "cudaGetDeviceCount found no CUDA device";
  }
  return count;
}

DeviceGuard::DeviceGuard(int device) {
  Driver& driver = ActiveDriver();
  MLFW_CUDA_CHECK(driver.GetDevice(&previous_));
  if (previous_ != device) {
    MLFW_CUDA_CHECK(driver.SetDevice(device));
  }
}

DeviceGuard::~DeviceGuard() {
  Driver& driver = ActiveDriver();
  int current = -1;
  if (driver.GetDevice(&current) == cudaSuccess && current != previous_ && previous_ >= 0) {
    MLFW_CUDA_CHECK_NOTHROW(driver.SetDevice(previous_));
  }
}

DeviceContext& DeviceContext::Get(int device) {
  // Leaked on purpose (see the header); the vector is sized once by the device count.
  static std::mutex registry_mutex;
  static auto* registry = new std::vector<DeviceContext*>();
  static unsigned long registry_generation = 0;
  std::lock_guard lock(registry_mutex);
  if (registry_generation != DriverGeneration()) {
    // Another driver was installed (tests): its devices get contexts of their own. The old
    // ones stay allocated, as everywhere else, for objects that may still point to them.
    registry->clear();
    registry_generation = DriverGeneration();
  }
  if (registry->empty()) {
    std::string reason;
    const int count = QueryDeviceCount(&reason);
    if (count == 0) {
      throw BackendError("cannot use cuda:" + std::to_string(device) + ": " + reason);
    }
    registry->assign(static_cast<std::size_t>(count), nullptr);
  }
  if (device < 0 || static_cast<std::size_t>(device) >= registry->size()) {
    throw BackendError("cannot use cuda:" + std::to_string(device) + ": this process sees " +
                       std::to_string(registry->size()) + " CUDA device(s)");
  }
  DeviceContext*& slot = (*registry)[static_cast<std::size_t>(device)];
  if (slot == nullptr) {
    slot = new DeviceContext(device);
  }
  return *slot;
}

DeviceContext::DeviceContext(int device) : device_(device), driver_(&ActiveDriver()) {
  DeviceGuard guard(device);
  int pools = 0;
  MLFW_CUDA_CHECK(driver_->DeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  stream_ordered_ = pools != 0;
  if (stream_ordered_) {
    // The library's own pool, so that its settings change nothing for the other libraries of
    // the process (which share the device's default pool). Freed blocks stay in it: returning
    // them to the driver at every synchronisation would make the next allocation slow.
    MLFW_CUDA_CHECK(driver_->MemPoolCreate(&pool_, device));
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    MLFW_CUDA_CHECK(driver_->MemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  // A blocking stream: it stays ordered with the legacy default stream a user's code may use.
  MLFW_CUDA_CHECK(driver_->StreamCreate(&stream_, cudaStreamDefault));
  MLFW_CUDA_CHECK(driver_->Malloc(reinterpret_cast<void**>(&device_result_), sizeof(DeviceResult)));
  MLFW_CUDA_CHECK(driver_->MallocHost(reinterpret_cast<void**>(&host_result_), sizeof(DeviceResult)));
  MLFW_CUDA_CHECK(driver_->MemsetAsync(device_result_, 0, sizeof(DeviceResult), stream_));
}

void* DeviceContext::Allocate(std::size_t bytes) {
  if (bytes == 0) {
    return nullptr;
  }
  DeviceGuard guard(device_);
  void* pointer = nullptr;
  if (stream_ordered_) {
    MLFW_CUDA_CHECK(driver_->MallocFromPoolAsync(&pointer, bytes, pool_, stream_));
  } else {
    MLFW_CUDA_CHECK(driver_->Malloc(&pointer, bytes));
  }
  return pointer;
}

void DeviceContext::Free(void* pointer) noexcept {
  if (pointer == nullptr) {
    return;
  }
  int previous = -1;
  const bool switched =
      driver_->GetDevice(&previous) == cudaSuccess && previous != device_ && driver_->SetDevice(device_) == cudaSuccess;
  std::shared_ptr<const void> no_owner;
  if (!HoldWhileCapturing(pointer, no_owner)) {
    ReleaseHeld();
    if (stream_ordered_) {
      try {
        // The framework's stream may still read library memory it was handed (the FP32 outputs).
        WaitForExternal(device_, stream_);
      } catch (const BackendError&) {  // a free must not throw; the device error surfaces on the next call
      }
      WaitForSideStreams();
      MLFW_CUDA_CHECK_NOTHROW(driver_->FreeAsync(pointer, stream_));
    } else {
      MLFW_CUDA_CHECK_NOTHROW(driver_->Free(pointer));
    }
  }
  if (switched) {
    MLFW_CUDA_CHECK_NOTHROW(driver_->SetDevice(previous));
  }
}

bool DeviceContext::Capturing(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t queried = driver_->StreamIsCapturing(stream, &status);
  MLFW_CUDA_CHECK_NOTHROW(queried);
  return queried == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

bool DeviceContext::CaptureUnderway() noexcept {
  // A framework captures on its own stream (a StreamGuard's); the library's stream captures
  // once a call under that guard joined it to the capture. Either way, a free or an event
  // queued now would land in the graph. The legacy default stream never captures.
  ExternalStream external;
  const bool guarded = FindExternalStream(device_, external);
  return Capturing(stream_) || (guarded && external.stream != nullptr && Capturing(external.stream));
}

bool DeviceContext::HoldWhileCapturing(void* pointer, std::shared_ptr<const void>& owner) noexcept {
  if (!CaptureUnderway()) {
    return false;
  }
  ExternalStream external;
  const bool guarded = FindExternalStream(device_, external);
  try {
    const std::lock_guard lock(held_mutex_);
    held_.push_back(Held{pointer, nullptr, guarded, external.stream});
    held_.back().owner = std::move(owner);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

void DeviceContext::ReleaseHeld() noexcept {
  std::vector<Held> ready;
  try {
    const std::lock_guard lock(held_mutex_);
    if (held_.empty() || Capturing(stream_)) {
      return;
    }
    ready.reserve(held_.size());
    std::erase_if(held_, [&](Held& entry) {
      if (entry.guarded && entry.external != nullptr && Capturing(entry.external)) {
        return false;  // its framework stream still captures
      }
      ready.push_back(std::move(entry));
      return true;
    });
  } catch (const std::bad_alloc&) {
    return;  // kept for the next call
  }
  std::optional<DeviceGuard> current;  // the event below belongs to the current device
  try {
    current.emplace(device_);
  } catch (const BackendError&) {  // the device error surfaces on the next call
  }
  for (Held& entry : ready) {
    if (entry.pointer == nullptr) {
      ReleaseNow(std::move(entry.owner));
      continue;
    }
    if (!stream_ordered_) {
      MLFW_CUDA_CHECK_NOTHROW(driver_->Free(entry.pointer));
      continue;
    }
    if (entry.guarded) {
      // Ordered after the work queued on the framework stream by now, which includes what it
      // queued on the memory before the capture.
      cudaEvent_t queued = nullptr;
      if (driver_->EventCreate(&queued) == cudaSuccess) {
        MLFW_CUDA_CHECK_NOTHROW(driver_->EventRecord(queued, entry.external));
        MLFW_CUDA_CHECK_NOTHROW(driver_->StreamWaitEvent(stream_, queued));
        MLFW_CUDA_CHECK_NOTHROW(driver_->EventDestroy(queued));
      } else {
        static_cast<void>(cudaGetLastError());
        MLFW_CUDA_CHECK_NOTHROW(driver_->StreamSynchronize(entry.external));
      }
    }
    WaitForSideStreams();
    MLFW_CUDA_CHECK_NOTHROW(driver_->FreeAsync(entry.pointer, stream_));
  }
}

void DeviceContext::ReleaseAfterWork(std::shared_ptr<const void> owner) noexcept {
  if (HoldWhileCapturing(nullptr, owner)) {
    return;
  }
  ReleaseHeld();
  ReleaseNow(std::move(owner));
}

void DeviceContext::ReleaseNow(std::shared_ptr<const void> owner) noexcept {
  // Released outside the lock: an owner's deleter may drop further tensors of this device.
  std::vector<std::shared_ptr<const void>> released;
  try {
    const std::lock_guard lock(deferred_mutex_);
    RetireDeferredLocked(released);
    released.reserve(released.size() + 1);
    const DeviceGuard guard(device_);
    cudaEvent_t done = nullptr;
    if (spare_events_.empty()) {
      MLFW_CUDA_CHECK(driver_->EventCreate(&done));
    } else {
      done = spare_events_.back();
      spare_events_.pop_back();
    }
    deferred_.push_back(Deferred{done, nullptr});
    WaitForSideStreams();
    const cudaError_t recorded = driver_->EventRecord(done, stream_);
    if (recorded != cudaSuccess) {
      deferred_.pop_back();
      spare_events_.push_back(done);
      MLFW_CUDA_CHECK(recorded);
    }
    deferred_.back().owner = std::move(owner);
    RetireDeferredLocked(released);
  } catch (...) {  // no event: the stream's work runs first, then the owner goes
    if (owner) {
      MLFW_CUDA_CHECK_NOTHROW(driver_->StreamSynchronize(stream_));
    }
  }
}

void DeviceContext::OrderFreesAfter(cudaEvent_t event) {
  const std::lock_guard lock(side_mutex_);
  if (std::find(side_events_.begin(), side_events_.end(), event) == side_events_.end()) {
    side_events_.push_back(event);
  }
}

void DeviceContext::StopOrderingFreesAfter(cudaEvent_t event) noexcept {
  const std::lock_guard lock(side_mutex_);
  std::erase(side_events_, event);
}

void DeviceContext::WaitForSideStreams() noexcept {
  const std::lock_guard lock(side_mutex_);
  for (cudaEvent_t event : side_events_) {
    MLFW_CUDA_CHECK_NOTHROW(driver_->StreamWaitEvent(stream_, event));
  }
}

void DeviceContext::RetireDeferred() noexcept {
  ReleaseHeld();
  std::vector<std::shared_ptr<const void>> released;
  const std::lock_guard lock(deferred_mutex_);
  RetireDeferredLocked(released);
}

void DeviceContext::RetireDeferredLocked(std::vector<std::shared_ptr<const void>>& released) noexcept {
  std::erase_if(deferred_, [&](Deferred& entry) {
    if (driver_->EventQuery(entry.done) != cudaSuccess) {
      return false;  // not yet run (an error surfaces on the next synchronising call)
    }
    try {
      released.push_back(std::move(entry.owner));
      spare_events_.push_back(entry.done);
    } catch (const std::bad_alloc&) {
      entry.owner.reset();
      MLFW_CUDA_CHECK_NOTHROW(driver_->EventDestroy(entry.done));
    }
    return true;
  });
}

float* DeviceContext::Partials(std::size_t count) {
  if (count > partials_capacity_) {
    const std::size_t capacity = count + count / 2;  // grow geometrically
    auto* grown = static_cast<float*>(Allocate(capacity * sizeof(float)));
    Free(partials_);  // stream-ordered: the previous kernels finish with it first
    partials_ = grown;
    partials_capacity_ = capacity;
  }
  return partials_;
}

Launch DeviceContext::Stage(std::span<const ListEntry> entries, Access access) {
  // A list of at most kInlineTableTensors entries always travels inline: only longer ones may
  // have a kept table. A hit costs one comparison of the list with the kept key.
  if (entries.size() > kInlineTableTensors) {
    if (const KeptTable* kept = tables_.Find(device_, entries); kept != nullptr) {
      const TableShape shape = ShapeOfTotal(kept->count, kept->total, access);
      Launch launch;
      launch.blocks = shape.blocks;
      launch.table.count = shape.count;
      launch.table.chunk_elements = shape.chunk_elements;
      launch.table.uploaded = kept->table;
      return launch;
    }
  }
  const TableShape shape = ShapeOf(entries, access);
  Launch launch;
  launch.blocks = shape.blocks;
  launch.table.count = shape.count;
  launch.table.chunk_elements = shape.chunk_elements;
  if (shape.count == 0) {
    return launch;
  }
  if (shape.bytes <= kInlineTableBytes) {
    WriteTable(entries, shape, launch.table.inline_image);
    return launch;
  }
  // Why sharing tables with kernels still in flight is safe: a kept table is never written
  // again after its upload (a list that misses gets new device memory, so a kernel queued
  // earlier keeps reading its own table), and the cache frees an evicted table with Free(),
  // ordered on this device's one stream after every kernel queued before it, among them all
  // that read the table (without a stream-ordered pool, cudaFree waits for the device).
  TableKey key = TableKey::Of(device_, entries);  // before any allocation: it may throw
  StagingBuffer& buffer = StagingFor(shape.bytes);
  WriteTable(entries, shape, buffer.host);
  auto* table = static_cast<std::byte*>(Allocate(shape.bytes));
  try {
    MLFW_CUDA_CHECK(driver_->MemcpyAsync(table, buffer.host, shape.bytes, cudaMemcpyHostToDevice, stream_));
    MLFW_CUDA_CHECK(driver_->EventRecord(buffer.copied, stream_));
  } catch (...) {
    Free(table);  // never kept: a table whose copy failed must not be found by a later call
    throw;
  }
  tables_.Insert(std::move(key), table, shape.count, shape.total);
  launch.table.uploaded = table;
  return launch;
}

const void* DeviceContext::UploadKept(std::span<const std::byte> image) {
  const auto same = [&](const KeptImage& kept) { return std::ranges::equal(kept.bytes, image); };
  if (const auto found = std::ranges::find_if(kept_images_, same); found != kept_images_.end()) {
    std::rotate(found, found + 1, kept_images_.end());  // the newest now
    return kept_images_.back().device;
  }
  KeptImage kept{std::vector<std::byte>(image.begin(), image.end()), nullptr};  // before any allocation: it may throw
  if (kept_images_.size() == kKeptImages) {
    Free(kept_images_.front().device);  // stream-ordered: the kernels that read it finish first
    kept_images_.erase(kept_images_.begin());
  }
  kept_images_.reserve(kKeptImages);
  StagingBuffer& buffer = StagingFor(image.size());
  std::memcpy(buffer.host, image.data(), image.size());
  kept.device = Allocate(image.size());
  try {
    MLFW_CUDA_CHECK(driver_->MemcpyAsync(kept.device, buffer.host, image.size(), cudaMemcpyHostToDevice, stream_));
    MLFW_CUDA_CHECK(driver_->EventRecord(buffer.copied, stream_));
  } catch (...) {
    Free(kept.device);
    throw;
  }
  kept_images_.push_back(std::move(kept));
  return kept_images_.back().device;
}

DeviceContext::StagingBuffer& DeviceContext::StagingFor(std::size_t bytes) {
  StagingBuffer& buffer = staging_[next_staging_ % kStagingBuffers];
  if (buffer.copied == nullptr) {
    MLFW_CUDA_CHECK(driver_->EventCreate(&buffer.copied));
  } else {
    MLFW_CUDA_CHECK(driver_->EventSynchronize(buffer.copied));  // its previous copy has run
  }
  if (buffer.capacity < bytes) {
    const std::size_t capacity = bytes + bytes / 2;  // grow geometrically
    if (buffer.host != nullptr) {
      MLFW_CUDA_CHECK(driver_->FreeHost(buffer.host));
    }
    buffer.host = nullptr;
    buffer.capacity = 0;
    void* grown = nullptr;
    MLFW_CUDA_CHECK(driver_->MallocHost(&grown, capacity));
    buffer.host = static_cast<std::byte*>(grown);
    buffer.capacity = capacity;
  }
  ++next_staging_;
  return buffer;
}

void DeviceContext::ClearResult() {
  MLFW_CUDA_CHECK(driver_->MemsetAsync(device_result_, 0, sizeof(DeviceResult), stream_));
}

DeviceResult DeviceContext::ReadResult() {
  MLFW_CUDA_CHECK(
      driver_->MemcpyAsync(host_result_, device_result_, sizeof(DeviceResult), cudaMemcpyDeviceToHost, stream_));
  MLFW_CUDA_CHECK(driver_->StreamSynchronize(stream_));
  const BufferUse read{host_result_, sizeof(DeviceResult), Use::Read};
  driver_->HostAccess({&read, 1});
  return *host_result_;
}

}  // namespace mlframework::backends::cuda
