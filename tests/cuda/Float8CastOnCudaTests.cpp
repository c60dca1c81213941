// The fused FP8 kernels of core/Float8Cast.hpp on the CUDA backend against the CPU backend, bit
// for bit: the scaled saturating cast with the input's amax (cuda_fp8.h's __NV_SATFINITE
// conversion, NaN keeping its sign), dequantization into every wide dtype, the per-tensor and
// whole-list amax, over lists with empty tensors (launched in runs), and the device checks.
// Needs a CUDA device (the executable skips without one).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using mlfw_cuda_test::kGpu;
using mlfw_cuda_test::RawBits;

namespace {

std::vector<float> HardValues(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<std::uint32_t> exponent(127 - 22, 127 + 18);
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       448.0f,
                                       464.0f,
                                       480.0f,
                                       57344.0f,
                                       61440.0f,
                                       65536.0f,
                                       1e-30f,
                                       -1e-6f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity()};
  std::vector<float> values;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b = bits(rng);
    if (i % 3 != 0) {
      b = (b & 0x807fffffu) | (exponent(rng) << 23);
    }
    float f;
    std::memcpy(&f, &b, sizeof f);
    values.push_back(i % 97 == 5 ? specials[i % specials.size()] : f);
  }
  return values;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8CastOnCuda)

BOOST_AUTO_TEST_CASE(ScaledCastAndAmaxMatchTheCpuBitForBit) {
  const std::vector<std::size_t> sizes = {1000, 0, 7, 70000, 0, 0, 33, 1u << 20, 5};
  const DataType sources[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};
  std::vector<TensorPtr> cpu_src;
  std::vector<TensorPtr> gpu_src;
  std::vector<TensorPtr> cpu_dst;
  std::vector<TensorPtr> gpu_dst;
  std::vector<float> scales;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    std::vector<float> values = HardValues(sizes[t], static_cast<std::uint32_t>(t));
    if (t == 3) {
      values[123] = -std::numeric_limits<float>::quiet_NaN();  // a NaN: amax NaN, -NaN written
    }
    const DataType sd = sources[t % 3];
    const DataType fmt = (t % 2) == 0 ? DataType::Float8E4M3FN : DataType::Float8E5M2;
    cpu_src.push_back(FromVector(values, {values.size()}, sd));
    gpu_src.push_back(FromVector(values, {values.size()}, sd, kGpu));
    cpu_dst.push_back(Zeros({values.size()}, fmt));
    gpu_dst.push_back(Zeros({values.size()}, fmt, kGpu));
    scales.push_back(t % 2 == 0 ? 3.7f : 1.0f / 1024.0f);
  }
  const TensorPtr cpu_amax = Zeros({sizes.size()});
  const TensorPtr gpu_amax =
      FromVector(std::vector<float>(sizes.size(), 5.0f), {sizes.size()}, DataType::Float32, kGpu);
  ScaledCastToFloat8(cpu_src, cpu_dst, FromVector(scales, {scales.size()}), cpu_amax);
  ScaledCastToFloat8(gpu_src, gpu_dst, FromVector(scales, {scales.size()}, DataType::Float32, kGpu), gpu_amax);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    BOOST_TEST_INFO("tensor " << t);
    BOOST_TEST(RawBits(*gpu_dst[t]) == RawBits(*cpu_dst[t]), boost::test_tools::per_element());
  }
  BOOST_TEST(mlfw_cuda_test::Bits(*gpu_amax) == mlfw_cuda_test::Bits(*cpu_amax), boost::test_tools::per_element());
  BOOST_TEST(std::isnan(gpu_amax->ToFloatVector()[3]));
  BOOST_TEST(gpu_amax->ToFloatVector()[1] == 0.0f);  // empty: 0, not what the tensor held
}

BOOST_AUTO_TEST_CASE(DequantizeMatchesTheCpuBitForBit) {
  std::vector<TensorPtr> cpu_src;
  std::vector<TensorPtr> gpu_src;
  std::vector<TensorPtr> cpu_dst;
  std::vector<TensorPtr> gpu_dst;
  std::vector<float> scale_inv;
  std::vector<float> codes(4096 + 17);
  for (const DataType fmt : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
    const TensorPtr all = Zeros({codes.size()}, fmt);
    auto* bytes = reinterpret_cast<std::uint8_t*>(all->MutableHostBytes().data());
    for (std::size_t i = 0; i < codes.size(); ++i) {
      bytes[i] = static_cast<std::uint8_t>(i);
    }
    const std::vector<float> decoded = all->ToFloatVector();
    for (const DataType wide : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
      cpu_src.push_back(all);
      gpu_src.push_back(FromVector(decoded, {decoded.size()}, fmt, kGpu));
      cpu_dst.push_back(Zeros({decoded.size()}, wide));
      gpu_dst.push_back(Zeros({decoded.size()}, wide, kGpu));
      scale_inv.push_back(wide == DataType::Float32 ? 1.0f / 3.7f : 1e-3f);
    }
  }
  DequantizeFloat8(cpu_src, cpu_dst, FromVector(scale_inv, {scale_inv.size()}));
  DequantizeFloat8(gpu_src, gpu_dst, FromVector(scale_inv, {scale_inv.size()}, DataType::Float32, kGpu));
  for (std::size_t t = 0; t < cpu_dst.size(); ++t) {
    BOOST_TEST_INFO("tensor " << t);
    BOOST_TEST(mlfw_cuda_test::Bits(*gpu_dst[t]) == mlfw_cuda_test::Bits(*cpu_dst[t]),
               boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(AmaxPerTensorAndOverTheList) {
  std::vector<TensorPtr> cpu;
  std::vector<TensorPtr> gpu;
  const DataType dtypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16, DataType::Float8E4M3FN,
                             DataType::Float8E5M2};
  for (std::size_t t = 0; t < 12; ++t) {
    std::vector<float> values = HardValues(t == 4 ? 300000 : 100 * t, 100 + static_cast<std::uint32_t>(t));
    for (float& v : values) {
      v = std::isfinite(v) ? std::fmod(v, 40000.0f) : 1.0f;
    }
    cpu.push_back(FromVector(values, {values.size()}, dtypes[t % 5]));
    gpu.push_back(FromVector(values, {values.size()}, dtypes[t % 5], kGpu));
  }
  const TensorPtr cpu_amax = Zeros({cpu.size()});
  const TensorPtr gpu_amax = Zeros({gpu.size()}, DataType::Float32, kGpu);
  Amax(cpu, cpu_amax);
  Amax(gpu, gpu_amax);
  BOOST_TEST(mlfw_cuda_test::Bits(*gpu_amax) == mlfw_cuda_test::Bits(*cpu_amax), boost::test_tools::per_element());
  BOOST_TEST(ListAmax(gpu) == ListAmax(cpu));
}

BOOST_AUTO_TEST_CASE(EveryTensorOfACallOnOneDevice) {
  const std::vector<TensorPtr> src = {FromVector({1.0f}, {1}, DataType::Float32, kGpu)};
  const std::vector<TensorPtr> dst = {Zeros({1}, DataType::Float8E4M3FN, kGpu)};
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, dst, FromVector({1.0f}, {1}), nullptr), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "src[0]"; });
  BOOST_CHECK_EXCEPTION(Amax(src, Zeros({1})), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensors[0]"; });
}

BOOST_AUTO_TEST_SUITE_END()
