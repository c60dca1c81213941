// The FP8 block wire's codec (distributed/Float8BlockCodec.hpp: the sender's block encode and
// the receiver's decoding sum) against a scalar reference written here from the FP8 structs
// (core/Float8.hpp): block scales, codes and sums bit for bit, on blocks whose values cover
// E4M3FN ties, its subnormals after scaling, FP32 subnormals, zero and non-finite blocks, short
// tails and enough blocks for the parallel loop. This executable runs once per instruction set
// (MLFW_CPU_ISA), so the codec's kernels of every vector set of Float8Kernels.hpp are checked.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Float8.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>

#include "core/KernelReference.hpp"
#include "mlframework/distributed/Float8BlockCodec.hpp"

using namespace mlframework;
using kernel_test::Rng;
namespace wire = mlframework::distributed::detail;

namespace {

constexpr std::size_t kBlock = distributed::kFloat8WireBlock;

// The exponent k of a finite block's scale 2^k: the largest in [-126, 126] with amax * 2^k <= 448
// (0 for a block of zeros), by trying every k.
int RefScaleExponent(float amax) {
  if (amax == 0.0f) return 0;
  for (int k = 126; k > -126; --k) {
    if (std::ldexp(static_cast<double>(amax), k) <= 448.0) return k;
  }
  return -126;
}

bool SameWireFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || detail::FloatAsBits(a) == detail::FloatAsBits(b);
}

// A value of a block whose magnitudes span @p decades from @p top down: E4M3FN ties and their
// neighbours after the scale, FP32 subnormals, zeros and random bits in range.
float BlockValue(Rng& rng, float top, int decades) {
  const std::uint32_t r = rng.Next32();
  const float sign = (r & 1u) != 0u ? -1.0f : 1.0f;
  switch (rng.Between(0, 5)) {
    case 0: {  // a tie of E4M3FN's 3 mantissa bits (or a neighbour) at some exponent below top
      // A power-of-two exponent at or below top's: the block scale 2^k keeps it a tie.
      const int exponent =
          std::ilogb(top) - 1 - static_cast<int>(rng.Between(0, 3 * static_cast<std::size_t>(decades)));
      const auto mantissa = static_cast<float>((r >> 8) & 0x7u);
      const float tie = std::ldexp(1.0f + ((mantissa + 0.5f) / 8.0f), exponent);
      const std::size_t nudge = rng.Between(0, 2);  // the tie, or one FP32 ulp below or above it
      return sign * (nudge == 1 ? tie : std::nextafter(tie, nudge == 0 ? 0.0f : 1e30f));
    }
    case 1:  // an FP32 subnormal
      return sign * detail::BitsAsFloat(r & 0x007fffffu);
    case 2:
      return 0.0f;
    default:
      return sign * top * static_cast<float>(std::pow(10.0, -rng.Unit() * decades));
  }
}

// Blocks of different scales: large, small (so scaled values reach E4M3FN's subnormals), tiny
// (the scale capped at 2^126), zero, exactly 448, and ones holding an infinity or a NaN.
std::vector<float> WireInput(std::size_t count, Rng& rng) {
  const float tops[] = {3.0e4f, 1.0f, 7.5e-3f, 1.0e-36f, 448.0f, 2.0e-40f, 1.0e38f};
  std::vector<float> values(count);
  for (std::size_t start = 0; start < count; start += kBlock) {
    const std::size_t block = start / kBlock;
    const float top = tops[block % std::size(tops)];
    const int decades = static_cast<int>(rng.Between(1, 9));
    const std::size_t end = std::min(count, start + kBlock);
    for (std::size_t i = start; i < end; ++i) values[i] = BlockValue(rng, top, decades);
    if (block % 11 == 3)
      std::fill(values.begin() + static_cast<std::ptrdiff_t>(start), values.begin() + static_cast<std::ptrdiff_t>(end),
                0.0f);
    if (block % 13 == 5) values[start + ((end - start) / 2)] = std::numeric_limits<float>::infinity();
    if (block % 17 == 7) values[end - 1] = std::numeric_limits<float>::quiet_NaN();
    if (block % 7 == 2) values[start] = top;  // the amax itself, at the block's first element
  }
  return values;
}

// The encode of one block by definition: its scale 2^k and each code the E4M3FN rounding of the
// exact product x * 2^k rounded once to FP32; NaN scale and zero codes for a non-finite block.
void CheckEncodedBlock(const float* x, std::size_t n, const std::uint8_t* codes, float scale_inv, std::size_t block) {
  float amax = 0.0f;
  bool finite = true;
  for (std::size_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  BOOST_TEST_CONTEXT("block " << block << " amax " << amax) {
    if (!finite) {
      BOOST_TEST(std::isnan(scale_inv));
      BOOST_TEST(std::all_of(codes, codes + n, [](std::uint8_t c) { return c == 0u; }));
      return;
    }
    const int k = RefScaleExponent(amax);
    BOOST_TEST(scale_inv == std::ldexp(1.0f, -k));
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto scaled = static_cast<float>(std::ldexp(static_cast<double>(x[i]), k));
      mismatches += codes[i] != Float8E4M3FN(scaled).bits ? 1u : 0u;
    }
    BOOST_TEST(mismatches == 0u);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8WireCodec)

BOOST_AUTO_TEST_CASE(EncodeMatchesTheDefinitionBitForBit) {
  Rng rng(42);
  // A single short block, a few blocks with a tail shorter than a vector, and enough blocks for
  // the parallel loop with a tail of one element.
  for (const std::size_t count : {std::size_t{7}, 3 * kBlock + 13, 150 * kBlock + 1}) {
    const std::vector<float> values = WireInput(count, rng);
    std::vector<std::uint8_t> codes(count, 0x55u);
    std::vector<float> scales(wire::Float8BlockCount(count), -1.0f);
    wire::EncodeFloat8Blocks(values.data(), count, codes.data(), scales.data());
    BOOST_TEST_CONTEXT("count " << count) {
      for (std::size_t b = 0; b < scales.size(); ++b) {
        const std::size_t start = b * kBlock;
        CheckEncodedBlock(values.data() + start, std::min(kBlock, count - start), codes.data() + start, scales[b], b);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(DecodeSumMatchesTheDefinitionBitForBit) {
  Rng rng(7);
  const std::size_t count = 70 * kBlock + 29;  // the parallel loop, a tail shorter than a vector
  const std::size_t blocks = wire::Float8BlockCount(count);
  for (const int parts : {1, 2, 3, 5}) {
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(parts) * count);
    for (std::uint8_t& c : codes) {
      c = static_cast<std::uint8_t>(rng.Next32() & 0xffu);
      if ((c & 0x7fu) == 0x7fu) c = static_cast<std::uint8_t>(c ^ 0x01u);  // the encoder writes no NaN code
    }
    std::vector<float> scales(static_cast<std::size_t>(parts) * blocks);
    for (std::size_t s = 0; s < scales.size(); ++s) {
      scales[s] = std::ldexp(1.0f, static_cast<int>(rng.Between(0, 252)) - 126);  // 2^-126 .. 2^126
      if (s % 23 == 4) scales[s] = std::numeric_limits<float>::quiet_NaN();       // a non-finite block
    }
    for (const float factor : {1.0f, 0.25f, 1.0f / 3.0f}) {
      std::vector<float> out(count, -7.0f);
      wire::DecodeSumFloat8Blocks(codes.data(), scales.data(), parts, count, out.data(), factor);
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t block = i / kBlock;
        float sum = static_cast<float>(Float8E4M3FN::FromBits(codes[i])) * scales[block];
        for (std::size_t p = 1; p < static_cast<std::size_t>(parts); ++p) {
          const float product =
              static_cast<float>(Float8E4M3FN::FromBits(codes[(p * count) + i])) * scales[(p * blocks) + block];
          sum = sum + product;  // rounded after each part, in part order
        }
        mismatches += SameWireFloat(out[i], sum * factor) ? 0u : 1u;
      }
      BOOST_TEST(mismatches == 0u, "parts " << parts << " factor " << factor);
      if (factor == 1.0f) {  // the form without a factor gives the same sums
        std::vector<float> plain(count);
        wire::DecodeSumFloat8Blocks(codes.data(), scales.data(), parts, count, plain.data());
        BOOST_TEST(std::equal(plain.begin(), plain.end(), out.begin(), SameWireFloat));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
