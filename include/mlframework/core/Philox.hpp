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

/// The 32 random bits of element @p element of tensor @p tensor at step @p step under @p seed, as
/// the stochastically rounding optimizer steps draw them: word `element % 4` of Philox-4x32-10 of
/// counter (element / 4 low word, element / 4 high word, tensor, step low word), key (seed low
/// word, seed high word).
MLFW_HOST_DEVICE inline std::uint32_t PhiloxElementBits(std::uint64_t seed, std::uint64_t step, std::uint32_t tensor,
                                                        std::uint64_t element) {
  const std::uint64_t group = element / 4u;
  const Philox4x32Block out =
      Philox4x32(Philox4x32Block{{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32), tensor,
                                  static_cast<std::uint32_t>(step)}},
                 static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  // Selects, not an index: a GPU keeps an array indexed at run time in local memory.
  const auto word = static_cast<std::uint32_t>(element % 4u);
  return word == 0u ? out.Word[0] : word == 1u ? out.Word[1] : word == 2u ? out.Word[2] : out.Word[3];
}

/// @p value rounded to BF16 stochastically with the random bits @p random (their low 16 bits are
/// used): rounds away from zero with probability (dropped low bits) / 2^16, so the expected BF16
/// value is @p value; exact values stay exact, infinities stay infinite, NaN is quieted.
MLFW_HOST_DEVICE inline std::uint16_t StochasticRoundToBFloat16Bits(float value, std::uint32_t random) {
  const std::uint32_t x = detail::FloatAsBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  if ((x & 0x7fffffffu) == 0x7f800000u) {
    return static_cast<std::uint16_t>(x >> 16);
  }
  return static_cast<std::uint16_t>((x + (random & 0xffffu)) >> 16);
}

}  // namespace mlframework
