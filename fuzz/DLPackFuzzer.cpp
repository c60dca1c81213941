// Fuzz target: FromDLPack on arbitrary DLPack descriptors.
//
// Properties: a descriptor is accepted or rejected with an mlframework::Error; a rejected one
// is left untouched (its deleter is not called); an accepted one gives a tensor with the
// descriptor's dtype and element count over the descriptor's memory, and the deleter runs
// exactly once, when the last tensor over it (a view included) is gone.
//
// Input: device type, device id, dtype code, bits, lanes, ndim, a flags byte (bit 0: null data,
// bit 1: data one byte off, bits 2-3: strides null / compact / one stride changed / all zero),
// byte_offset, then one byte per dimension (values >= 0xF0 become negative or huge).
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <dlpack/dlpack.h>

#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "FuzzSupport.hpp"

using namespace mlframework;
using mlframework::fuzz::PropertyFailed;

namespace {

constexpr std::size_t kBufferBytes = 4096;
int g_deleted = 0;

void CountDelete(DLManagedTensor* /*managed*/) { ++g_deleted; }

// A byte as two's complement: 0-127 stay, 128-255 become -128 to -1.
int Signed(std::uint8_t byte) { return byte < 128 ? byte : static_cast<int>(byte) - 256; }

std::int64_t Extent(std::uint8_t byte) {
  switch (byte) {
    case 0xF0:
      return -1;
    case 0xF1:
      return std::numeric_limits<std::int64_t>::min();
    case 0xF2:
      return std::numeric_limits<std::int64_t>::max();
    case 0xF3:
      return std::int64_t{1} << 40;
    default:
      return byte % 9;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlframework::fuzz::FuzzInput input(data, size);
  alignas(64) static std::array<std::byte, kBufferBytes + 8> buffer{};
  DLManagedTensor managed{};
  DLTensor& t = managed.dl_tensor;
  t.device.device_type = static_cast<DLDeviceType>(input.Byte() % 16);
  t.device.device_id = Signed(input.Byte());
  t.dtype.code = input.Byte() % 8;
  t.dtype.bits = input.Byte();
  t.dtype.lanes = input.Byte() % 3;
  t.ndim = Signed(input.Byte()) % 8;  // -7 to 7
  const std::uint8_t flags = input.Byte();
  t.byte_offset = input.Byte();
  std::vector<std::int64_t> shape(8);
  for (std::int64_t& extent : shape) {
    extent = Extent(input.Byte());
  }
  t.shape = shape.data();
  std::vector<std::int64_t> strides(8, 0);
  const int stride_mode = (flags >> 2) & 3;
  if (t.ndim > 0) {
    std::int64_t step = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      strides[static_cast<std::size_t>(i)] = step;
      const std::int64_t extent = shape[static_cast<std::size_t>(i)];
      if (extent > 0 && step <= std::numeric_limits<std::int64_t>::max() / extent) {
        step *= extent;
      }
    }
    if (stride_mode == 2) {
      strides[0] = strides[0] == std::numeric_limits<std::int64_t>::max() ? 0 : strides[0] + 1;
    } else if (stride_mode == 3) {
      strides.assign(8, 0);
    }
  }
  t.strides = stride_mode == 0 ? nullptr : strides.data();
  t.data = (flags & 1) != 0 ? nullptr : static_cast<void*>(buffer.data() + ((flags & 2) != 0 ? 1 : 0));
  managed.deleter = &CountDelete;
  g_deleted = 0;

  TensorPtr tensor;
  try {
    tensor = FromDLPack(&managed);
  } catch (const mlframework::Error&) {
    if (g_deleted != 0) {
      PropertyFailed("a rejected descriptor's deleter was called");
    }
    return 0;
  }
  if (g_deleted != 0) {
    PropertyFailed("the deleter ran while the tensor lives");
  }
  std::size_t count = 1;
  for (int i = 0; i < t.ndim; ++i) {
    count *= static_cast<std::size_t>(shape[static_cast<std::size_t>(i)]);
  }
  if (tensor->Size() != count || static_cast<int>(tensor->GetShape().size()) != t.ndim) {
    PropertyFailed("the tensor's shape differs from the descriptor's");
  }
  // Read the elements only when the descriptor's memory is the buffer (a descriptor may lie).
  const std::size_t bytes = count * ElementSize(tensor->GetDataType());
  if (tensor->GetDevice().IsCPU() && t.byte_offset + bytes + 1 <= kBufferBytes) {
    const TensorPtr list[] = {tensor};
    if (HasNonFinite(list)) {
      PropertyFailed("zero bytes read as non-finite");
    }
  }
  tensor.reset();
  if (g_deleted != 1) {
    PropertyFailed("the deleter did not run exactly once");
  }
  return 0;
}
