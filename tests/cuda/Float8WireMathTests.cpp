// The FP8 block wire's shared math (core/Float8BlockMath.hpp, what the CUDA kernels compute) run
// on the host against the CPU codec (distributed/Float8BlockCodec.hpp): the same scale for
// every amax a block can have, the same codes and the same sums on data with zeros, subnormals,
// large values, non-finite blocks and a short last block. With Float8WireOnCudaTests.cpp (the
// kernels against the codec on a GPU), this ties the device wire to the CPU wire bit for bit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/distributed/Float8BlockReduce.hpp>

#include "cuda/Float8WireData.hpp"
#include "mlframework/core/Float8BlockMath.hpp"
#include "mlframework/distributed/Float8BlockCodec.hpp"

using namespace mlframework;
namespace codec = mlframework::distributed::detail;
using mlfw_wire_test::kWireBlock;
using mlfw_wire_test::WireBits;
using mlfw_wire_test::WireValues;

namespace {

std::uint32_t BitsOf(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The header's encoder, block by block, as the CUDA kernel runs it.
void HeaderEncode(const float* values, std::size_t count, std::uint8_t* codes, float* scale_inv) {
  for (std::size_t block = 0; block * kWireBlock < count; ++block) {
    const std::size_t first = block * kWireBlock;
    const std::size_t last = std::min(count, first + kWireBlock);
    std::uint32_t amax = 0;
    for (std::size_t i = first; i < last; ++i) amax = std::max(amax, BitsOf(values[i]) & 0x7fffffffu);
    if (detail::Float8BlockIsNonFinite(amax)) {
      for (std::size_t i = first; i < last; ++i) codes[i] = 0;
      scale_inv[block] = detail::Float8BlockNaNScale();
      continue;
    }
    const int k = detail::Float8BlockScaleExponent(amax);
    for (std::size_t i = first; i < last; ++i) {
      codes[i] = detail::EncodeFloat8BlockElement(values[i], detail::Float8BlockPowerOfTwo(k));
    }
    scale_inv[block] = detail::Float8BlockPowerOfTwo(-k);
  }
}

std::vector<std::uint32_t> RawBits(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8WireMath)

BOOST_AUTO_TEST_CASE(BlockIsTheLibraryBlock) { BOOST_TEST(kWireBlock == distributed::kFloat8WireBlock); }

// One block per amax pattern: every exponent field (subnormals included) with the mantissas at
// the edges of the 448 test (1.75 fits, the next float does not), alone in its block. The
// header's scale exponent gives the codec's scale, bit for bit, and the codec's code of it.
BOOST_AUTO_TEST_CASE(ScaleOfEveryAmaxIsTheCodecs) {
  std::vector<float> values;
  for (std::uint32_t field = 0; field < 255; ++field) {
    for (const std::uint32_t mantissa : {0x000001u, 0x400000u, 0x5fffffu, 0x600000u, 0x600001u, 0x7fffffu}) {
      std::vector<float> block(kWireBlock, 0.0f);
      block[field % kWireBlock] = mlfw_wire_test::FromBits((field << 23) | mantissa);
      block[(field + 1) % kWireBlock] = -mlfw_wire_test::FromBits((field << 23) | (mantissa / 2));
      values.insert(values.end(), block.begin(), block.end());
    }
  }
  values.insert(values.end(), kWireBlock, 0.0f);  // the all-zero block: scale 1
  const std::size_t blocks = values.size() / kWireBlock;
  std::vector<std::uint8_t> codes(values.size());
  std::vector<std::uint8_t> header_codes(values.size());
  std::vector<float> scales(blocks);
  std::vector<float> header_scales(blocks);
  codec::EncodeFloat8Blocks(values.data(), values.size(), codes.data(), scales.data());
  HeaderEncode(values.data(), values.size(), header_codes.data(), header_scales.data());
  BOOST_TEST(RawBits(header_scales) == RawBits(scales), boost::test_tools::per_element());
  BOOST_TEST(header_codes == codes, boost::test_tools::per_element());
  BOOST_TEST(scales.back() == 1.0f);
}

// Random data with every special case, a short last block: the same codes and scales (a NaN
// scale included: both write the quiet NaN), and the same rank-order sums of four parts.
BOOST_AUTO_TEST_CASE(EncodeAndDecodeSumAreTheCodecs) {
  constexpr std::size_t kCount = (37 * kWireBlock) + 91;
  constexpr int kParts = 4;
  const std::size_t blocks = codec::Float8BlockCount(kCount);
  std::vector<std::uint8_t> codes(kParts * kCount);
  std::vector<std::uint8_t> header_codes(kParts * kCount);
  std::vector<float> scales(kParts * blocks);
  std::vector<float> header_scales(kParts * blocks);
  for (int p = 0; p < kParts; ++p) {
    const std::vector<float> values = WireValues(kCount, 11u + static_cast<std::uint32_t>(p));
    const auto part = static_cast<std::size_t>(p);
    codec::EncodeFloat8Blocks(values.data(), kCount, codes.data() + (part * kCount), scales.data() + (part * blocks));
    HeaderEncode(values.data(), kCount, header_codes.data() + (part * kCount), header_scales.data() + (part * blocks));
  }
  BOOST_TEST(header_codes == codes, boost::test_tools::per_element());
  BOOST_TEST(RawBits(header_scales) == RawBits(scales), boost::test_tools::per_element());
  std::vector<float> sums(kCount);
  codec::DecodeSumFloat8Blocks(codes.data(), scales.data(), kParts, kCount, sums.data());
  std::vector<float> header_sums(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    float sum = detail::DecodeFloat8BlockElement(codes[i], scales[i / kWireBlock]);
    for (std::size_t p = 1; p < kParts; ++p) {
      sum += detail::DecodeFloat8BlockElement(codes[(p * kCount) + i], scales[(p * blocks) + (i / kWireBlock)]);
    }
    header_sums[i] = sum;
  }
  BOOST_TEST(WireBits(header_sums) == WireBits(sums), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
