// MXFP8 block scaling against a scalar reference written from the OCP MX v1.0 text (section
// 6.3): X = 2^(floor(log2(max|V|)) - emax_elem) clamped to E8M0, P_i = V_i / X rounded to
// nearest even and clamped to the element format's largest normal.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include <mlframework/core/Float8.hpp>
#include <mlframework/fp8/MXFP8BlockScaling.hpp>

#include "amp/FakeDeviceBackend.hpp"

using namespace mlframework;
using mlframework::fp8::MXFP8BlockScaling;

namespace {

struct Reference {
  std::vector<std::uint8_t> elements;
  std::vector<std::uint8_t> scales;
};

// The spec's algorithm, in double where it can be, one block at a time.
Reference Quantize(const std::vector<float>& values, std::size_t row, DataType type) {
  const int emax_elem = type == DataType::Float8E4M3FN ? 8 : 15;
  const double max_normal = type == DataType::Float8E4M3FN ? 448.0 : 57344.0;
  Reference out;
  out.elements.resize(values.size());
  for (std::size_t r = 0; r < values.size(); r += row) {
    for (std::size_t b = r; b < r + row; b += 32) {
      const std::size_t e = std::min(b + 32, r + row);
      double amax = 0.0;
      bool special = false;
      for (std::size_t i = b; i < e; ++i) {
        special = special || !std::isfinite(values[i]);
        amax = std::max(amax, std::fabs(static_cast<double>(values[i])));
      }
      if (special) {
        out.scales.push_back(0xFF);
        for (std::size_t i = b; i < e; ++i) out.elements[i] = 0x7F;
        continue;
      }
      int shared = amax == 0.0 ? -127 : static_cast<int>(std::floor(std::log2(amax))) - emax_elem;
      shared = std::max(-127, std::min(127, shared));
      out.scales.push_back(static_cast<std::uint8_t>(shared + 127));
      for (std::size_t i = b; i < e; ++i) {
        double p = static_cast<double>(values[i]) / std::ldexp(1.0, shared);
        p = std::max(-max_normal, std::min(max_normal, p));
        const auto f = static_cast<float>(p);  // exact: a float times a power of two in range
        out.elements[i] = type == DataType::Float8E4M3FN ? Float8E4M3FN(f).bits : Float8E5M2(f).bits;
      }
    }
  }
  return out;
}

std::vector<float> Sample(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 100);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    // Blocks of one magnitude plus some spread, with exact powers of two and their neighbours
    // (the floor of log2 changes there) and zeros.
    const int block_exp = static_cast<int>((i / 32) % 40) * 6 - 130;
    switch (i % 11) {
      case 0:
        values[i] = std::ldexp(1.0f, block_exp + 3);
        break;
      case 1:
        values[i] = std::nextafter(std::ldexp(1.0f, block_exp + 3), 0.0f);
        break;
      case 2:
        values[i] = 0.0f;
        break;
      default:
        values[i] = std::ldexp(mantissa(rng), block_exp + static_cast<int>(rng() % 4));
    }
    if (i % 97 == 5) values[i] = std::ldexp(mantissa(rng), exponent(rng));
  }
  return values;
}

// An FP8 tensor the host cannot address whose writes fail (a device whose copy fails).
class RefusingTensor final : public ITensor {
 public:
  explicit RefusingTensor(Shape shape) : shape_(std::move(shape)) {}
  DataType GetDataType() const override { return DataType::Float8E4M3FN; }
  Device GetDevice() const override { return Device::CPU(); }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return ElementCount(shape_); }
  std::vector<float> ToFloatVector() const override { return std::vector<float>(Size(), 0.0f); }
  void CopyFromFloats(std::span<const float> /*values*/) override {
    throw InvalidOperationError("refusing tensor: the write failed");
  }

 private:
  Shape shape_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(MXFP8)

BOOST_AUTO_TEST_CASE(QuantizeMatchesTheSpecReference) {
  for (const DataType type : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
    const MXFP8BlockScaling mx(type);
    for (const Shape& shape : {Shape{40, 64}, Shape{7, 45}, Shape{1000}, Shape{3, 1}, Shape{}, Shape{300, 250}}) {
      const std::size_t count = ElementCount(shape);
      std::vector<float> values = Sample(count, static_cast<std::uint32_t>(count));
      if (count > 300) {
        values[70] = std::numeric_limits<float>::infinity();
        values[200] = std::numeric_limits<float>::quiet_NaN();
        for (std::size_t i = 256; i < 288 && i < count; ++i) values[i] = 0.0f;
        values[300] = 3.0e38f;
      }
      const Reference want = Quantize(values, shape.empty() ? 1 : shape.back(), type);
      const TensorPtr src = FromVector(values, shape);
      const TensorPtr dst = Zeros(shape, type);
      std::vector<std::uint8_t> scales(MXFP8BlockScaling::ScaleCount(shape));
      BOOST_REQUIRE(scales.size() == want.scales.size());
      mx.Quantize(*src, *dst, scales);
      BOOST_TEST(scales == want.scales, boost::test_tools::per_element());
      const auto bytes = dst->HostBytes();
      const std::vector<std::uint8_t> got(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                          reinterpret_cast<const std::uint8_t*>(bytes.data()) + bytes.size());
      BOOST_TEST(got == want.elements, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(FloorRuleSaturatesTheLargestValues) {
  // amax 500 in [256, 512): X = 2^(8 - 8) = 1 and 500 > 448 is clamped to 448 (OCP's floor rule;
  // Transformer Engine would pick X = 2 and keep 250).
  const MXFP8BlockScaling mx;
  std::vector<float> values(32, 1.0f);
  values[0] = 500.0f;
  const TensorPtr dst = Zeros({32}, DataType::Float8E4M3FN);
  std::vector<std::uint8_t> scales(1);
  mx.Quantize(*FromVector(values, {32}), *dst, scales);
  BOOST_TEST(scales[0] == 127);
  BOOST_TEST(dst->ToFloatVector()[0] == 448.0f);
}

BOOST_AUTO_TEST_CASE(DequantizeInvertsUpToTheElementRounding) {
  const MXFP8BlockScaling mx;
  const std::vector<float> values = Sample(std::size_t{64} * 9, 7);
  const TensorPtr q = Zeros({9, 64}, DataType::Float8E4M3FN);
  std::vector<std::uint8_t> scales(MXFP8BlockScaling::ScaleCount({9, 64}));
  mx.Quantize(*FromVector(values, {9, 64}), *q, scales);
  const TensorPtr back = Zeros({9, 64});
  mx.Dequantize(*q, scales, *back);
  const std::vector<float> got = back->ToFloatVector();
  const std::vector<float> elements = q->ToFloatVector();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const int code = scales[(i / 64) * 2 + (i % 64) / 32];
    BOOST_TEST(got[i] == std::ldexp(elements[i], code - 127));
  }
  // The NaN scale decodes to NaN.
  std::vector<std::uint8_t> nan_scales(scales.size(), MXFP8BlockScaling::kScaleNaN);
  mx.Dequantize(*q, nan_scales, *back);
  BOOST_TEST(std::isnan(back->ToFloatVector()[5]));
}

BOOST_AUTO_TEST_CASE(TensorsWithoutHostBytesGoThroughTheirVirtuals) {
  const MXFP8BlockScaling mx(DataType::Float8E5M2);
  const std::vector<float> values = Sample(96, 3);
  const auto src = std::make_shared<mlfw_test::FakeDeviceTensor>(FromVector(values, {96}), 0);
  const auto dst = std::make_shared<mlfw_test::FakeDeviceTensor>(Zeros({96}, DataType::Float8E5M2), 0);
  std::vector<std::uint8_t> scales(3);
  mx.Quantize(*src, *dst, scales);
  const Reference want = Quantize(values, 96, DataType::Float8E5M2);
  BOOST_TEST(scales == want.scales, boost::test_tools::per_element());
  const auto bytes = dst->Inner()->HostBytes();
  for (std::size_t i = 0; i < 96; ++i) BOOST_TEST(static_cast<std::uint8_t>(bytes[i]) == want.elements[i]);
}

BOOST_AUTO_TEST_CASE(AFailingWriteOfTheElementsLeavesTheScalesAsTheyWere) {
  const MXFP8BlockScaling mx;
  const std::vector<float> values = Sample(64, 5);
  RefusingTensor dst({64});
  std::vector<std::uint8_t> scales(2, 0xAB);
  BOOST_CHECK_THROW(mx.Quantize(*FromVector(values, {64}), dst, scales), InvalidOperationError);
  BOOST_TEST(scales == (std::vector<std::uint8_t>(2, 0xAB)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(BadArgumentsAreNamed) {
  BOOST_CHECK_THROW(MXFP8BlockScaling{DataType::BFloat16}, ArgumentError);
  const MXFP8BlockScaling mx;
  std::vector<std::uint8_t> scales(2);
  const TensorPtr src = Zeros({64});
  const TensorPtr dst = Zeros({64}, DataType::Float8E4M3FN);
  auto names = [](const char* parameter) {
    return [parameter](const ArgumentError& e) { return std::string(e.what()).find(parameter) != std::string::npos; };
  };
  BOOST_CHECK_EXCEPTION(mx.Quantize(*dst, *dst, scales), ArgumentError, names("'src'"));
  BOOST_CHECK_EXCEPTION(mx.Quantize(*src, *Zeros({64}, DataType::BFloat16), scales), ArgumentError, names("'dst'"));
  BOOST_CHECK_EXCEPTION(mx.Quantize(*src, *Zeros({65}, DataType::Float8E4M3FN), scales), ArgumentError, names("'dst'"));
  std::vector<float> values(64);
  std::vector<std::uint8_t> elements(64);
  BOOST_CHECK_EXCEPTION(mx.QuantizeBlocks(values, 48, elements, scales), ArgumentError, names("'row_length'"));
  BOOST_CHECK_EXCEPTION(mx.QuantizeBlocks(values, 64, std::span(elements).first(63), scales), ArgumentError,
                        names("'elements'"));
  BOOST_CHECK_EXCEPTION(mx.DequantizeBlocks(values, 16, scales), ArgumentError, names("'scales'"));
  std::vector<std::uint8_t> short_scales(1);
  BOOST_CHECK_EXCEPTION(mx.Quantize(*src, *dst, short_scales), ArgumentError, names("'scales'"));
  BOOST_CHECK_EXCEPTION(mx.Dequantize(*src, scales, *src), ArgumentError, names("'src'"));
  BOOST_CHECK_EXCEPTION(mx.Dequantize(*dst, scales, *dst), ArgumentError, names("'dst'"));
}

BOOST_AUTO_TEST_SUITE_END()
