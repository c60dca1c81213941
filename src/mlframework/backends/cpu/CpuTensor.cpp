#include "mlframework/backends/cpu/CpuTensorImpl.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cpu/ListKey.hpp"
#include "mlframework/backends/cpu/MultiTensorKernels.hpp"
#include "mlframework/core/BackendTensor.hpp"
#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::backends::cpu {

// size_ is declared before shape_ (see CpuTensorImpl.hpp), so it counts the parameter.
CpuTensor::CpuTensor(Shape shape, DataType dtype)
    : size_(ElementCount(shape)), dtype_(dtype), shape_(std::move(shape)) {
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
  // Past PTRDIFF_MAX bytes the allocator throws std::bad_array_new_length, which
  // is not one of our types and does not say which argument was wrong.
  if (size_ > static_cast<std::size_t>(PTRDIFF_MAX) / ElementSize(dtype_)) {
    throw ArgumentError("shape", ToString(shape_) + " of " + std::string(ToString(dtype_)) +
                                     " needs more bytes than the address space holds");
  }
  if (dtype_ == DataType::Float32) {
    f32_ = Storage<float>({size_}, 0.0f);
    data_ = f32_.data();
  } else if (IsFloat8(dtype_)) {
    u8_ = Storage<std::uint8_t>({size_}, std::uint8_t{0});
    data_ = u8_.data();
  } else {
    u16_ = Storage<std::uint16_t>({size_}, std::uint16_t{0});
    data_ = u16_.data();
  }
}

namespace {

std::atomic<std::uint64_t> g_kept_generation{0};

}  // namespace

std::uint64_t KeptGeneration() noexcept { return g_kept_generation.load(std::memory_order_acquire); }

// The last reference's release synchronises with this destructor, so a MarkKept() of any thread
// is seen here.
CpuTensor::~CpuTensor() {
  if (kept_.load(std::memory_order_relaxed)) {
    g_kept_generation.fetch_add(1, std::memory_order_acq_rel);
  }
}

CpuTensor::CpuTensor(Shape shape, DataType dtype, std::shared_ptr<void> owner, void* data)
    : data_(data), size_(ElementCount(shape)), dtype_(dtype), shape_(std::move(shape)), owner_(std::move(owner)) {}

std::vector<float> CpuTensor::ToFloatVector() const {
  std::vector<float> values(size_);
  WidenToFloat(Data(), dtype_, values.data(), size_);
  return values;
}

void CpuTensor::CopyFromFloats(std::span<const float> values) {
  if (values.size() != size_) {
    throw ArgumentError("values", "has " + std::to_string(values.size()) + " elements, tensor " + ToString(shape_) +
                                      " has " + std::to_string(size_));
  }
  NarrowFromFloat(values.data(), Data(), dtype_, size_);
}

const TensorBackend* CpuTensor::Backend() const noexcept { return &cpu::Backend(); }

TensorPtr Empty(Shape shape, DataType dtype) { return std::make_shared<CpuTensor>(std::move(shape), dtype); }

TensorPtr Wrap(void* data, Shape shape, DataType dtype, std::shared_ptr<void> owner) {
  mlframework::detail::CheckWrapArguments(data, shape, dtype);
  return std::make_shared<CpuTensor>(std::move(shape), dtype, std::move(owner), data);
}

namespace {

// Core reaches CPU memory it did not allocate (DLPack) through these hooks.
TensorPtr WrapHook(void* data, const Shape& shape, DataType dtype, Device /*device*/, std::shared_ptr<void> owner) {
  return Wrap(data, shape, dtype, std::move(owner));
}

void* DataPointerHook(const ITensor& tensor) {
  const auto* cpu_tensor = dynamic_cast<const CpuTensor*>(&tensor);
  return cpu_tensor != nullptr ? const_cast<void*>(cpu_tensor->Data()) : nullptr;
}

TensorPtr MakeHook(const Shape& shape, DataType dtype, Device /*device*/) { return Empty(shape, dtype); }

const mlframework::detail::DeviceTensorHooks kHooks{
    .Make = &MakeHook, .Wrap = &WrapHook, .DataPointer = &DataPointerHook, .Backend = &cpu::Backend};

[[maybe_unused]] const bool kRegistered = [] {
  mlframework::detail::RegisterDeviceTensorHooks(DeviceType::CPU, &kHooks);
  return true;
}();

}  // namespace

TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) {
  if (!base) {
    throw ArgumentNullError("base");
  }
  void* data = MutableData(*base);
  const std::size_t count = ElementCount(shape);
  if (offset > base->Size() || count > base->Size() - offset) {
    throw ArgumentError("shape", "view of " + std::to_string(count) + " elements at offset " + std::to_string(offset) +
                                     " does not fit in a tensor of " + std::to_string(base->Size()) + " elements");
  }
  auto* first = static_cast<std::byte*>(data) + offset * ElementSize(base->GetDataType());
  return std::make_shared<CpuTensor>(shape, base->GetDataType(), base, first);
}

namespace {

// An on/off switch from the environment: "1" or "0"; unset, empty or anything else (with a
// message) is @p fallback.
bool SwitchFromEnvironment(const char* name, bool fallback) noexcept {
  const char* requested = std::getenv(name);
  if (requested == nullptr || *requested == '\0') {
    return fallback;
  }
  const std::string_view value(requested);
  if (value == "1" || value == "0") {
    return value == "1";
  }
  std::fprintf(stderr, "mlframework: %s=%s is not 0 or 1; ignored\n", name, requested);
  return fallback;
}

}  // namespace

bool SmallTensorPool() noexcept {
  static const bool kOn = SwitchFromEnvironment("MLFW_CPU_SMALL_POOL", true);
  return kOn;
}

bool HugePages() noexcept {
  static const bool kOn = SwitchFromEnvironment("MLFW_CPU_HUGE_PAGES", false);
  return kOn;
}

bool IsCpuTensor(const ITensor& tensor) noexcept { return dynamic_cast<const CpuTensor*>(&tensor) != nullptr; }

void* MutableData(ITensor& tensor) { return mlframework::detail::BackendTensor<CpuTensor>(tensor, "CPU").Data(); }

const void* Data(const ITensor& tensor) {
  return mlframework::detail::BackendTensor<const CpuTensor>(tensor, "CPU").Data();
}

}  // namespace mlframework::backends::cpu
