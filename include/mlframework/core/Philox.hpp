#pragma once
/// @file Philox.hpp
/// @brief Philox-4x32-10, the counter-based generator of Random123 (Salmon et al., SC'11) and
/// cuRAND, and the stochastic rounding of FP32 to BF16 it drives; shared by host and device code.
///
/// A counter-based generator has no state: the output is a pure function of a 128-bit counter and
/// a 64-bit key, so each element of each tensor of each step draws its own random bits, the same
/// on every backend and in every rerun, whatever the order or the threads.

#include <cstdint>

#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework {

/// Four 32-bit words: a Philox counter or output.
struct Philox4x32Block {
  std::uint32_t Word[4];  ///< The words, first to last.
};

/// Philox-4x32 with @p rounds rounds (10: Philox-4x32-10) of @p counter under key (@p key0, @p key1):
/// Random123's philox4x32_R, word for word (checked against its published known-answer vectors).
MLFW_HOST_DEVICE inline Philox4x32Block Philox4x32(Philox4x32Block counter, std::uint32_t key0, std::uint32_t key1,
                                                   int rounds = 10) {
  constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;
  constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // the key schedule's increments
  constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;
  std::uint32_t* c = counter.Word;
  for (int r = 0; r < rounds; ++r) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMultiplier0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMultiplier1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32);
    const auto lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32);
    const auto lo1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t next0 = hi1 ^ c[1] ^ key0;
    const std::uint32_t next2 = hi0 ^ c[3] ^ key1;
    c[0] = next0;
    c[1] = lo1;
    c[2] = next2;
    c[3] = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

/// How many elements one Philox-4x32-10 call serves in stochastic rounding: its 128 output bits
/// are eight 16-bit halves, one per element (FP32 to BF16 drops exactly 16 bits).
inline constexpr std::uint32_t kPhiloxElementsPerBlock = 8;

/// The Philox-4x32-10 output the stochastically rounding optimizer steps draw for elements
/// 8 x @p group .. 8 x @p group + 7 of tensor @p tensor at step @p step under @p seed: counter
/// (@p group low word, @p group high word, @p tensor, @p step low word), key (@p seed low word,
/// @p seed high word).
MLFW_HOST_DEVICE inline Philox4x32Block PhiloxRoundingBlock(std::uint64_t seed, std::uint64_t step,
                                                            std::uint32_t tensor, std::uint64_t group) {
  return Philox4x32(Philox4x32Block{{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32), tensor,
                                     static_cast<std::uint32_t>(step)}},
                    static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// Half @p half (0 to 7) of the 128 bits of @p block in little-endian order: the low 16 bits of
/// word @p half / 2 when @p half is even, its high 16 bits when odd.
MLFW_HOST_DEVICE inline std::uint16_t PhiloxBlockHalf(const Philox4x32Block& block, std::uint32_t half) {
  // Selects, not an index: a GPU keeps an array indexed at run time in local memory.
  const std::uint32_t w = half / 2u;
  const std::uint32_t word = w == 0u   ? block.Word[0]
                             : w == 1u ? block.Word[1]
                             : w == 2u ? block.Word[2]
                                       : block.Word[3];
  return static_cast<std::uint16_t>(word >> (16u * (half % 2u)));
}

/// The 16 random bits of element @p element of tensor @p tensor at step @p step under @p seed, as
/// the stochastically rounding optimizer steps draw them: half `element % 8` (PhiloxBlockHalf())
/// of PhiloxRoundingBlock(@p seed, @p step, @p tensor, `element / 8`). Element e thus takes the
/// low (even e) or high (odd e) 16 bits of word `(e % 8) / 2` of counter `e / 8`: read as an
/// array of 16-bit values in little-endian order, the outputs of counters 0, 1, 2, ... are the
/// bits of elements 0, 1, 2, ... in turn.
MLFW_HOST_DEVICE inline std::uint16_t PhiloxElementBits(std::uint64_t seed, std::uint64_t step, std::uint32_t tensor,
                                                        std::uint64_t element) {
  const Philox4x32Block out = PhiloxRoundingBlock(seed, step, tensor, element / kPhiloxElementsPerBlock);
  return PhiloxBlockHalf(out, static_cast<std::uint32_t>(element % kPhiloxElementsPerBlock));
}

/// @p value rounded to BF16 stochastically with the 16 random bits @p random: rounds away from
/// zero with probability (dropped low bits) / 2^16, so the expected BF16 value is @p value; exact
/// values stay exact, infinities stay infinite, NaN is quieted.
MLFW_HOST_DEVICE inline std::uint16_t StochasticRoundToBFloat16Bits(float value, std::uint16_t random) {
  const std::uint32_t x = detail::FloatAsBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  if ((x & 0x7fffffffu) == 0x7f800000u) {
    return static_cast<std::uint16_t>(x >> 16);
  }
  return static_cast<std::uint16_t>((x + random) >> 16);
}

}  // namespace mlframework
