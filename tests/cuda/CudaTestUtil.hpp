#pragma once
// Shared by the device suites of test_cuda_device.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>

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

// The portable kernels round each multiply-add twice (torch's default capability) and the AVX-512
// ones take MKL's square root (torch's); the device kernels round as the AVX2 ones, so a bit-for-bit
// comparison of a step needs the host on those (CMake and scripts/gpu-check.sh set MLFW_CPU_ISA=avx2).
inline bool HostRoundsAsTheDevice() {
  if (mlframework::backends::cpu::InstructionSet() == "avx2") {
    return true;
  }
  BOOST_TEST_MESSAGE("SKIPPED: the host runs the " << mlframework::backends::cpu::InstructionSet()
                                                   << " kernels; run with MLFW_CPU_ISA=avx2");
  return false;
}

// Whether this host's CPU kernels fuse multiply-adds as the device kernels do: every vector
// table does; the portable one rounds each multiply-add twice.
inline bool HostFusesAsTheDevice() {
  if (mlframework::backends::cpu::InstructionSet() != "portable") {
    return true;
  }
  BOOST_TEST_MESSAGE("SKIPPED: the portable kernels round each multiply-add twice");
  return false;
}

// Whether this host's CPU Adam step with these formats rounds as the device's: on every vector
// table when a moment is stored below FP32 or the masters are rounded stochastically (such steps
// take the IEEE root everywhere, as the device does), else on the AVX2 table only (the AVX-512
// ones take MKL's root there, as torch does).
inline bool HostAdamRoundsAsTheDevice(mlframework::StateFormat first, mlframework::StateFormat second,
                                      mlframework::MasterFormat masters) {
  const bool torch_root = first == mlframework::StateFormat::Float32 && second == mlframework::StateFormat::Float32 &&
                          masters != mlframework::MasterFormat::BFloat16StochasticRounding;
  const std::string_view isa = mlframework::backends::cpu::InstructionSet();
  return isa != "portable" && (!torch_root || isa == "avx2");
}

// The state formats of each moment and the master formats of the fused steps.
inline constexpr mlframework::StateFormat kFirstStateFormats[] = {
    mlframework::StateFormat::Float32, mlframework::StateFormat::BFloat16, mlframework::StateFormat::Float16,
    mlframework::StateFormat::Int8Block, mlframework::StateFormat::Float8E4M3Block};
inline constexpr mlframework::StateFormat kSecondStateFormats[] = {
    mlframework::StateFormat::Float32, mlframework::StateFormat::BFloat16, mlframework::StateFormat::Float16,
    mlframework::StateFormat::UInt8Block, mlframework::StateFormat::Float8E4M3Block};
// The block-scaled formats of each moment (the NaN and infinity blocks' tests).
inline constexpr mlframework::StateFormat kBlockScaledFirstFormats[] = {
    mlframework::StateFormat::Float16, mlframework::StateFormat::Int8Block, mlframework::StateFormat::Float8E4M3Block};
inline constexpr mlframework::StateFormat kBlockScaledSecondFormats[] = {
    mlframework::StateFormat::Float16, mlframework::StateFormat::UInt8Block, mlframework::StateFormat::Float8E4M3Block};

// Element @p i of the NaN and infinity blocks' gradients: every 71st element from the 13th is a
// NaN of either sign or with a payload, or an infinity; the others @p finite.
inline float WithNonFinite(std::size_t i, float finite) {
  constexpr std::uint32_t kSpecials[] = {0xffc00000u, 0x7fc12345u, 0xffd00001u, 0x7f800000u, 0xff800000u};
  if (i % 71 != 13) {
    return finite;
  }
  const std::uint32_t bits = kSpecials[(i / 71) % std::size(kSpecials)];
  float value = 0.0f;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline constexpr mlframework::MasterFormat kMasterFormats[] = {mlframework::MasterFormat::Float32,
                                                               mlframework::MasterFormat::BFloat16StochasticRounding,
                                                               mlframework::MasterFormat::BFloat16Remainder};

// The raw widened bits, NaN sign and payload included: FP8 tensors are widened on the host,
// so equal bits mean equal bytes.
inline std::vector<std::uint32_t> RawBits(const mlframework::ITensor& tensor) {
  const std::vector<float> values = tensor.ToFloatVector();
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

}  // namespace mlfw_cuda_test
