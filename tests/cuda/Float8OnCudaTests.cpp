// FP8 tensors on the CUDA backend against the CPU backend, bit for bit: every code decoded,
// a spread of FP32 values (ties, overflow, specials, random bits) encoded, every cast pair with
// FP8 on one side, the per-tensor operations and the fused list operations. Needs a CUDA device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using mlfw_cuda_test::Bits;
using mlfw_cuda_test::kGpu;

namespace {

constexpr DataType kFp8[] = {DataType::Float8E4M3FN, DataType::Float8E5M2};
constexpr DataType kAll[] = {DataType::Float32, DataType::Float16, DataType::BFloat16, DataType::Float8E4M3FN,
                             DataType::Float8E5M2};

std::vector<float> SpreadOfFloats() {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               448.0f,
                               464.0f,
                               465.0f,
                               480.0f,
                               57344.0f,
                               61440.0f,
                               61441.0f,
                               65536.0f,
                               1e-3f,
                               1e-6f,
                               std::ldexp(1.0f, -10),
                               std::ldexp(1.0f, -17),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(8);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<std::uint32_t> exponent(127 - 20, 127 + 18);
  for (int i = 0; i < 50000; ++i) {
    std::uint32_t b = bits(rng);
    if (i % 2 == 0) {
      b = (b & 0x807fffffu) | (exponent(rng) << 23);  // the FP8 ranges
    }
    float f;
    std::memcpy(&f, &b, sizeof f);
    values.push_back(f);
  }
  return values;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8OnCuda)

BOOST_AUTO_TEST_CASE(EveryCodeDecodesAsOnTheCpu) {
  for (const DataType dtype : kFp8) {
    const TensorPtr cpu = Zeros({256}, dtype);
    auto bytes = cpu->MutableHostBytes();
    for (unsigned c = 0; c < 256; ++c) {
      bytes[c] = static_cast<std::byte>(c);
    }
    // Upload the codes through an FP32 round trip (exact for every non-NaN code).
    const TensorPtr gpu = FromVector(cpu->ToFloatVector(), {256}, dtype, kGpu);
    for (const DataType wide : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
      BOOST_TEST(Bits(*gpu->CastTo(wide)) == Bits(*cpu->CastTo(wide)), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(EncodingMatchesTheCpu) {
  const std::vector<float> values = SpreadOfFloats();
  for (const DataType from : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const TensorPtr cpu = FromVector(values, {values.size()}, from);
    const TensorPtr gpu = FromVector(values, {values.size()}, from, kGpu);
    for (const DataType to : kFp8) {
      for (const float factor : {1.0f, 0.5f, 3.0f, 1.0f / 1024.0f}) {
        const std::vector<TensorPtr> cpu_out{Zeros({values.size()}, to)};
        const std::vector<TensorPtr> gpu_out{Zeros({values.size()}, to, kGpu)};
        const bool cpu_found = CastInto(std::vector<TensorPtr>{cpu}, cpu_out, factor);
        const bool gpu_found = CastInto(std::vector<TensorPtr>{gpu}, gpu_out, factor);
        BOOST_TEST_INFO(std::string(ToString(from)) + " -> " + std::string(ToString(to)));
        BOOST_TEST(gpu_found == cpu_found);
        // FP8 decoding is injective but for NaNs, which Bits() writes as one NaN.
        BOOST_TEST(Bits(*gpu_out[0]) == Bits(*cpu_out[0]), boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(OperationsAndListsMatchTheCpu) {
  std::vector<TensorPtr> cpu;
  std::vector<TensorPtr> gpu;
  const std::vector<float> values = {1.0f, -2.0f, 0.375f, 100.0f, -0.01f, 3.0f, 7.0f};
  for (const DataType dtype : kAll) {
    cpu.push_back(FromVector(values, {values.size()}, dtype));
    gpu.push_back(FromVector(values, {values.size()}, dtype, kGpu));
  }
  BOOST_TEST(HasNonFinite(gpu) == HasNonFinite(cpu));
  BOOST_TEST(SumOfSquares(gpu) == SumOfSquares(cpu), boost::test_tools::tolerance(1e-6));
  ScaleInPlace(gpu, 3.0f);
  ScaleInPlace(cpu, 3.0f);
  BOOST_TEST(UnscaleAndCheck(gpu, 1e3f) == UnscaleAndCheck(cpu, 1e3f));
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    BOOST_TEST(Bits(*gpu[i]) == Bits(*cpu[i]), boost::test_tools::per_element());
    BOOST_TEST(Bits(*gpu[i]->Multiply(0.25f)) == Bits(*cpu[i]->Multiply(0.25f)), boost::test_tools::per_element());
  }
  for (const DataType dtype : kFp8) {
    const std::vector<TensorPtr> gpu_cast = Cast(gpu, dtype, 0.5f);
    const std::vector<TensorPtr> cpu_cast = Cast(cpu, dtype, 0.5f);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      BOOST_TEST((gpu_cast[i]->GetDevice() == kGpu));
      BOOST_TEST(Bits(*gpu_cast[i]) == Bits(*cpu_cast[i]), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
