#pragma once
// Shared by the device suites of test_cuda_device.

#include <cstdint>
#include <cstring>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlfw_cuda_test {

inline constexpr mlframework::DataType kDtypes[] = {mlframework::DataType::Float32, mlframework::DataType::Float16,
                                                    mlframework::DataType::BFloat16};
inline const mlframework::Device kGpu = mlframework::Device::CUDA(0);

// Bits of the widened values: widening is injective, so equal bits mean equal stored elements.
// Every NaN is written as one quiet NaN: payloads are the hardware's, not the library's contract
// (x86 keeps an operand's payload through a multiply, NVIDIA GPUs write 0x7FFFFFFF).
inline std::vector<std::uint32_t> Bits(const mlframework::ITensor& tensor) {
  constexpr std::uint32_t kQuietNaN = 0x7FC00000u;
  const std::vector<float> values = tensor.ToFloatVector();
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] != values[i]) {
      bits[i] = kQuietNaN;
    }
  }
  return bits;
}

// The raw widened bits, NaN sign and payload included: FP8 tensors are widened on the host,
// so equal bits mean equal bytes.
inline std::vector<std::uint32_t> RawBits(const mlframework::ITensor& tensor) {
  const std::vector<float> values = tensor.ToFloatVector();
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

}  // namespace mlfw_cuda_test
