// The fused FP8 kernels of core/Float8Cast.hpp on the CPU backend against a scalar reference
// written here from the FP8 structs (core/Float8.hpp): the scaled saturating cast with the
// input's amax, dequantization and the per-tensor amax, bit for bit, on values that cover ties,
// FP8 and FP32 subnormals, overflow, infinities and NaNs, on odd sizes, chunk-crossing tensors
// and long lists, with one and two threads. This executable runs once per instruction set
// (MLFW_CPU_ISA), so every vector set of Float8Kernels.hpp is checked.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <omp.h>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float16.hpp>
#include <mlframework/core/Float8.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/Tensor.hpp>

#include "core/KernelReference.hpp"
#include "core/UserTensor.hpp"

using namespace mlframework;
using namespace kernel_test;
using mlframework::testing::Mode;
using mlframework::testing::UserTensor;

namespace {

// The reference of the saturating cast: the plain FP8 conversion of the FP32 product, with
// E5M2's infinities from a non-NaN product replaced by +-57344 (E4M3FN's plain cast saturates).
std::uint8_t RefSaturate(DataType dtype, float y) {
  if (dtype == DataType::Float8E4M3FN) {
    return Float8E4M3FN(y).bits;
  }
  const std::uint8_t plain = Float8E5M2(y).bits;
  if (!std::isnan(y) && (plain & 0x7fu) == 0x7cu) {
    return static_cast<std::uint8_t>((plain & 0x80u) | 0x7bu);
  }
  return plain;
}

// max |x| over a tensor with NaN propagating.
float RefTensorAmax(const TensorPtr& t) {
  const auto* base = static_cast<const unsigned char*>(backends::cpu::Data(*t));
  float amax = 0.0f;
  for (std::size_t i = 0; i < t->Size(); ++i) {
    const float a = std::fabs(RefLoad(t->GetDataType(), base, i));
    if (std::isnan(a)) {
      return a;
    }
    amax = a > amax ? a : amax;
  }
  return amax;
}

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || detail::FloatAsBits(a) == detail::FloatAsBits(b);
}

// FP32 values the encoder must get right: FP8 ties at every exponent of both formats (and one
// ulp either side), FP8 and FP32 subnormals, the overflow thresholds, specials, and random bits.
std::uint32_t HardBits(Rng& rng) {
  const std::uint32_t r = rng.Next32();
  const std::uint32_t sign = r & 0x80000000u;
  switch (rng.Between(0, 9)) {
    case 0: {  // an E4M3FN tie or a neighbour: 3 mantissa bits, then the half bit
      const std::uint32_t exponent = 117u + static_cast<std::uint32_t>(rng.Between(0, 20));
      const std::uint32_t mantissa = (r >> 8) & 0x7u;
      const auto nudge = static_cast<std::uint32_t>(rng.Between(0, 2));  // -1, 0, +1 ulp
      return sign | (((exponent << 23) | (mantissa << 20) | 0x80000u) + nudge - 1u);
    }
    case 1: {  // an E5M2 tie or a neighbour
      const std::uint32_t exponent = 100u + static_cast<std::uint32_t>(rng.Between(0, 45));
      const std::uint32_t mantissa = (r >> 8) & 0x3u;
      const auto nudge = static_cast<std::uint32_t>(rng.Between(0, 2));
      return sign | (((exponent << 23) | (mantissa << 21) | 0x100000u) + nudge - 1u);
    }
    case 2:  // FP32 subnormals and zeros
      return sign | (r & 0x007fffffu & (rng.Between(0, 1) != 0u ? 0xffffffffu : 0u));
    case 3: {  // around the overflow thresholds: 448, 464, 480, 57344, 61440, 65536
      const float anchors[] = {448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65536.0f};
      const std::uint32_t a = detail::FloatAsBits(anchors[rng.Between(0, 5)]);
      return sign | (a + static_cast<std::uint32_t>(rng.Between(0, 4)) - 2u);
    }
    case 4: {  // specials
      const std::uint32_t specials[] = {0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7f7fffffu, 0u};
      return sign | specials[rng.Between(0, 5)];
    }
    default:
      return r;
  }
}

const float kScales[] = {1.0f, 448.0f / 3.0f, 0.015625f, 3.7f, 65536.0f, 1.0f / 3000.0f};

struct CastCase {
  std::vector<TensorPtr> src;
  std::vector<TensorPtr> dst;
  std::vector<float> scales;
};

// A list of @p sizes: sources of @p src_dtypes (cycled), destinations alternating E4M3FN/E5M2.
CastCase MakeCastCase(const std::vector<std::size_t>& sizes, const std::vector<DataType>& src_dtypes, Rng& rng) {
  CastCase c;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const DataType sd = src_dtypes[t % src_dtypes.size()];
    c.src.push_back(MakeTensor(sd, sizes[t], [&](std::size_t) {
      const std::uint32_t b = HardBits(rng);
      if (sd == DataType::Float32) {
        return b;
      }
      // FP16/BF16: every bit pattern is a value worth testing.
      return rng.Next32() >> 16;
    }));
    c.dst.push_back(MakeTensor((t % 2) == 0 ? DataType::Float8E4M3FN : DataType::Float8E5M2, sizes[t],
                               [](std::size_t) { return 0x55u; }));
    c.scales.push_back(kScales[t % std::size(kScales)]);
  }
  return c;
}

void CheckCast(const CastCase& c, const std::string& what) {
  const TensorPtr scale = FromVector(c.scales, {c.scales.size()});
  const TensorPtr amax = FromVector(std::vector<float>(c.src.size(), -1.0f), {c.src.size()});
  ScaledCastToFloat8(c.src, c.dst, scale, amax);
  const std::vector<float> amaxes = amax->ToFloatVector();
  std::vector<Bytes> expected;
  for (std::size_t t = 0; t < c.src.size(); ++t) {
    const auto* in = static_cast<const unsigned char*>(backends::cpu::Data(*c.src[t]));
    Bytes e(c.src[t]->Size());
    for (std::size_t i = 0; i < e.size(); ++i) {
      e[i] = RefSaturate(c.dst[t]->GetDataType(), RefMultiply(RefLoad(c.src[t]->GetDataType(), in, i), c.scales[t]));
    }
    expected.push_back(std::move(e));
    const float ref = RefTensorAmax(c.src[t]);
    BOOST_TEST_INFO(what << ": amax of tensor " << t);
    BOOST_TEST(SameFloat(amaxes[t], ref), amaxes[t] << " vs reference " << ref);
  }
  RequireSameBits(c.dst, expected, what);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8Cast)

BOOST_AUTO_TEST_CASE(ScaledCastMatchesTheScalarReferenceBitForBit) {
  BOOST_TEST_MESSAGE("FP8 kernels: " << backends::cpu::InstructionSet());
  const ThreadCountGuard guard;
  Rng rng(0xf8ca57u);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    // Odd sizes around every vector width, chunk-crossing tensors past the parallel threshold.
    const std::vector<std::size_t> sizes = {0, 1, 7, 8, 15, 16, 17, 31, 33, 63, 65, 100, 32768 + 5, 70001, 3};
    CheckCast(MakeCastCase(sizes, {DataType::Float32}, rng), "FP32 sources, " + std::to_string(threads) + " threads");
    CheckCast(MakeCastCase(sizes, {DataType::Float16, DataType::BFloat16, DataType::Float32}, rng),
              "mixed sources, " + std::to_string(threads) + " threads");
  }
}

BOOST_AUTO_TEST_CASE(ScaledCastOfEveryHalfAndBFloat16Pattern) {
  // All 65536 patterns of each 16-bit source, through both formats and several scales.
  for (const DataType sd : {DataType::Float16, DataType::BFloat16}) {
    for (const float scale : kScales) {
      CastCase c;
      for (const DataType fmt : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
        c.src.push_back(MakeTensor(sd, 65536, [](std::size_t i) { return static_cast<std::uint32_t>(i); }));
        c.dst.push_back(MakeTensor(fmt, 65536, [](std::size_t) { return 0u; }));
        c.scales.push_back(scale);
      }
      CheckCast(c, std::string(ToString(sd)) + " patterns, scale " + std::to_string(scale));
    }
  }
}

BOOST_AUTO_TEST_CASE(ManyTensorsEachWithItsOwnScaleAndAmax) {
  Rng rng(42);
  std::vector<std::size_t> sizes;
  for (std::size_t t = 0; t < 300; ++t) {
    sizes.push_back(rng.Between(0, 700));
  }
  sizes[17] = 100000;
  CheckCast(MakeCastCase(sizes, {DataType::Float32, DataType::BFloat16, DataType::Float16}, rng), "300 tensors");
}

BOOST_AUTO_TEST_CASE(SaturationAndSpecials) {
  const std::vector<float> values = {500.0f,
                                     -1e30f,
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(),
                                     -0.0f,
                                     70000.0f,
                                     61439.0f};
  const std::vector<TensorPtr> src = {FromVector(values, {values.size()}), FromVector(values, {values.size()})};
  const std::vector<TensorPtr> dst = {Zeros({values.size()}, DataType::Float8E4M3FN),
                                      Zeros({values.size()}, DataType::Float8E5M2)};
  const TensorPtr scale = FromVector({1.0f, 1.0f}, {2});
  const TensorPtr amax = Zeros({2});
  ScaledCastToFloat8(src, dst, scale, amax);
  const auto* e4 = static_cast<const std::uint8_t*>(backends::cpu::Data(*dst[0]));
  const auto* e5 = static_cast<const std::uint8_t*>(backends::cpu::Data(*dst[1]));
  const std::uint8_t want_e4[] = {0x7e, 0xfe, 0x7e, 0xfe, 0x7f, 0x80, 0x7e, 0x7e};
  const std::uint8_t want_e5[] = {0x60, 0xfb, 0x7b, 0xfb, 0x7f, 0x80, 0x7b, 0x7b};
  for (std::size_t i = 0; i < values.size(); ++i) {
    BOOST_TEST(e4[i] == want_e4[i], "E4M3FN of " << values[i] << ": 0x" << std::hex << int(e4[i]));
    BOOST_TEST(e5[i] == want_e5[i], "E5M2 of " << values[i] << ": 0x" << std::hex << int(e5[i]));
  }
  // NaN in the input: the amax is NaN (a recipe then keeps its scale), not the finite max.
  BOOST_TEST(std::isnan(amax->ToFloatVector()[0]));
  BOOST_TEST(std::isnan(amax->ToFloatVector()[1]));
}

BOOST_AUTO_TEST_CASE(InfinityWithoutNaNGivesAnInfiniteAmax) {
  const std::vector<TensorPtr> src = {FromVector({1.0f, -std::numeric_limits<float>::infinity(), 3.0f}, {3}),
                                      FromVector({-2.5f, 0.5f}, {2}), FromVector({}, {0})};
  const std::vector<TensorPtr> dst = {Zeros({3}, DataType::Float8E5M2), Zeros({2}, DataType::Float8E4M3FN),
                                      Zeros({0}, DataType::Float8E4M3FN)};
  const TensorPtr amax = Zeros({3});
  ScaledCastToFloat8(src, dst, FromVector({2.0f, 2.0f, 2.0f}, {3}), amax);
  const std::vector<float> a = amax->ToFloatVector();
  BOOST_TEST(std::isinf(a[0]));
  BOOST_TEST(a[1] == 2.5f);  // the input's amax, not the scaled one
  BOOST_TEST(a[2] == 0.0f);
  BOOST_TEST(dst[1]->ToFloatVector()[0] == -5.0f);
  // A null amax: the cast alone.
  const std::vector<TensorPtr> dst2 = {Zeros({3}, DataType::Float8E5M2), Zeros({2}, DataType::Float8E4M3FN),
                                       Zeros({0}, DataType::Float8E4M3FN)};
  ScaledCastToFloat8(src, dst2, FromVector({2.0f, 2.0f, 2.0f}, {3}), nullptr);
  BOOST_TEST(BytesOf(dst2[0]) == BytesOf(dst[0]));
  BOOST_TEST(BytesOf(dst2[1]) == BytesOf(dst[1]));
}

BOOST_AUTO_TEST_CASE(DequantizeEveryCodeIntoEveryWideDtype) {
  const ThreadCountGuard guard;
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<TensorPtr> src;
    std::vector<TensorPtr> dst;
    std::vector<float> scale_inv;
    // Every code repeated past a chunk boundary, into each wide dtype, at several inverse scales.
    std::size_t t = 0;
    for (const DataType fmt : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
      for (const DataType wide : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
        for (const float s : {1.0f, 1.0f / 448.0f, 3.7f, 1e-30f, 1e30f}) {
          const std::size_t n = (t % 3 == 0) ? 40000 : 256 + t;
          src.push_back(MakeTensor(fmt, n, [](std::size_t i) { return static_cast<std::uint32_t>(i & 0xffu); }));
          dst.push_back(MakeTensor(wide, n, [](std::size_t) { return 0x1234u; }));
          scale_inv.push_back(s);
          ++t;
        }
      }
    }
    DequantizeFloat8(src, dst, FromVector(scale_inv, {scale_inv.size()}));
    std::vector<Bytes> expected;
    for (std::size_t k = 0; k < src.size(); ++k) {
      const auto* in = static_cast<const unsigned char*>(backends::cpu::Data(*src[k]));
      Bytes e(ByteSize(dst[k]));
      for (std::size_t i = 0; i < src[k]->Size(); ++i) {
        const float x = src[k]->GetDataType() == DataType::Float8E4M3FN ? float(Float8E4M3FN::FromBits(in[i]))
                                                                        : float(Float8E5M2::FromBits(in[i]));
        RefStore(dst[k]->GetDataType(), e.data(), i, x * scale_inv[k]);
      }
      expected.push_back(std::move(e));
    }
    BOOST_TEST(expected.size() == 30u);
    RequireSameBits(dst, expected, "dequantize, " + std::to_string(threads) + " threads");
  }
}

BOOST_AUTO_TEST_CASE(AmaxOfEveryDtypeWithNaNAndInfinity) {
  const ThreadCountGuard guard;
  Rng rng(7);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<TensorPtr> list;
    for (std::size_t t = 0; t < 40; ++t) {
      const DataType dtype = kEveryType[t % std::size(kEveryType)];
      const std::size_t n = (t == 5) ? 100000 : rng.Between(0, 3000);
      list.push_back(MakeTensor(dtype, n, [&](std::size_t) { return RandomFiniteBits(dtype, rng); }));
    }
    // Plant a NaN in one tensor of each dtype and an infinity in another (FP8 E4M3FN has none).
    const auto plant = [&](std::size_t t, float v) {
      if (list[t]->Size() == 0) {
        return;
      }
      auto* base = static_cast<unsigned char*>(backends::cpu::MutableData(*list[t]));
      RefStore(list[t]->GetDataType(), base, list[t]->Size() / 2, v);
    };
    for (std::size_t t = 10; t < 15; ++t) {
      plant(t, -std::numeric_limits<float>::quiet_NaN());
    }
    for (std::size_t t = 15; t < 20; ++t) {
      plant(t, -std::numeric_limits<float>::infinity());
    }
    const TensorPtr amax = FromVector(std::vector<float>(list.size(), -1.0f), {list.size()});
    Amax(list, amax);
    const std::vector<float> got = amax->ToFloatVector();
    float list_ref = 0.0f;
    bool any_nan = false;
    for (std::size_t t = 0; t < list.size(); ++t) {
      const float ref = RefTensorAmax(list[t]);
      BOOST_TEST(SameFloat(got[t], ref),
                 "tensor " << t << " (" << ToString(list[t]->GetDataType()) << "): " << got[t] << " vs " << ref);
      any_nan = any_nan || std::isnan(ref);
      list_ref = std::isnan(ref) ? list_ref : (ref > list_ref ? ref : list_ref);
    }
    BOOST_TEST(any_nan);
    BOOST_TEST(std::isnan(ListAmax(list)));
    const std::vector<TensorPtr> finite(list.begin(), list.begin() + 10);
    float finite_ref = 0.0f;
    for (const auto& t : finite) {
      finite_ref = std::max(finite_ref, RefTensorAmax(t));
    }
    BOOST_TEST(ListAmax(finite) == finite_ref);
  }
  BOOST_TEST(ListAmax({}) == 0.0f);
}

BOOST_AUTO_TEST_CASE(HostTensorsWithoutABackendTakeTheCpuKernels) {
  const std::vector<float> values = {1.5f, -300.0f, 0.001f, 1000.0f};
  auto src = std::make_shared<UserTensor>(values, DataType::Float32, Mode::Defaults, true);
  auto dst = std::make_shared<UserTensor>(std::vector<float>(4, 0.0f), DataType::Float8E4M3FN, Mode::Defaults, true);
  auto scale = std::make_shared<UserTensor>(std::vector<float>{2.0f}, DataType::Float32, Mode::Defaults, true);
  const TensorPtr amax = Zeros({1});
  ScaledCastToFloat8(std::vector<TensorPtr>{TensorPtr(src)}, std::vector<TensorPtr>{TensorPtr(dst)}, scale, amax);
  const std::vector<float> out = dst->ToFloatVector();
  BOOST_TEST(out[0] == 3.0f);
  BOOST_TEST(out[1] == -448.0f);
  BOOST_TEST(out[3] == 448.0f);
  BOOST_TEST(amax->ToFloatVector()[0] == 1000.0f);
  // Not host-addressable and no backend: a clear error naming the tensor.
  auto opaque = std::make_shared<UserTensor>(values, DataType::Float32, Mode::Defaults, false);
  BOOST_CHECK_EXCEPTION(Amax(std::vector<TensorPtr>{TensorPtr(opaque)}, Zeros({1})), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensors[0]"; });
}

BOOST_AUTO_TEST_CASE(BadArgumentsAreNamedAndNothingIsWritten) {
  const std::vector<TensorPtr> src = {FromVector({1.0f, 2.0f}, {2}), FromVector({3.0f}, {1})};
  const std::vector<TensorPtr> dst = {Zeros({2}, DataType::Float8E4M3FN), Zeros({1}, DataType::Float8E5M2)};
  const TensorPtr scale = FromVector({1.0f, 1.0f}, {2});
  const TensorPtr amax = FromVector({-1.0f, -1.0f}, {2});
  const auto untouched = [&] {
    BOOST_TEST(dst[0]->ToFloatVector() == std::vector<float>({0.0f, 0.0f}));
    BOOST_TEST(dst[1]->ToFloatVector() == std::vector<float>({0.0f}));
    BOOST_TEST(amax->ToFloatVector() == std::vector<float>({-1.0f, -1.0f}));
  };
  const auto names = [](const std::string& parameter, const std::string& fragment) {
    return [=](const ArgumentError& e) {
      return e.Parameter() == parameter && std::string(e.what()).find(fragment) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, std::vector<TensorPtr>{dst[0]}, scale, amax), ArgumentError,
                        names("dst", "1 tensors"));
  BOOST_CHECK_EXCEPTION(
      ScaledCastToFloat8(src, std::vector<TensorPtr>{dst[0], Zeros({2}, DataType::Float8E5M2)}, scale, amax),
      ArgumentError, names("dst[1]", "shape"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(std::vector<TensorPtr>{src[0], dst[1]}, dst, scale, amax), ArgumentError,
                        names("src[1]", "Float8E5M2"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, std::vector<TensorPtr>{dst[0], Zeros({1})}, scale, amax), ArgumentError,
                        names("dst[1]", "Float32"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, dst, Zeros({2}, DataType::BFloat16), amax), ArgumentError,
                        names("scale", "BFloat16"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, dst, FromVector({1.0f}, {1}), amax), ArgumentError,
                        names("scale", "1 elements"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, dst, scale, Zeros({3})), ArgumentError, names("amax", "3 elements"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, dst, nullptr, amax), ArgumentNullError, names("scale", "null"));
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(std::vector<TensorPtr>{src[0], nullptr}, dst, scale, amax),
                        ArgumentNullError, names("src[1]", "null"));
  untouched();

  BOOST_CHECK_EXCEPTION(DequantizeFloat8(dst, src, FromVector({1.0f}, {1})), ArgumentError,
                        names("scale_inv", "1 elements"));
  BOOST_CHECK_EXCEPTION(DequantizeFloat8(src, src, scale), ArgumentError, names("src[0]", "Float32"));
  BOOST_CHECK_EXCEPTION(DequantizeFloat8(dst, dst, scale), ArgumentError, names("dst[0]", "Float8E4M3FN"));
  BOOST_CHECK_EXCEPTION(Amax(src, Zeros({2}, DataType::Float16)), ArgumentError, names("amax", "Float16"));
  BOOST_CHECK_EXCEPTION(Amax(src, nullptr), ArgumentNullError, names("amax", "null"));
  BOOST_CHECK_EXCEPTION(ListAmax(std::vector<TensorPtr>{nullptr}), ArgumentNullError, names("tensors[0]", "null"));
  untouched();
}

BOOST_AUTO_TEST_SUITE_END()
