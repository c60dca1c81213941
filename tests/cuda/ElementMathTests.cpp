// The element math of the CUDA kernels (ElementOps.hpp, built on FloatBits.hpp and
// Float8Bits.hpp) run on the host against the CPU backend, for every FP16, BF16 and FP8 value
// and a spread of FP32 values: the bits the kernels write are the bits the CPU writes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/backends/cuda/ElementOps.hpp"

using namespace mlframework;
namespace cu = mlframework::backends::cuda;

namespace {

constexpr float kFactors[] = {1.0f, 0.5f, 2.0f, 1.0f / 65536.0f, 65536.0f, 3.0f, 1.0f / 3.0f, 1e-3f, -7.5f};

// A CPU tensor holding exactly these stored elements.
template <DataType D>
TensorPtr CpuTensorOf(const std::vector<cu::StoredType<D>>& stored) {
  TensorPtr tensor = backends::cpu::Empty({stored.size()}, D);
  std::memcpy(backends::cpu::MutableData(*tensor), stored.data(), stored.size() * sizeof(stored[0]));
  return tensor;
}

template <DataType D>
std::vector<cu::StoredType<D>> StoredOf(const ITensor& tensor) {
  std::vector<cu::StoredType<D>> stored(tensor.Size());
  std::memcpy(stored.data(), backends::cpu::Data(tensor), stored.size() * sizeof(stored[0]));
  return stored;
}

std::vector<std::uint16_t> All16BitPatterns() {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    all[i] = static_cast<std::uint16_t>(i);
  }
  return all;
}

std::vector<float> SpreadOfFloats() {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               65504.0f,
                               65520.0f,
                               65519.99f,
                               6.1e-5f,
                               5.96e-8f,
                               2.98e-8f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               3.3895314e38f,
                               1.0039062f,
                               1.0019531f};
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    const std::uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, sizeof f);
    values.push_back(f);
  }
  return values;
}

std::vector<std::uint8_t> All8BitPatterns() {
  std::vector<std::uint8_t> all(256);
  for (std::uint32_t i = 0; i < 256; ++i) {
    all[i] = static_cast<std::uint8_t>(i);
  }
  return all;
}

template <DataType S>
std::vector<cu::StoredType<S>> Sources() {
  if constexpr (S == DataType::Float32) {
    return SpreadOfFloats();
  } else if constexpr (IsFloat8(S)) {
    return All8BitPatterns();
  } else {
    return All16BitPatterns();
  }
}

// Every S -> T conversion with every factor: ScaleConvert (what the kernels run) equals the CPU backend's CastInto.
template <DataType S, DataType T>
void CheckScaleConvert() {
  const auto sources = Sources<S>();
  const TensorPtr src = CpuTensorOf<S>(sources);
  for (const float factor : kFactors) {
    const TensorPtr dst = backends::cpu::Empty({sources.size()}, T);
    const bool cpu_found = CastInto(std::vector<TensorPtr>{src}, std::vector<TensorPtr>{dst}, factor);
    const auto cpu = StoredOf<T>(*dst);
    bool found = false;
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const cu::StoredType<T> out = cu::ScaleConvert<S, T>(sources[i], factor);
      found = found || !cu::IsFiniteStored<T>(out);
      // Bit-exact comparison is the point (NaN payloads, signed zeros).
      if (std::memcmp(&out, &cpu[i], sizeof out) != 0) {  // NOLINT(bugprone-suspicious-memory-comparison)
        ++mismatches;
      }
    }
    BOOST_TEST_INFO(std::string(ToString(S)) + " -> " + std::string(ToString(T)) + " factor " + std::to_string(factor));
    BOOST_TEST(mismatches == 0u);
    BOOST_TEST(found == cpu_found);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaElementMath)

BOOST_AUTO_TEST_CASE(ScaleConvertMatchesCpuBackendBitForBit) {
  CheckScaleConvert<DataType::Float16, DataType::Float16>();
  CheckScaleConvert<DataType::Float16, DataType::Float32>();
  CheckScaleConvert<DataType::Float16, DataType::BFloat16>();
  CheckScaleConvert<DataType::BFloat16, DataType::BFloat16>();
  CheckScaleConvert<DataType::BFloat16, DataType::Float32>();
  CheckScaleConvert<DataType::BFloat16, DataType::Float16>();
  CheckScaleConvert<DataType::Float32, DataType::Float32>();
  CheckScaleConvert<DataType::Float32, DataType::Float16>();
  CheckScaleConvert<DataType::Float32, DataType::BFloat16>();
}

BOOST_AUTO_TEST_CASE(Float8ScaleConvertMatchesCpuBackendBitForBit) {
  constexpr DataType kE4M3 = DataType::Float8E4M3FN;
  constexpr DataType kE5M2 = DataType::Float8E5M2;
  CheckScaleConvert<DataType::Float32, kE4M3>();
  CheckScaleConvert<DataType::Float32, kE5M2>();
  CheckScaleConvert<DataType::Float16, kE4M3>();
  CheckScaleConvert<DataType::Float16, kE5M2>();
  CheckScaleConvert<DataType::BFloat16, kE4M3>();
  CheckScaleConvert<DataType::BFloat16, kE5M2>();
  CheckScaleConvert<kE4M3, DataType::Float32>();
  CheckScaleConvert<kE4M3, DataType::Float16>();
  CheckScaleConvert<kE4M3, DataType::BFloat16>();
  CheckScaleConvert<kE4M3, kE4M3>();
  CheckScaleConvert<kE4M3, kE5M2>();
  CheckScaleConvert<kE5M2, DataType::Float32>();
  CheckScaleConvert<kE5M2, DataType::Float16>();
  CheckScaleConvert<kE5M2, DataType::BFloat16>();
  CheckScaleConvert<kE5M2, kE5M2>();
  CheckScaleConvert<kE5M2, kE4M3>();
}

BOOST_AUTO_TEST_CASE(Float8FiniteTestAndRoundTripOnEveryCode) {
  for (const std::uint8_t bits : All8BitPatterns()) {
    const float e4m3 = cu::ToFloat<DataType::Float8E4M3FN>(bits);
    const float e5m2 = cu::ToFloat<DataType::Float8E5M2>(bits);
    BOOST_TEST(cu::IsFiniteStored<DataType::Float8E4M3FN>(bits) == !std::isnan(e4m3));
    BOOST_TEST(cu::IsFiniteStored<DataType::Float8E5M2>(bits) == std::isfinite(e5m2));
    if (!std::isnan(e4m3)) {
      BOOST_TEST(unsigned{cu::FromFloat<DataType::Float8E4M3FN>(e4m3)} == unsigned{bits});
    }
    if (!std::isnan(e5m2)) {
      BOOST_TEST(unsigned{cu::FromFloat<DataType::Float8E5M2>(e5m2)} == unsigned{bits});
    }
  }
  static_assert(sizeof(cu::StoredType<DataType::Float8E4M3FN>) == 1);
  static_assert(sizeof(cu::StoredType<DataType::Float8E5M2>) == 1);
}

BOOST_AUTO_TEST_CASE(FiniteTestOnStoredBitsMatchesWidenedValue) {
  for (const std::uint16_t bits : All16BitPatterns()) {
    BOOST_TEST(cu::IsFiniteStored<DataType::Float16>(bits) == std::isfinite(cu::ToFloat<DataType::Float16>(bits)));
    BOOST_TEST(cu::IsFiniteStored<DataType::BFloat16>(bits) == std::isfinite(cu::ToFloat<DataType::BFloat16>(bits)));
  }
  for (const float value : SpreadOfFloats()) {
    BOOST_TEST(cu::IsFiniteStored<DataType::Float32>(value) == std::isfinite(value));
  }
}

// The NaN test and sign bit read from the stored bits agree with the host's exact widening on
// every code (the device's FP16 widening drops a NaN's sign, so the FP8 cast reads it from the bits).
BOOST_AUTO_TEST_CASE(NaNAndSignOnStoredBitsMatchTheWidenedValue) {
  for (const std::uint16_t bits : All16BitPatterns()) {
    const float half = cu::ToFloat<DataType::Float16>(bits);
    const float bf16 = cu::ToFloat<DataType::BFloat16>(bits);
    BOOST_TEST(cu::IsNaNStored<DataType::Float16>(bits) == std::isnan(half));
    BOOST_TEST(cu::IsNaNStored<DataType::BFloat16>(bits) == std::isnan(bf16));
    BOOST_TEST(cu::SignBitStored<DataType::Float16>(bits) == std::signbit(half));
    BOOST_TEST(cu::SignBitStored<DataType::BFloat16>(bits) == std::signbit(bf16));
  }
  for (const std::uint8_t bits : All8BitPatterns()) {
    const float e4m3 = cu::ToFloat<DataType::Float8E4M3FN>(bits);
    const float e5m2 = cu::ToFloat<DataType::Float8E5M2>(bits);
    BOOST_TEST(cu::IsNaNStored<DataType::Float8E4M3FN>(bits) == std::isnan(e4m3));
    BOOST_TEST(cu::IsNaNStored<DataType::Float8E5M2>(bits) == std::isnan(e5m2));
    BOOST_TEST(cu::SignBitStored<DataType::Float8E4M3FN>(bits) == std::signbit(e4m3));
    BOOST_TEST(cu::SignBitStored<DataType::Float8E5M2>(bits) == std::signbit(e5m2));
  }
  for (const float value : SpreadOfFloats()) {
    BOOST_TEST(cu::IsNaNStored<DataType::Float32>(value) == std::isnan(value));
    BOOST_TEST(cu::SignBitStored<DataType::Float32>(value) == std::signbit(value));
  }
}

BOOST_AUTO_TEST_CASE(WideningAndNarrowingRoundTripEvery16BitValue) {
  for (const std::uint16_t bits : All16BitPatterns()) {
    const float half = cu::ToFloat<DataType::Float16>(bits);
    const float bf16 = cu::ToFloat<DataType::BFloat16>(bits);
    if (!std::isnan(half)) {
      BOOST_TEST(cu::FromFloat<DataType::Float16>(half) == bits);
    }
    if (!std::isnan(bf16)) {
      BOOST_TEST(cu::FromFloat<DataType::BFloat16>(bf16) == bits);
    }
  }
}

BOOST_AUTO_TEST_CASE(InverseScaleIsExactForPowersOfTwoAndMatchesDivide) {
  for (int e = -24; e <= 24; ++e) {
    const float scale = std::ldexp(1.0f, e);
    BOOST_TEST(InverseScale(scale) * scale == 1.0f);
  }
  // The per-tensor Divide of the CPU backend uses the same inverse, so a fused unscale equals it.
  const TensorPtr x = FromVector({3.0f, -5.0f, 1e-3f, 7.25f}, {4}, DataType::Float16);
  for (const float scale : {3.0f, 1000.0f, 65536.0f}) {
    const TensorPtr divided = x->Divide(scale);
    const TensorPtr fused = x->Clone();
    UnscaleAndCheck(std::vector<TensorPtr>{fused}, InverseScale(scale));
    BOOST_TEST(divided->ToFloatVector() == fused->ToFloatVector(), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
