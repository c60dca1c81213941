#include "mlframework/backends/cuda/ExternalStream.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/Driver.hpp"

namespace mlframework::backends::cuda {

namespace {

struct Installed {
  int device = -1;
  const StreamGuard* guard = nullptr;
  ExternalStream external;
};

// Per thread, as the current stream of PyTorch and CuPy: a guard applies to the work its own
// thread queues, and threads never see each other's entries (no lock).
std::vector<Installed>& InstalledStreams() {
  thread_local std::vector<Installed> installed;
  return installed;
}

}  // namespace

bool FindExternalStream(int device, ExternalStream& found) noexcept {
  const std::vector<Installed>& installed = InstalledStreams();
  const auto innermost = std::find_if(installed.rbegin(), installed.rend(),
                                      [device](const Installed& entry) { return entry.device == device; });
  if (innermost == installed.rend()) {
    return false;
  }
  found = innermost->external;
  return true;
}

bool WaitForExternal(int device, cudaStream_t library) {
  ExternalStream external;
  if (!FindExternalStream(device, external)) {
    return false;
  }
  Driver& driver = ActiveDriver();
  MLFW_CUDA_CHECK(driver.EventRecord(external.ready, external.stream));
  MLFW_CUDA_CHECK(driver.StreamWaitEvent(library, external.ready));
  return true;
}

ExternalOrder::ExternalOrder(int device, cudaStream_t library) : library_(library) {
  joined_ = FindExternalStream(device, external_);
  if (joined_) {
    Driver& driver = ActiveDriver();
    MLFW_CUDA_CHECK(driver.EventRecord(external_.ready, external_.stream));
    MLFW_CUDA_CHECK(driver.StreamWaitEvent(library_, external_.ready));
  }
}

ExternalOrder::~ExternalOrder() {
  if (joined_) {
    // Also after a failed call: whatever it queued before failing is ordered like the rest.
    Driver& driver = ActiveDriver();
    MLFW_CUDA_CHECK_NOTHROW(driver.EventRecord(external_.done, library_));
    MLFW_CUDA_CHECK_NOTHROW(driver.StreamWaitEvent(external_.stream, external_.done));
  }
}

StreamGuard::StreamGuard(void* stream, int device) : stream_(stream), device_(device) {
  if (device < 0) {
    throw ArgumentError("device", std::to_string(device) + " is negative");
  }
  DeviceContext::Get(device);  // BackendError naming the device when it cannot be used
  DeviceGuard current(device);
  Driver& driver = ActiveDriver();
  auto* handle = static_cast<cudaStream_t>(stream);
  if (handle != nullptr) {
    int owner = -1;
    MLFW_CUDA_CHECK(driver.StreamGetDevice(handle, &owner));
    if (owner != device) {
      throw ArgumentError("stream",
                          "belongs to cuda:" + std::to_string(owner) + ", not to cuda:" + std::to_string(device));
    }
  }
  Installed entry{device, this, {handle, nullptr, nullptr}};
  MLFW_CUDA_CHECK(driver.EventCreate(&entry.external.ready));
  try {
    MLFW_CUDA_CHECK(driver.EventCreate(&entry.external.done));
    InstalledStreams().push_back(entry);
  } catch (...) {
    MLFW_CUDA_CHECK_NOTHROW(driver.EventDestroy(entry.external.ready));
    if (entry.external.done != nullptr) {
      MLFW_CUDA_CHECK_NOTHROW(driver.EventDestroy(entry.external.done));
    }
    throw;
  }
  ready_ = entry.external.ready;
  done_ = entry.external.done;
}

StreamGuard::~StreamGuard() {
  std::vector<Installed>& installed = InstalledStreams();
  std::erase_if(installed, [this](const Installed& entry) { return entry.guard == this; });
  // An event may still be pending on a stream: the runtime frees it once it has completed.
  Driver& driver = ActiveDriver();
  MLFW_CUDA_CHECK_NOTHROW(driver.EventDestroy(static_cast<cudaEvent_t>(ready_)));
  MLFW_CUDA_CHECK_NOTHROW(driver.EventDestroy(static_cast<cudaEvent_t>(done_)));
}

void* CurrentExternalStream(int device) noexcept {
  ExternalStream external;
  return FindExternalStream(device, external) ? external.stream : nullptr;
}

}  // namespace mlframework::backends::cuda
