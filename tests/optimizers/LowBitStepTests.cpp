// The fused steps with masters and states below FP32 (StateFormat, MasterFormat in
// core/OptimizerStep.hpp): Philox against Random123's known answers; each state format against
// the FP32 step of its decoded state with the IEEE root (the parameters to the bit, the stored
// state within its format's bound); stochastic rounding unbiased and reproducible, bit for bit the
// documented Philox counter; remainder masters bit-identical to FP32 masters; bad formats rejected with
// nothing written; and a short regression where every mode ends close to FP32 Adam.
// CMake runs this suite again with each instruction set forced through MLFW_CPU_ISA.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Philox.hpp>
#include <mlframework/mlframework.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "mlframework/core/StateCodes.hpp"
#include "optimizers/KernelNumerics.hpp"
#include "optimizers/OptimizerTestUtil.hpp"
#include "optimizers/ReferenceSteps.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
using namespace mlfw_test;

namespace {

// Sizes around the SIMD widths, the blocks, the staged tile (2048) and the chunk (32768).
const std::vector<std::size_t> kLowBitSizes = {1, 7, 33, 255, 257, 2049, 40001};

std::vector<std::uint8_t> Bytes(const TensorPtr& tensor) {
  const std::span<const std::byte> bytes = tensor->HostBytes();
  std::vector<std::uint8_t> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<std::uint16_t> Halves(const TensorPtr& tensor) {
  const std::span<const std::byte> bytes = tensor->HostBytes();
  // The 16-bit values of a 16-bit state; an 8-bit state's odd last byte is left out.
  std::vector<std::uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(std::uint16_t));
  return out;
}

// A state of @p n elements stored as @p format, all zero, with its scales (block-scaled formats).
struct Stored {
  TensorPtr data;
  TensorPtr scales;
};

Stored ZeroState(StateFormat format, std::size_t n, std::size_t block) {
  Stored s{.data = Zeros({n}, StateStorageDType(format)), .scales = nullptr};
  if (IsBlockScaled(format)) {
    s.scales = Zeros({StateBlockCount(n, block)}, DataType::Float32);
  }
  return s;
}

// The values of a stored state, decoded as documented in StateFormat.
std::vector<float> Decode(StateFormat format, const Stored& s, std::size_t block) {
  if (!IsBlockScaled(format)) {
    return s.data->ToFloatVector();
  }
  if (format == StateFormat::Float16) {
    std::vector<float> out = s.data->ToFloatVector();  // the FP16 codes
    const std::vector<float> scales = s.scales->ToFloatVector();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] *= scales[i / block];
    return out;
  }
  const std::vector<std::uint8_t> codes = Bytes(s.data);
  const std::vector<float> fp8 = s.data->ToFloatVector();  // the codes read as E4M3FN values
  const std::vector<float> scales = s.scales->ToFloatVector();
  std::vector<float> out(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const float scale = scales[i / block];
    const float code = format == StateFormat::Int8Block    ? static_cast<float>(static_cast<std::int8_t>(codes[i]))
                       : format == StateFormat::UInt8Block ? static_cast<float>(codes[i])
                                                           : fp8[i];
    out[i] = code * scale;
  }
  return out;
}

// The scale StateFormat documents for a Float16 block of largest magnitude @p absmax (finite): the
// power of two 2^k >= 2^-126 that puts absmax / 2^k in [2^15, 2^16), or one binade lower where
// FP16 would round absmax / 2^k to infinity.
float ExpectedFloat16Scale(float absmax) {
  int exponent = 0;
  static_cast<void>(std::frexp(absmax, &exponent));  // absmax in [2^(exponent-1), 2^exponent)
  float scale = std::ldexp(1.0f, exponent - 16);
  if (absmax / scale >= 65520.0f) scale *= 2.0f;  // 65520 rounds to 2^16 in FP16
  return absmax == 0.0f || scale < 0x1p-126f ? 0x1p-126f : scale;
}

// Checks a Float16 state @p s against the FP32 state @p ref it encodes, bit for bit: each block's
// power-of-two scale, and each code the FP16 rounding of ref / scale (the tensor cast), a positive
// second moment kept positive (the smallest subnormal code).
void CheckFloat16Blocks(const Stored& s, const std::vector<float>& ref, std::size_t block, bool second) {
  const std::vector<float> scales = s.scales->ToFloatVector();
  const std::vector<float> codes = s.data->ToFloatVector();
  std::vector<float> quotients(ref.size());
  std::size_t wrong_scales = 0;
  for (std::size_t b = 0; b < scales.size(); ++b) {
    const std::size_t end = std::min(ref.size(), (b + 1) * block);
    float absmax = 0.0f;
    for (std::size_t i = b * block; i < end; ++i) absmax = std::max(absmax, std::fabs(ref[i]));
    const float scale = ExpectedFloat16Scale(absmax);
    wrong_scales += scales[b] != scale ? 1 : 0;
    for (std::size_t i = b * block; i < end; ++i) quotients[i] = ref[i] / scale;
  }
  const std::vector<float> rounded =
      FromVector(quotients, {quotients.size()}, DataType::Float32)->CastTo(DataType::Float16)->ToFloatVector();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const float expected = second && ref[i] > 0.0f && rounded[i] == 0.0f ? 0x1p-24f : rounded[i];
    wrong += codes[i] != expected || std::signbit(codes[i]) != std::signbit(expected) ? 1 : 0;
  }
  BOOST_TEST(wrong_scales == 0u);
  BOOST_TEST(wrong == 0u);
}

// Checks the stored state @p s against the FP32 state @p ref it encodes, within the bound of its
// format (StateFormat's documentation); @p second: the second moment, whose positive values stay positive.
void CheckEncoding(StateFormat format, const Stored& s, const std::vector<float>& ref, std::size_t block, bool second) {
  const std::vector<float> got = Decode(format, s, block);
  if (format == StateFormat::Float32) {
    BOOST_TEST(got == ref);
    return;
  }
  if (!IsBlockScaled(format)) {
    const DataType dtype = StateStorageDType(format);
    const std::vector<float> rounded = FromVector(ref, {ref.size()}, DataType::Float32)->CastTo(dtype)->ToFloatVector();
    const float smallest = dtype == DataType::BFloat16 ? 0x1p-133f : 0x1p-24f;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const float expected = second && ref[i] > 0.0f && rounded[i] == 0.0f ? smallest : rounded[i];
      wrong += got[i] != expected ? 1 : 0;
    }
    BOOST_TEST(wrong == 0u);  // round to nearest even, a positive second moment kept positive
    return;
  }
  if (format == StateFormat::Float16) {
    CheckFloat16Blocks(s, ref, block, second);
    return;
  }
  const std::vector<float> scales = s.scales->ToFloatVector();
  const std::vector<std::uint8_t> codes = Bytes(s.data);
  const float code_max = format == StateFormat::Int8Block    ? 127.0f
                         : format == StateFormat::UInt8Block ? 255.0f
                                                             : 448.0f;
  std::size_t outside = 0;
  std::size_t wrong_scales = 0;
  std::size_t wrong_codes = 0;  // against the shared codes the CUDA kernels take (core/StateCodes.hpp)
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const float scale = scales[i / block];
    const std::uint8_t expected =
        format == StateFormat::Float8E4M3Block
            ? mlframework::detail::Float8Code(ref[i], scale, second)
            : mlframework::detail::LinearBlockCode(ref[i], scale, mlframework::detail::BlockCodeFactor(format, scale),
                                                   code_max, second);
    wrong_codes += codes[i] != expected ? 1 : 0;
  }
  BOOST_TEST(wrong_codes == 0u);
  for (std::size_t b = 0; b < scales.size(); ++b) {
    const std::size_t end = std::min(ref.size(), (b + 1) * block);
    float absmax = 0.0f;
    for (std::size_t i = b * block; i < end; ++i) {
      absmax = std::max(absmax, std::fabs(ref[i]));
    }
    const float scale = absmax / code_max;
    wrong_scales += scales[b] != scale ? 1 : 0;
    for (std::size_t i = b * block; i < end; ++i) {
      const float err = std::fabs(got[i] - ref[i]);
      const float slack = absmax * 0x1p-22f;
      bool ok = false;
      if (format == StateFormat::Float8E4M3Block) {
        const float kept = second && ref[i] > 0.0f && codes[i] == 1 ? 0x1p-9f * scale : 0.0f;
        ok = err <= std::max({0x1p-4f * std::fabs(ref[i]), 0x1p-10f * scale, kept}) * 1.000001f + slack;
      } else if (second && ref[i] < scale / 2) {
        ok = got[i] >= ref[i] && got[i] - ref[i] <= scale + slack && (ref[i] == 0.0f) == (got[i] == 0.0f);
      } else {
        ok = err <= scale / 2 + slack;
      }
      outside += ok ? 0 : 1;
    }
  }
  BOOST_TEST(wrong_scales == 0u);  // absmax / code_max of the FP32 state
  BOOST_TEST(outside == 0u);       // every element within its bound
}

std::vector<TensorPtr> Of(const std::vector<Stored>& states, bool scales) {
  std::vector<TensorPtr> out;
  for (const Stored& s : states) {
    out.push_back(scales ? s.scales : s.data);
  }
  return out;
}

std::vector<std::uint32_t> ParseWords(std::istringstream& line, int count) {
  std::vector<std::uint32_t> words(static_cast<std::size_t>(count));
  for (std::uint32_t& w : words) {
    line >> std::hex >> w;
  }
  return words;
}

// The FP32 master a BF16 parameter and its remainder stand for (MasterFormat::BFloat16Remainder).
float Reconstruct(std::uint16_t param, std::uint16_t remainder) {
  const std::uint32_t high = (remainder & 0x8000u) != 0 ? static_cast<std::uint16_t>(param - 1u) : param;
  return std::bit_cast<float>((high << 16) | remainder);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(LowBitSteps)

BOOST_AUTO_TEST_CASE(PhiloxMatchesRandom123KnownAnswers) {
  std::ifstream file(MLFW_PHILOX_KNOWN_ANSWERS);
  BOOST_REQUIRE(file.good());
  std::string text;
  int vectors = 0;
  while (std::getline(file, text)) {
    if (text.empty() || text[0] == '#') {
      continue;
    }
    std::istringstream line(text);
    int rounds = 0;
    line >> std::dec >> rounds;
    const std::vector<std::uint32_t> counter = ParseWords(line, 4);
    const std::vector<std::uint32_t> key = ParseWords(line, 2);
    const std::vector<std::uint32_t> expected = ParseWords(line, 4);
    const Philox4x32Block out =
        Philox4x32(Philox4x32Block{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1], rounds);
    for (int k = 0; k < 4; ++k) {
      BOOST_TEST(out.Word[k] == expected[static_cast<std::size_t>(k)]);
    }
    ++vectors;
  }
  BOOST_TEST(vectors == 4);
}

BOOST_AUTO_TEST_CASE(EachStateFormatIsTheFP32StepOfItsDecodedState) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  struct Case {
    StateFormat first, second;
    std::size_t block;
  };
  const std::vector<Case> cases = {{StateFormat::BFloat16, StateFormat::BFloat16, 256},
                                   {StateFormat::Float16, StateFormat::Float16, 256},
                                   {StateFormat::Int8Block, StateFormat::UInt8Block, 256},
                                   {StateFormat::Int8Block, StateFormat::UInt8Block, 32},
                                   {StateFormat::Float8E4M3Block, StateFormat::Float8E4M3Block, 2048},
                                   {StateFormat::Float32, StateFormat::UInt8Block, 128}};
  const mlfw_reference::AdamConfig config{.lr = 3e-3, .weight_decay = 1e-2, .decoupled = true};
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(ToString(c.first) << "/" << ToString(c.second) << " block " << c.block) {
      std::vector<std::vector<float>> ref_w;
      std::vector<TensorPtr> w;
      std::vector<Stored> m;
      std::vector<Stored> v;
      for (const std::size_t n : kLowBitSizes) {
        ref_w.push_back(Random(n, rng, 1.0f));
        w.push_back(FromVector(ref_w.back(), {n}));
        m.push_back(ZeroState(c.first, n, c.block));
        v.push_back(ZeroState(c.second, n, c.block));
      }
      const std::vector<TensorPtr> m_data = Of(m, false);
      const std::vector<TensorPtr> v_data = Of(v, false);
      const std::vector<TensorPtr> m_scales = IsBlockScaled(c.first) ? Of(m, true) : std::vector<TensorPtr>{};
      const std::vector<TensorPtr> v_scales = IsBlockScaled(c.second) ? Of(v, true) : std::vector<TensorPtr>{};
      for (std::int64_t step = 1; step <= 4; ++step) {
        std::vector<std::vector<float>> grads;
        std::vector<TensorPtr> g;
        std::vector<std::vector<float>> ref_m;
        std::vector<std::vector<float>> ref_v;
        for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
          grads.push_back(Random(kLowBitSizes[t], rng, 0.1f));
          g.push_back(FromVector(grads.back(), {kLowBitSizes[t]}));
          ref_m.push_back(Decode(c.first, m[t], c.block));
          ref_v.push_back(Decode(c.second, v[t], c.block));
          // A step with a moment below FP32 takes the IEEE root on every instruction set (the CUDA
          // kernels' arithmetic), not torch's (MKL's on AVX-512, KernelNumerics.hpp's Root()).
          mlfw_reference::AdamStep(ref_w[t], grads[t], ref_m[t], ref_v[t], config, step, Fused(),
                                   mlfw_reference::IeeeRoot);
        }
        const OptimizerStepLists lists{.Parameters = w,
                                       .Gradients = g,
                                       .FirstState = m_data,
                                       .SecondState = v_data,
                                       .FirstStateFormat = c.first,
                                       .SecondStateFormat = c.second,
                                       .FirstStateScales = m_scales,
                                       .SecondStateScales = v_scales,
                                       .StateBlockSize = c.block};
        BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{.LearningRate = config.lr,
                                                                       .WeightDecay = config.weight_decay,
                                                                       .DecoupledWeightDecay = true},
                                                           step)));
        for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
          BOOST_TEST(w[t]->ToFloatVector() == ref_w[t]);  // the FP32 update of the decoded state, to the bit
          CheckEncoding(c.first, m[t], ref_m[t], c.block, false);
          CheckEncoding(c.second, v[t], ref_v[t], c.block, true);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(StochasticRoundingMastersTakeTheIeeeRootAndTheDocumentedPhiloxBits) {
  // BF16 masters rounded stochastically over FP32 moments have no torch counterpart: the update
  // takes the IEEE root on every instruction set, as the CUDA kernels do, and each new master is
  // its FP32 update rounded with the 16 bits of PhiloxElementBits(seed, step, tensor, element).
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  const mlfw_reference::AdamConfig config{.lr = 3e-3, .weight_decay = 1e-2, .decoupled = true};
  constexpr std::uint64_t kSeed = 0x5eed'0000'0000'0042ull;
  std::mt19937 rng(17);
  std::vector<std::vector<float>> ref_w;
  std::vector<std::vector<float>> ref_m;
  std::vector<std::vector<float>> ref_v;
  std::vector<TensorPtr> w;
  std::vector<TensorPtr> m;
  std::vector<TensorPtr> v;
  for (const std::size_t n : kLowBitSizes) {
    w.push_back(FromVector(Random(n, rng, 1.0f), {n}, DataType::BFloat16));
    ref_w.push_back(w.back()->ToFloatVector());
    ref_m.emplace_back(n, 0.0f);
    ref_v.emplace_back(n, 0.0f);
    m.push_back(Zeros({n}));
    v.push_back(Zeros({n}));
  }
  std::size_t differ = 0;
  for (std::int64_t step = 1; step <= 4; ++step) {
    std::vector<TensorPtr> g;
    for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
      std::vector<float> grad = Random(kLowBitSizes[t], rng, 0.1f);
      g.push_back(FromVector(grad, {kLowBitSizes[t]}));
      mlfw_reference::AdamStep(ref_w[t], grad, ref_m[t], ref_v[t], config, step, Fused(), mlfw_reference::IeeeRoot);
      for (std::size_t i = 0; i < ref_w[t].size(); ++i) {
        const std::uint16_t bits = StochasticRoundToBFloat16Bits(
            ref_w[t][i], PhiloxElementBits(kSeed, static_cast<std::uint64_t>(step), static_cast<std::uint32_t>(t), i));
        ref_w[t][i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
      }
    }
    BOOST_TEST(FusedAdamStep(
        {.Parameters = w,
         .Gradients = g,
         .FirstState = m,
         .SecondState = v,
         .Masters = MasterFormat::BFloat16StochasticRounding,
         .RoundingSeed = kSeed,
         .RoundingStep = static_cast<std::uint64_t>(step)},
        AdamStepScalarsFor(
            AdamOptions{.LearningRate = config.lr, .WeightDecay = config.weight_decay, .DecoupledWeightDecay = true},
            step)));
    for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
      const std::vector<float> got = w[t]->ToFloatVector();
      for (std::size_t i = 0; i < got.size(); ++i) {
        differ += std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(ref_w[t][i]) ? 0 : 1;
      }
      BOOST_TEST(m[t]->ToFloatVector() == ref_m[t]);
      BOOST_TEST(v[t]->ToFloatVector() == ref_v[t]);
    }
  }
  BOOST_TEST(differ == 0u);
}

BOOST_AUTO_TEST_CASE(SGDMomentumFormatsAreTheFP32StepOfTheirDecodedState) {
  const mlfw_reference::SGDConfig config{.lr = 0.02, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true};
  std::mt19937 rng(8);
  for (const StateFormat format :
       {StateFormat::BFloat16, StateFormat::Float16, StateFormat::Int8Block, StateFormat::Float8E4M3Block}) {
    BOOST_TEST_CONTEXT(ToString(format)) {
      std::vector<std::vector<float>> ref_w;
      std::vector<TensorPtr> w;
      std::vector<Stored> b;
      for (const std::size_t n : kLowBitSizes) {
        ref_w.push_back(Random(n, rng, 1.0f));
        w.push_back(FromVector(ref_w.back(), {n}));
        b.push_back(ZeroState(format, n, 256));
      }
      const std::vector<TensorPtr> b_data = Of(b, false);
      const std::vector<TensorPtr> b_scales = IsBlockScaled(format) ? Of(b, true) : std::vector<TensorPtr>{};
      for (int step = 1; step <= 3; ++step) {
        std::vector<TensorPtr> g;
        std::vector<std::vector<float>> ref_b;
        for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
          const std::vector<float> grad = Random(kLowBitSizes[t], rng, 0.1f);
          g.push_back(FromVector(grad, {kLowBitSizes[t]}));
          ref_b.push_back(Decode(format, b[t], 256));
          mlfw_reference::SGDStep(ref_w[t], grad, ref_b[t], config, step == 1, Fused());
        }
        const OptimizerStepLists lists{.Parameters = w,
                                       .Gradients = g,
                                       .FirstState = b_data,
                                       .FirstStateFormat = format,
                                       .FirstStateScales = b_scales};
        BOOST_TEST(FusedSGDStep(lists, SGDStepScalarsFor(SGDOptions{.LearningRate = config.lr,
                                                                    .Momentum = config.momentum,
                                                                    .WeightDecay = config.weight_decay,
                                                                    .Nesterov = true},
                                                         step == 1)));
        for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
          BOOST_TEST(w[t]->ToFloatVector() == ref_w[t]);
          CheckEncoding(format, b[t], ref_b[t], 256, false);
        }
      }
    }
  }
}

// The value a Float16 state stores for @p value in a block of largest magnitude @p absmax.
float Float16RoundTrip(float value, float absmax, bool second) {
  using namespace mlframework::detail;
  const float scale = BlockScale(StateFormat::Float16, absmax);
  std::uint16_t code = 0;
  EncodeStateElement(StateFormat::Float16, &code, 0, value, scale, second);
  return DecodeStateElement(StateFormat::Float16, &code, &scale, 1, 0);
}

BOOST_AUTO_TEST_CASE(Float16BlocksKeepElevenBitsBelowTheirLargestValue) {
  // Across FP32's range (FP16's own range, far below it, and near FP32's largest binade): values
  // with 11-bit significands from absmax * 2^-29 to absmax round-trip exactly, and so do the
  // powers of two down to absmax * 2^-39 when absmax is one (FP16's subnormals under the scale);
  // any value keeps FP16's relative error 2^-11 above absmax * 2^-29 and an absolute error of half
  // the smallest code below. Before blocks were scaled, values under 2^-24 were lost.
  std::mt19937 rng(21);
  std::uniform_int_distribution<std::uint32_t> significand(1024, 2047);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::size_t inexact = 0;
  std::size_t outside = 0;
  for (const int e : {-120, -60, -30, -24, -10, 0, 15, 16, 60, 110, 126}) {
    const float absmax = std::ldexp(1.0f, e);
    const float scale = mlframework::detail::BlockScale(StateFormat::Float16, absmax);
    BOOST_TEST(scale == (e - 15 < -126 ? 0x1p-126f : std::ldexp(1.0f, e - 15)));
    for (int j = 0; j <= 39 && e - j >= -149; ++j) {
      const float x = std::ldexp(1.0f, e - j);
      inexact += Float16RoundTrip(x, absmax, false) == x && Float16RoundTrip(-x, absmax, false) == -x ? 0 : 1;
    }
    for (int k = 0; k < 200; ++k) {
      const float x = std::ldexp(static_cast<float>(significand(rng)), e - 11 - k % 29);  // 11 bits, <= absmax
      inexact += Float16RoundTrip(x, absmax, true) == x ? 0 : 1;
      const float y = std::ldexp(unit(rng), e - k % 45);
      const float err = std::fabs(Float16RoundTrip(y, absmax, false) - y);
      outside += err <= (std::fabs(y) >= scale * 0x1p-14f ? std::fabs(y) * 0x1p-11f : scale * 0x1p-25f) ? 0 : 1;
    }
  }
  BOOST_TEST(inexact == 0u);
  BOOST_TEST(outside == 0u);
  // A power of two under absmax * 2^-40 is half the smallest code: 0, or, kept positive, that code.
  BOOST_TEST(Float16RoundTrip(0x1p-41f, 1.0f, false) == 0.0f);
  BOOST_TEST(Float16RoundTrip(0x1p-60f, 1.0f, true) == 0x1p-39f);
  BOOST_TEST(Float16RoundTrip(0x1p-60f, 1.0f, true) > 0.0f);
}

BOOST_AUTO_TEST_CASE(Float16BlocksOfZerosNaNsAndInfinitiesAndTheTopBinade) {
  using mlframework::detail::BlockScale;
  // A largest value whose significand FP16 rounds up to 2^16 takes the binade below: no infinity.
  for (const float absmax : {0x1.ffcp+3f, 0x1.ffep+3f, 0x1.fffp+3f, 0x1.ffffp+3f, 65504.0f, 0x1.fffp+126f}) {
    BOOST_TEST_CONTEXT(absmax) {
      const float back = Float16RoundTrip(absmax, absmax, false);
      BOOST_TEST(std::isfinite(back));
      BOOST_TEST(std::fabs(back - absmax) <= absmax * 0x1p-11f);
    }
  }
  BOOST_TEST(BlockScale(StateFormat::Float16, 0x1.ffcp+3f) == 0x1p-12f);  // 65504 after scaling
  BOOST_TEST(BlockScale(StateFormat::Float16, 0x1.ffep+3f) == 0x1p-11f);  // would round to 2^16
  BOOST_TEST(BlockScale(StateFormat::Float16, 0.0f) == 0x1p-126f);        // a zero block
  BOOST_TEST(BlockScale(StateFormat::Float16, 0x1p-140f) == 0x1p-126f);   // subnormal: 1 / scale finite
  BOOST_TEST(BlockScale(StateFormat::Float16, INFINITY) == 0x1p113f);
  BOOST_TEST(std::isnan(BlockScale(StateFormat::Float16, NAN)));
  // The encode's factor is the reciprocal of every scale the blocks can have, from its exponent.
  std::size_t wrong_factors = 0;
  for (std::uint32_t exponent = 1; exponent <= 240; ++exponent) {
    const float scale = std::bit_cast<float>(exponent << 23);
    wrong_factors += mlframework::detail::Float16CodeFactor(scale) == 1.0f / scale ? 0 : 1;
  }
  BOOST_TEST(wrong_factors == 0u);
  BOOST_TEST(std::isnan(mlframework::detail::Float16CodeFactor(NAN)));
  // Through the fused step on this instruction set: SGD's first step stores the momentum as the
  // gradient, so the blocks are chosen: zeros (signs kept), one with a NaN, one with infinities,
  // one whose tiny positive values a second moment keeps positive.
  constexpr std::size_t kBlock = 32;
  std::vector<float> grad(5 * kBlock + 7, 0.0f);
  for (std::size_t i = 0; i < kBlock; ++i) grad[i] = i % 2 == 0 ? 0.0f : -0.0f;
  for (std::size_t i = kBlock; i < 2 * kBlock; ++i) grad[i] = 0.25f * static_cast<float>(i);
  grad[kBlock + 5] = NAN;
  for (std::size_t i = 2 * kBlock; i < 3 * kBlock; ++i) grad[i] = 1e-3f * static_cast<float>(i % 7) - 2e-3f;
  grad[2 * kBlock + 1] = INFINITY;
  grad[2 * kBlock + 2] = -INFINITY;
  for (std::size_t i = 3 * kBlock; i < grad.size(); ++i) grad[i] = std::ldexp(1.0f + static_cast<float>(i % 5), -50);
  grad[3 * kBlock] = 1.0f;
  const std::size_t n = grad.size();
  const std::vector<TensorPtr> w = {FromVector(std::vector<float>(n, 0.5f), {n})};
  const std::vector<TensorPtr> g = {FromVector(grad, {n})};
  const Stored b = ZeroState(StateFormat::Float16, n, kBlock);
  const std::vector<TensorPtr> b_data = {b.data};
  const std::vector<TensorPtr> b_scales = {b.scales};
  const OptimizerStepLists lists{.Parameters = w,
                                 .Gradients = g,
                                 .FirstState = b_data,
                                 .FirstStateFormat = StateFormat::Float16,
                                 .FirstStateScales = b_scales,
                                 .StateBlockSize = kBlock};
  BOOST_TEST(FusedSGDStep(lists, SGDStepScalarsFor(SGDOptions{.LearningRate = 0.1, .Momentum = 0.9}, true)));
  const std::vector<float> scales = b.scales->ToFloatVector();
  const std::vector<float> got = Decode(StateFormat::Float16, b, kBlock);
  BOOST_TEST(scales[0] == 0x1p-126f);
  BOOST_TEST(std::isnan(scales[1]));
  BOOST_TEST(scales[2] == 0x1p113f);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float x = grad[i];
    const bool ok = i < kBlock       ? got[i] == 0.0f && std::signbit(got[i]) == std::signbit(x)
                    : i < 2 * kBlock ? std::isnan(got[i])
                    : std::isinf(x)  ? got[i] == x
                    : i < 3 * kBlock ? got[i] == 0.0f  // far below the block's scale 2^113
                    : i < 4 * kBlock ? got[i] == Float16RoundTrip(x, 1.0f, false)
                                     : got[i] == x;  // 3-bit values, their block's largest 5 * 2^-50
    wrong += ok ? 0 : 1;
  }
  BOOST_TEST(wrong == 0u);
  // The second moment keeps a positive value positive where its code would round to zero.
  BOOST_TEST(Float16RoundTrip(0x1p-50f, 1.0f, true) == 0x1p-39f);
  BOOST_TEST(Float16RoundTrip(0x1p-50f, 1.0f, false) == 0.0f);
  BOOST_TEST(Float16RoundTrip(-0x1p-50f, 1.0f, true) == 0.0f);
}

// BF16 moments below half the smallest BF16 subnormal (2^-133): the second moment's positive
// values get the smallest code, the first moment's go to zero, in vector lanes and the tail.
// Adam's first step: m = 0.1 g, v = 0.001 g^2 (FP32 subnormals for g = 2^-64).
BOOST_AUTO_TEST_CASE(BFloat16SecondMomentsStayPositiveAndFirstMomentsRoundToZero) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  const std::size_t n = 37;
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    grad[i] = i % 3 == 0 ? 0x1p-64f : i % 3 == 1 ? -0x1p-140f : 0.5f;
  }
  const std::vector<TensorPtr> w = {FromVector(std::vector<float>(n, 1.0f), {n})};
  const std::vector<TensorPtr> g = {FromVector(grad, {n})};
  const Stored m = ZeroState(StateFormat::BFloat16, n, kDefaultStateBlockSize);
  const Stored v = ZeroState(StateFormat::BFloat16, n, kDefaultStateBlockSize);
  const std::vector<TensorPtr> m_data = {m.data};
  const std::vector<TensorPtr> v_data = {v.data};
  const OptimizerStepLists lists{.Parameters = w,
                                 .Gradients = g,
                                 .FirstState = m_data,
                                 .SecondState = v_data,
                                 .FirstStateFormat = StateFormat::BFloat16,
                                 .SecondStateFormat = StateFormat::BFloat16};
  BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, 1)));
  const std::vector<float> got_m = Decode(StateFormat::BFloat16, m, kDefaultStateBlockSize);
  const std::vector<float> got_v = Decode(StateFormat::BFloat16, v, kDefaultStateBlockSize);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool ok = i % 3 == 0   ? got_v[i] == 0x1p-133f && got_m[i] > 0.0f    // v = 2^-138 kept positive
                    : i % 3 == 1 ? got_m[i] == 0.0f && std::signbit(got_m[i])  // m = -0.1 * 2^-140
                                       && got_v[i] == 0.0f                     // v underflowed in FP32
                                 : got_v[i] > 0.0f && got_m[i] > 0.0f;
    wrong += ok ? 0 : 1;
  }
  BOOST_TEST(wrong == 0u);
}

// What docs/optimizers.md says a low-precision second moment cannot do: follow a decay smaller
// than half its rounding step. Element 0 of one block gets 1, then sqrt(1e-3) (v stays at 1e-3,
// the block's largest value); element 1 gets 0.1 once (v = 1e-5), then nothing, so FP32 decays
// it by 0.999 a step. BF16 (half step 0.2% to 0.4%) holds it, the 8-bit and E4M3 blocks keep its
// code under a steady scale, FP16 codes under their power-of-two scale decay with it.
BOOST_AUTO_TEST_CASE(SecondMomentsFollowADecayOnlyAboveHalfTheirRoundingStep) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  const std::size_t n = kDefaultStateBlockSize;
  const std::int64_t steps = 300;
  for (const StateFormat format : {StateFormat::Float32, StateFormat::BFloat16, StateFormat::Float16,
                                   StateFormat::UInt8Block, StateFormat::Float8E4M3Block}) {
    BOOST_TEST_CONTEXT(ToString(format)) {
      const std::vector<TensorPtr> w = {FromVector(std::vector<float>(n, 1.0f), {n})};
      const std::vector<TensorPtr> m = {Zeros({n}, DataType::Float32)};
      const Stored v = ZeroState(format, n, kDefaultStateBlockSize);
      const std::vector<TensorPtr> v_data = {v.data};
      const std::vector<TensorPtr> v_scales =
          IsBlockScaled(format) ? std::vector<TensorPtr>{v.scales} : std::vector<TensorPtr>{};
      float after_first = 0.0f;
      for (std::int64_t step = 1; step <= steps; ++step) {
        std::vector<float> grad(n, 0.0f);
        grad[0] = step == 1 ? 1.0f : std::sqrt(1e-3f);
        grad[1] = step == 1 ? 0.1f : 0.0f;
        const std::vector<TensorPtr> g = {FromVector(grad, {n})};
        const OptimizerStepLists lists{.Parameters = w,
                                       .Gradients = g,
                                       .FirstState = m,
                                       .SecondState = v_data,
                                       .SecondStateFormat = format,
                                       .SecondStateScales = v_scales};
        BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, step)));
        if (step == 1) {
          after_first = Decode(format, v, kDefaultStateBlockSize)[1];
        }
      }
      const std::vector<float> got = Decode(format, v, kDefaultStateBlockSize);
      const double fp32_decay = std::pow(0.999, static_cast<double>(steps - 1));  // 0.74
      BOOST_TEST(std::abs(got[0] - 1e-3) <= 0.07e-3);  // the block's largest value, near 1e-3 in every format
      BOOST_TEST(after_first > 0.9e-5f);
      BOOST_TEST(after_first < 1.2e-5f);
      const double kept = static_cast<double>(got[1]) / static_cast<double>(after_first);
      BOOST_TEST_MESSAGE(ToString(format)
                         << ": v0 " << got[0] << ", v1 after one step " << after_first << ", kept " << kept);
      if (format == StateFormat::Float32) {
        BOOST_TEST(std::abs(kept - fp32_decay) < 1e-4);
      } else if (format == StateFormat::Float16) {
        // Each decrement rounds to a multiple of the code spacing: a little slower than FP32.
        BOOST_TEST(kept < 0.8);
        BOOST_TEST(kept > fp32_decay);
      } else {
        BOOST_TEST(got[1] == after_first);  // not one step of decay in 300
      }
    }
  }
}

// Blocks holding a NaN or an infinity store the same bits on every instruction set, and the
// bits the shared element codes (core/StateCodes.hpp, which the CUDA kernels run) write: NaNs of
// either sign and any payload, in vector lanes and in a short last block, through Adam's first
// step (m = 0.1 g, v = 0.001 g^2: the signs and payloads of g carry into both). A NaN block: the
// quiet NaN 0x7fc00000 as its scale and, for FP16 and FP8, the positive quiet NaN code in every
// element (0x7e00, 0x7f), whatever the NaNs' signs and whichever operand the vector product took
// its NaN from. A block with an infinity (infinite scale): FP8 stores an infinity's element,
// inf * 0, as the positive NaN code too.
BOOST_AUTO_TEST_CASE(NaNAndInfinityBlocksStoreTheCanonicalNaNOnEveryInstructionSet) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  constexpr std::size_t kBlock = 32;
  constexpr std::size_t kN = 6 * kBlock + 7;
  std::vector<float> grad(kN);
  for (std::size_t i = 0; i < kN; ++i) {
    grad[i] = (i % 3 == 0 ? -0.5f : 0.5f) + 0.01f * static_cast<float>(i % 11);
  }
  const auto nan = [](std::uint32_t bits) { return std::bit_cast<float>(bits); };
  grad[5] = nan(0xffc00000u);   // block 0: the default NaN of x86 arithmetic (negative)
  grad[20] = nan(0x7fc12345u);  // and a positive one with a payload
  grad[9] = 0.0f;
  grad[kBlock + 14] = nan(0xffd00001u);  // block 1: a negative NaN with a payload
  grad[2 * kBlock + 6] = INFINITY;       // block 2: both infinities
  grad[2 * kBlock + 13] = -INFINITY;
  grad[3 * kBlock + 31] = -INFINITY;        // block 3: one, in the last lane
  grad[5 * kBlock] = nan(0x7f800001u);      // block 5: a signalling NaN in the first lane
  grad[6 * kBlock + 4] = nan(0xfff00000u);  // the short last block (the scalar tails)
  struct Kind {
    bool nan, inf;
  };
  std::vector<Kind> kinds;
  for (std::size_t b = 0; b * kBlock < kN; ++b) {
    Kind k{false, false};
    for (std::size_t i = b * kBlock; i < std::min(kN, (b + 1) * kBlock); ++i) {
      k.nan = k.nan || std::isnan(grad[i]);
      k.inf = k.inf || std::isinf(grad[i]);
    }
    kinds.push_back(k);
  }
  // The code of element i of a non-finite block of @p format (second: the second moment).
  const auto expected_code = [&](StateFormat format, bool second, std::size_t i) -> std::uint32_t {
    const float g = grad[i];
    const Kind k = kinds[i / kBlock];
    const bool kept = second && std::isfinite(g) && g != 0.0f;  // a positive v kept from code 0
    const bool negative = !second && std::signbit(g);
    switch (format) {
      case StateFormat::Float16:
        if (k.nan) return 0x7e00u;
        if (std::isinf(g)) return negative ? 0xfc00u : 0x7c00u;
        return kept ? 1u : negative ? 0x8000u : 0u;  // below FP16 at the scale 2^113
      case StateFormat::Float8E4M3Block:
        if (k.nan || std::isinf(g)) return 0x7fu;
        return kept ? 1u : negative ? 0x80u : 0u;  // value * 0 (the factor of an infinite scale)
      default:  // a NaN quotient or value / inf: code 0, a positive v (inf included) kept at 1
        return second && !std::isnan(g) && g != 0.0f ? 1u : 0u;
    }
  };
  const std::vector<StateFormat> firsts = {StateFormat::Float16, StateFormat::Int8Block, StateFormat::Float8E4M3Block};
  const std::vector<StateFormat> seconds = {StateFormat::Float16, StateFormat::UInt8Block,
                                            StateFormat::Float8E4M3Block};
  for (std::size_t c = 0; c < firsts.size(); ++c) {
    const StateFormat first = firsts[c];
    const StateFormat second = seconds[c];
    BOOST_TEST_CONTEXT(ToString(first) << "/" << ToString(second)) {
      const std::vector<TensorPtr> w = {FromVector(std::vector<float>(kN, 0.5f), {kN})};
      const std::vector<TensorPtr> g = {FromVector(grad, {kN})};
      const Stored m = ZeroState(first, kN, kBlock);
      const Stored v = ZeroState(second, kN, kBlock);
      const std::vector<TensorPtr> m_data = {m.data};
      const std::vector<TensorPtr> v_data = {v.data};
      const std::vector<TensorPtr> m_scales = {m.scales};
      const std::vector<TensorPtr> v_scales = {v.scales};
      const OptimizerStepLists lists{.Parameters = w,
                                     .Gradients = g,
                                     .FirstState = m_data,
                                     .SecondState = v_data,
                                     .FirstStateFormat = first,
                                     .SecondStateFormat = second,
                                     .FirstStateScales = m_scales,
                                     .SecondStateScales = v_scales,
                                     .StateBlockSize = kBlock};
      BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, 1)));
      for (const bool is_second : {false, true}) {
        const StateFormat format = is_second ? second : first;
        const Stored& s = is_second ? v : m;
        const std::vector<float> scales = s.scales->ToFloatVector();
        const std::vector<std::uint8_t> bytes = Bytes(s.data);
        const std::vector<std::uint16_t> halves = Halves(s.data);
        for (std::size_t b = 0; b < kinds.size(); ++b) {
          if (!kinds[b].nan && !kinds[b].inf) continue;
          BOOST_TEST_CONTEXT((is_second ? "second" : "first") << " state, block " << b) {
            const std::uint32_t infinite_scale = format == StateFormat::Float16 ? 0x78000000u : 0x7f800000u;
            BOOST_TEST(std::bit_cast<std::uint32_t>(scales[b]) == (kinds[b].nan ? 0x7fc00000u : infinite_scale),
                       std::hex << "scale bits 0x" << std::bit_cast<std::uint32_t>(scales[b]));
            for (std::size_t i = b * kBlock; i < std::min(kN, (b + 1) * kBlock); ++i) {
              const std::uint32_t got = format == StateFormat::Float16 ? halves[i] : bytes[i];
              BOOST_TEST(got == expected_code(format, is_second, i),
                         std::hex << "element " << std::dec << i << ": code 0x" << std::hex << got);
            }
          }
        }
      }
    }
  }
}

// RoundHalfEven(value * (1 / scale)) through volatiles (no contraction, no folding): the linear
// code of a value of a block with a normal reciprocal (LinearBlockCode()).
float RoundedProduct(float value, float scale) {
  volatile float reciprocal = 1.0f / scale;
  volatile float product = value * reciprocal;
  return mlframework::detail::RoundHalfEven(product);
}

float RoundedQuotient(float value, float scale) {
  volatile float quotient = value / scale;
  return mlframework::detail::RoundHalfEven(quotient);
}

BOOST_AUTO_TEST_CASE(EveryFloat8CodeDecodesToItsValueAndNaNCodesMakeANaNBlock) {
  // An FP8 momentum holding every E4M3FN code in one block of finite scale, NaN codes in the
  // other blocks (the vector loop's and the scalar tail's): SGD with momentum 0.5 and zero
  // gradients halves each value exactly, so each finite code comes back unchanged (-0 as +0)
  // under half the scale, and each block holding a NaN code becomes a NaN block. A wrong decode of
  // any code, NaN included, changes the codes.
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  constexpr std::size_t kBlock = 256;
  constexpr std::size_t kN = 2 * kBlock + 7;
  const float scale = 0.0078125f * 3.0f;
  std::vector<std::uint8_t> codes;
  for (std::size_t i = 0; i < 256; ++i) {
    const auto code = static_cast<std::uint8_t>((i * 37 + 11) % 256);  // each code once, shuffled
    if ((code & 0x7fu) != 0x7fu) {
      codes.push_back(code);
    }
  }
  codes.push_back(0x7eu);  // 448: the block's largest magnitude, twice
  codes.push_back(0x01u);
  for (std::size_t i = kBlock; i < kN; ++i) {
    codes.push_back(static_cast<std::uint8_t>(0x38 + i % 16));
  }
  codes[kBlock + 100] = 0xffu;    // a negative NaN code in block 1
  codes[2 * kBlock + 5] = 0x7fu;  // the short last block: the scalar tail
  const Stored momentum = ZeroState(StateFormat::Float8E4M3Block, kN, kBlock);
  std::memcpy(momentum.data->MutableHostBytes().data(), codes.data(), kN);
  const std::vector<float> first_scales(3, scale);
  std::memcpy(momentum.scales->MutableHostBytes().data(), first_scales.data(), sizeof(float) * 3);
  const std::vector<TensorPtr> w = {FromVector(std::vector<float>(kN, 1.0f), {kN})};
  const std::vector<TensorPtr> g = {FromVector(std::vector<float>(kN, 0.0f), {kN})};
  const std::vector<TensorPtr> codes_list = {momentum.data};
  const std::vector<TensorPtr> scales_list = {momentum.scales};
  const OptimizerStepLists lists{.Parameters = w,
                                 .Gradients = g,
                                 .FirstState = codes_list,
                                 .FirstStateFormat = StateFormat::Float8E4M3Block,
                                 .FirstStateScales = scales_list,
                                 .StateBlockSize = kBlock};
  BOOST_TEST(FusedSGDStep(lists, SGDStepScalarsFor(SGDOptions{.LearningRate = 0.01, .Momentum = 0.5}, false)));
  const std::vector<std::uint8_t> after = Bytes(momentum.data);
  const std::vector<float> scales = momentum.scales->ToFloatVector();
  BOOST_TEST(scales[0] == scale / 2.0f);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    changed += after[i] != (codes[i] == 0x80u ? 0u : codes[i]) ? 1 : 0;
  }
  BOOST_TEST(changed == 0u);
  for (const std::size_t b : {std::size_t{1}, std::size_t{2}}) {
    BOOST_TEST(std::bit_cast<std::uint32_t>(scales[b]) == 0x7fc00000u);
    std::size_t not_nan = 0;
    for (std::size_t i = b * kBlock; i < std::min(kN, (b + 1) * kBlock); ++i) {
      not_nan += after[i] != 0x7fu ? 1 : 0;
    }
    BOOST_TEST(not_nan == 0u);
  }
}

BOOST_AUTO_TEST_CASE(Int8CodesOfValuesNearTiesAreRoundedProducts) {
  // The first SGD step stores the momentum d = g exactly, so each block's values are chosen: its
  // first one sets absmax = 127 * scale exactly (scale with few significant bits, its reciprocal
  // inexact), the others lie a few ulp around (k + 1/2) * scale where the product with the
  // reciprocal rounds to another code than the quotient. Every code must be the rounded product
  // (LinearBlockCode(), PyTorch's quantize_per_tensor), on every instruction set: a kernel that
  // divides, in the vector body or the scalar tail, gives the quotient's code there.
  constexpr std::size_t kBlock = 256;
  constexpr std::size_t kBlocks = 12;
  const std::size_t n = kBlock * kBlocks + 37;  // a partial last block: the scalar tail too
  std::vector<float> grad;
  std::vector<float> block_scales;
  std::size_t disagreeing = 0;
  std::uint32_t mantissa = 3;
  for (std::size_t b = 0; b <= kBlocks; ++b) {
    const std::size_t end = std::min(n, (b + 1) * kBlock);
    float scale = 0.0f;
    std::vector<float> block;
    // Scales 3, 5, 7, ... times 2^-12 until one gives values that disagree (most do).
    while (block.size() < 8 && mantissa < 4096) {
      block.clear();
      scale = std::ldexp(static_cast<float>(mantissa), -12 - static_cast<int>(b % 5));
      mantissa += 2;
      for (int k = 60; k <= 126 && block.size() + 1 < end - b * kBlock; ++k) {
        for (const float half : {static_cast<float>(k) + 0.5f, -static_cast<float>(k) - 0.5f}) {
          float x = half * scale;
          for (int ulp = 0; ulp < 3; ++ulp, x = std::nextafter(x, 1e30f)) {
            if (RoundedProduct(x, scale) != RoundedQuotient(x, scale)) {
              block.push_back(x);
            }
          }
        }
      }
    }
    disagreeing += block.size();
    block_scales.push_back(scale);
    grad.push_back(127.0f * scale * (b % 2 == 0 ? 1.0f : -1.0f));  // the block's absmax, either sign
    for (std::size_t i = 1; b * kBlock + i < end; ++i) {
      grad.push_back(block[i % block.size()]);
    }
  }
  const std::vector<TensorPtr> w = {FromVector(std::vector<float>(n, 1.0f), {n})};
  const std::vector<TensorPtr> g = {FromVector(grad, {n})};
  const Stored momentum = ZeroState(StateFormat::Int8Block, n, kBlock);
  const std::vector<TensorPtr> codes_list = {momentum.data};
  const std::vector<TensorPtr> scales_list = {momentum.scales};
  const OptimizerStepLists lists{.Parameters = w,
                                 .Gradients = g,
                                 .FirstState = codes_list,
                                 .FirstStateFormat = StateFormat::Int8Block,
                                 .FirstStateScales = scales_list,
                                 .StateBlockSize = kBlock};
  BOOST_TEST(FusedSGDStep(lists, SGDStepScalarsFor(SGDOptions{.LearningRate = 0.01, .Momentum = 0.9}, true)));
  const std::vector<float> stored_scales = momentum.scales->ToFloatVector();
  const std::vector<std::uint8_t> codes = Bytes(momentum.data);
  BOOST_TEST(stored_scales == block_scales);
  std::size_t wrong_codes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto expected =
        static_cast<std::uint8_t>(static_cast<std::int32_t>(RoundedProduct(grad[i], block_scales[i / kBlock])));
    wrong_codes += codes[i] != expected ? 1 : 0;
  }
  BOOST_TEST(disagreeing > kBlocks * 8);  // values where the quotient rounds otherwise
  BOOST_TEST(wrong_codes == 0u);
}

BOOST_AUTO_TEST_CASE(LinearBlockCodesAreRoundedProductsWithinHalfACodeOfTheQuotient) {
  // The CPU loops and the CUDA kernels encode the 8-bit blocks with LinearBlockCode()
  // (core/StateCodes.hpp). For Int8 and UInt8 blocks (positive and negative values, the second
  // moment's keep-positive rule), scales with few significant bits and random ones, the values a
  // few ulp around each (k + 1/2) * scale, the block's absmax and random values of the block:
  // each code is the product with the block's reciprocal rounded to the nearest integer (ties to
  // even), clamped to the format's range, lies within 1/2 + 2^-15 of the exact quotient (in
  // double), and equals LinearCode()'s division wherever the quotient is not within 2^-15 of a
  // half-integer. Blocks whose scale has no normal reciprocal take LinearCode()'s division.
  namespace codes = mlframework::detail;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::size_t checked = 0;
  std::size_t not_product = 0;
  std::size_t outside = 0;
  std::size_t unlike_division = 0;
  std::size_t near_ties = 0;
  for (const float code_max : {127.0f, 255.0f}) {
    const StateFormat format = code_max == 127.0f ? StateFormat::Int8Block : StateFormat::UInt8Block;
    for (int trial = 0; trial < 400; ++trial) {
      const float absmax = trial % 2 == 0 ? std::ldexp(static_cast<float>(3 + 2 * trial), -12 - trial % 7) * code_max
                                          : std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), trial % 40 - 20);
      const float scale = codes::BlockScale(format, absmax);
      const float reciprocal = codes::BlockCodeFactor(format, scale);
      std::vector<float> values = {absmax, -absmax, 0.0f, -0.0f, std::ldexp(1.0f, -149)};
      for (int k = 0; k < static_cast<int>(code_max); k += 1 + trial % 3) {
        float x = (static_cast<float>(k) + 0.5f) * scale;
        for (int ulp = 0; ulp < 4; ++ulp, x = std::nextafter(x, 1e30f)) {
          values.push_back(x);
          values.push_back(-x);
        }
      }
      for (int r = 0; r < 64; ++r) {
        values.push_back(unit(rng) * absmax);
      }
      for (const float x : values) {
        if (!(std::fabs(x) <= absmax)) continue;  // the block's values only
        const double quotient = static_cast<double>(x) / static_cast<double>(scale);
        const double low = code_max == 127.0f ? -127.0 : 0.0;
        const bool near_tie = std::fabs(std::fabs(quotient - std::floor(quotient)) - 0.5) < 0x1p-15;
        near_ties += near_tie ? 1 : 0;
        for (const bool keep : {false, true}) {
          const std::uint8_t got = codes::LinearBlockCode(x, scale, reciprocal, code_max, keep);
          float product = std::max(RoundedProduct(x, scale), static_cast<float>(low));
          if (keep && x > 0.0f && product == 0.0f) product = 1.0f;
          not_product += got != static_cast<std::uint8_t>(static_cast<std::int32_t>(product)) ? 1 : 0;
          const double value = code_max == 127.0f ? static_cast<std::int8_t>(got) : got;
          const bool kept = keep && x > 0.0f && got == 1 && quotient < 0.5;
          outside += kept || std::fabs(value - std::max(quotient, low)) <= 0.5 + 0x1p-15 ? 0 : 1;
          unlike_division += !near_tie && got != codes::LinearCode(x, scale, code_max, keep) ? 1 : 0;
          ++checked;
        }
      }
    }
  }
  BOOST_TEST_MESSAGE(checked << " codes, " << near_ties << " values within 2^-15 of a tie");
  BOOST_TEST(near_ties > 100u);
  BOOST_TEST(not_product == 0u);
  BOOST_TEST(outside == 0u);
  BOOST_TEST(unlike_division == 0u);
  // A scale below 2^-126 (the block's values under 127 * 2^-126) has no normal reciprocal: the
  // codes divide.
  const float tiny_scale = 0x1p-130f;
  for (const float x : {0x1p-130f * 3.4f, -0x1p-130f * 100.5f, 0x1p-130f * 126.9f}) {
    BOOST_TEST(codes::LinearBlockCode(x, tiny_scale, codes::BlockCodeFactor(StateFormat::Int8Block, tiny_scale), 127.0f,
                                      false) == codes::LinearCode(x, tiny_scale, 127.0f, false));
  }
}

BOOST_AUTO_TEST_CASE(StochasticRoundingIsUnbiasedReproducibleAndThePhiloxCounter) {
  // SGD without momentum from BF16 weights 1.0: every element's FP32 update is 1 - 0.01 * g,
  // between two BF16 neighbours; the stochastic rounding picks one of them.
  constexpr std::size_t kN = 1 << 16;
  const float g_value = 0.123f;
  const float exact = 1.0f + (-0.01f * g_value);  // the kernels' fma(d, -lr, w) with w = 1
  const float exact_fused = std::fma(g_value, -0.01f, 1.0f);
  const float target = Fused() ? exact_fused : exact;
  const std::vector<TensorPtr> g = {FromVector(std::vector<float>(kN, g_value), {kN})};
  auto run = [&](std::uint64_t seed, std::uint64_t step) {
    const std::vector<TensorPtr> w = {FromVector(std::vector<float>(kN, 1.0f), {kN}, DataType::BFloat16)};
    const OptimizerStepLists lists{.Parameters = w,
                                   .Gradients = g,
                                   .Masters = MasterFormat::BFloat16StochasticRounding,
                                   .RoundingSeed = seed,
                                   .RoundingStep = step};
    BOOST_TEST(FusedSGDStep(lists, SGDStepScalarsFor(SGDOptions{.LearningRate = 0.01}, true)));
    return Halves(w[0]);
  };
  const std::vector<std::uint16_t> bits = run(0x1234'5678'9abc'def0ull, 7);
  const std::uint16_t below = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(target) >> 16);
  const float lo = std::bit_cast<float>(static_cast<std::uint32_t>(below) << 16);
  const float hi = std::bit_cast<float>(static_cast<std::uint32_t>(below + 1) << 16);
  double sum = 0.0;
  std::size_t others = 0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < kN; ++i) {
    const float value = std::bit_cast<float>(static_cast<std::uint32_t>(bits[i]) << 16);
    others += (value == lo || value == hi) ? 0 : 1;
    sum += value;
    // The documented counter: Philox-4x32-10 of (i / 8, tensor 0, step), key the seed, 16-bit half i % 8.
    const std::uint16_t expected =
        StochasticRoundToBFloat16Bits(target, PhiloxElementBits(0x1234'5678'9abc'def0ull, 7, 0, i));
    mismatches += bits[i] == expected ? 0 : 1;
  }
  BOOST_TEST(others == 0u);
  BOOST_TEST(mismatches == 0u);
  const double p = (static_cast<double>(target) - lo) / (static_cast<double>(hi) - lo);
  const double sigma = (static_cast<double>(hi) - lo) * std::sqrt(p * (1.0 - p) / static_cast<double>(kN));
  const double mean = sum / static_cast<double>(kN);
  BOOST_TEST_MESSAGE("rounding up with probability " << p << ", mean off by " << (mean - target) / sigma << " sigma");
  BOOST_TEST(std::fabs(mean - static_cast<double>(target)) <= 5.0 * sigma);
  BOOST_TEST(run(0x1234'5678'9abc'def0ull, 7) == bits);  // a rerun: the same bits
  BOOST_TEST(run(0x1234'5678'9abc'def1ull, 7) != bits);  // another seed
  BOOST_TEST(run(0x1234'5678'9abc'def0ull, 8) != bits);  // another step
}

BOOST_AUTO_TEST_CASE(StochasticRoundingKeepsInfinitiesAndNaNsAndRoundsPastTheLargestBFloat16) {
  // SGD without momentum from BF16 weights: gradients of infinity make infinite weights, NaN
  // gradients whose payload is all ones NaN weights (adding random bits to those would carry
  // into the sign or wrap them to zero), and weights of the largest BF16 value round to it or up
  // to infinity. 1000 elements: the vector loops and the one-by-one tail alike.
  constexpr std::size_t kN = 1000;
  const float largest = std::bit_cast<float>(std::uint32_t{0x7f7f0000u});
  const float nan_plus = std::bit_cast<float>(std::uint32_t{0x7fffffffu});
  const float nan_minus = std::bit_cast<float>(std::uint32_t{0xffffffffu});
  const float inf = std::numeric_limits<float>::infinity();
  const std::array<float, 4> special = {nan_plus, nan_minus, inf, -inf};
  std::mt19937 rng(41);
  std::vector<float> init(kN, 1.0f);
  std::vector<float> grad = Random(kN, rng, 1.0f);
  for (std::size_t i = 0; i < kN; ++i) {
    if (i % 7 < 4) {
      grad[i] = special[i % 7];
    } else if (i % 7 == 4) {
      init[i] = largest;
      grad[i] = -5e37f * static_cast<float>(i % 3);
    }
  }
  const std::vector<TensorPtr> w = {FromVector(init, {kN}, DataType::BFloat16)};
  const std::vector<TensorPtr> g = {FromVector(grad, {kN})};
  BOOST_TEST(FusedSGDStep({.Parameters = w,
                           .Gradients = g,
                           .Masters = MasterFormat::BFloat16StochasticRounding,
                           .RoundingSeed = 5,
                           .RoundingStep = 2},
                          SGDStepScalarsFor(SGDOptions{.LearningRate = 0.01}, true)));
  const std::vector<std::uint16_t> bits = Halves(w[0]);
  std::size_t wrong = 0;
  std::size_t rounded_to_infinity = 0;
  for (std::size_t i = 0; i < kN; ++i) {
    if (std::isnan(grad[i])) {
      wrong += (bits[i] & 0x7fffu) == 0x7fffu ? 0 : 1;  // the payload's NaN, quiet
      continue;
    }
    const float target = Fused() ? std::fma(grad[i], -0.01f, init[i]) : init[i] + (-0.01f * grad[i]);
    wrong += bits[i] == StochasticRoundToBFloat16Bits(target, PhiloxElementBits(5, 2, 0, i)) ? 0 : 1;
    rounded_to_infinity += i % 7 == 4 && bits[i] == 0x7f80u ? 1 : 0;
  }
  BOOST_TEST(wrong == 0u);
  BOOST_TEST(rounded_to_infinity > 0u);  // the top of the range rounds up too
  BOOST_TEST(bits[2] == 0xff80u);        // 1 - 0.01 * infinity
  BOOST_TEST(bits[3] == 0x7f80u);
}

BOOST_AUTO_TEST_CASE(ElementOffsetsDrawTheBitsOfTheSameRangeOfTheWholeTensor) {
  // AdamW with BF16 masters rounded stochastically and BF16 moments (element by element, like
  // the masters): a tensor of 70001 elements (over two chunks of 32768) stepped whole, and cut
  // at offsets that are not multiples of eight (nor of the SIMD widths, the tile or the chunk),
  // each range stepped as a tensor of its own with its first element's index as its offset. The
  // ranges sit at index 1 of their lists, as the whole tensor does: every step, every range
  // has the whole tensor's bits.
  constexpr std::size_t kN = 70001;
  const std::vector<std::size_t> cuts = {0, 1, 6, 37, 2053, 32770, 40001, 65541, kN};
  std::mt19937 rng(23);
  const std::vector<float> init = Random(kN, rng, 1.0f);
  const AdamOptions options = AdamOptions::AdamW(1e-2, 1e-2);
  auto slice = [](const std::vector<float>& values, std::size_t begin, std::size_t n) {
    return std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(begin),
                              values.begin() + static_cast<std::ptrdiff_t>(begin + n));
  };
  auto bf16 = [](const std::vector<float>& values) { return FromVector(values, {values.size()}, DataType::BFloat16); };
  const std::vector<float> small_init = Random(5, rng, 1.0f);
  // The lists of one tensor at index 1, after a small one at index 0.
  struct Step {
    std::vector<TensorPtr> w, m, v;
    std::vector<std::uint64_t> offsets;
  };
  auto make = [&](std::size_t begin, std::size_t end) {
    const std::size_t n = end - begin;
    return Step{{bf16(small_init), bf16(slice(init, begin, n))},
                {Zeros({5}, DataType::BFloat16), Zeros({n}, DataType::BFloat16)},
                {Zeros({5}, DataType::BFloat16), Zeros({n}, DataType::BFloat16)},
                {0, begin}};
  };
  Step whole = make(0, kN);
  whole.offsets.clear();  // no offsets: all zero
  std::vector<Step> ranges;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) ranges.push_back(make(cuts[c], cuts[c + 1]));
  for (std::int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> gradient = Random(kN, rng, 0.1f);
    const std::vector<float> small_gradient = Random(5, rng, 0.1f);
    auto run = [&](Step& s, std::size_t begin) {
      const std::size_t n = s.w[1]->Size();
      const std::vector<TensorPtr> g = {FromVector(small_gradient, {5}), FromVector(slice(gradient, begin, n), {n})};
      BOOST_TEST(FusedAdamStep({.Parameters = s.w,
                                .Gradients = g,
                                .FirstState = s.m,
                                .SecondState = s.v,
                                .FirstStateFormat = StateFormat::BFloat16,
                                .SecondStateFormat = StateFormat::BFloat16,
                                .Masters = MasterFormat::BFloat16StochasticRounding,
                                .RoundingSeed = 0xfeed'beef'0bad'cafeull,
                                .RoundingStep = static_cast<std::uint64_t>(step),
                                .ElementOffsets = s.offsets},
                               AdamStepScalarsFor(options, step)));
    };
    run(whole, 0);
    const std::vector<std::uint16_t> want = Halves(whole.w[1]);
    for (std::size_t c = 0; c < ranges.size(); ++c) {
      run(ranges[c], cuts[c]);
      const std::vector<std::uint16_t> got = Halves(ranges[c].w[1]);
      BOOST_TEST_CONTEXT("step " << step << ", elements " << cuts[c] << " to " << cuts[c + 1]) {
        BOOST_TEST(std::equal(got.begin(), got.end(), want.begin() + static_cast<std::ptrdiff_t>(cuts[c])));
        BOOST_TEST(Halves(ranges[c].w[0]) == Halves(whole.w[0]));  // index 0: offset 0 either way
      }
    }
  }
  // The documented counter at an offset just below 2^35, so that the counter's low word wraps
  // into its high word inside the vector loops: element i draws
  // PhiloxElementBits(seed, step, tensor, offset + i).
  constexpr std::size_t kM = 1000;
  const std::uint64_t offset = (std::uint64_t{1} << 35) - 101;  // counter 2^32 - 13, half 3
  const std::vector<TensorPtr> w = {FromVector(std::vector<float>(kM, 1.0f), {kM}, DataType::BFloat16)};
  const std::vector<TensorPtr> g = {FromVector(std::vector<float>(kM, 0.123f), {kM})};
  const std::vector<std::uint64_t> offsets = {offset};
  BOOST_TEST(FusedSGDStep({.Parameters = w,
                           .Gradients = g,
                           .Masters = MasterFormat::BFloat16StochasticRounding,
                           .RoundingSeed = 99,
                           .RoundingStep = 4,
                           .ElementOffsets = offsets},
                          SGDStepScalarsFor(SGDOptions{.LearningRate = 0.01}, true)));
  const float target = Fused() ? std::fma(0.123f, -0.01f, 1.0f) : 1.0f + (-0.01f * 0.123f);
  const std::vector<std::uint16_t> bits = Halves(w[0]);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < kM; ++i) {
    mismatches += bits[i] == StochasticRoundToBFloat16Bits(target, PhiloxElementBits(99, 4, 0, offset + i)) ? 0 : 1;
  }
  BOOST_TEST(mismatches == 0u);
}

BOOST_AUTO_TEST_CASE(OptimizersStepShardsWithTheirElementOffsetsAsTheWholeTensor) {
  // Adam and SGD (with momentum: its first step is a list of its own) over a BF16 parameter
  // rounded stochastically, and over the same values cut in two (at an index that is not a
  // multiple of eight) with SetElementOffsets() giving the second part's first index: the parts
  // stay the whole parameter's bits, as FSDP's shards do at any world size.
  constexpr std::size_t kN = 3001;
  constexpr std::size_t kCut = 1234 + 3;
  std::mt19937 rng(31);
  const std::vector<float> init = Random(kN, rng, 1.0f);
  const std::vector<float> other_init = Random(9, rng, 1.0f);
  auto part = [](const std::vector<float>& values, std::size_t begin, std::size_t end) {
    const std::vector<float> range(values.begin() + static_cast<std::ptrdiff_t>(begin),
                                   values.begin() + static_cast<std::ptrdiff_t>(end));
    return FromVector(range, {end - begin}, DataType::BFloat16);
  };
  // "a" (the whole tensor or a part) and "b" (9 elements, offset 0 in both runs).
  auto parameters = [&](std::size_t begin, std::size_t end) {
    return GradientMap{{"a", part(init, begin, end)}, {"b", part(other_init, 0, 9)}};
  };
  auto check = [&](auto make) {
    const GradientMap whole_parameters = parameters(0, kN);
    const GradientMap low_parameters = parameters(0, kCut);
    const GradientMap high_parameters = parameters(kCut, kN);
    const auto whole = make(whole_parameters);
    const auto low = make(low_parameters);
    const auto high = make(high_parameters);
    high->SetElementOffsets({{"a", kCut}});
    auto step_all = [&] {
      const std::vector<float> g = Random(kN, rng, 0.1f);
      const std::vector<float> g_other = Random(9, rng, 0.1f);
      auto gradients = [&](std::size_t begin, std::size_t end) {
        return GradientMap{{"a", part(g, begin, end)}, {"b", part(g_other, 0, 9)}};
      };
      whole->SetGradients(gradients(0, kN));
      low->SetGradients(gradients(0, kCut));
      high->SetGradients(gradients(kCut, kN));
      whole->Step();
      low->Step();
      high->Step();
      std::vector<std::uint16_t> joined = Halves(low_parameters.at("a"));
      const std::vector<std::uint16_t> upper = Halves(high_parameters.at("a"));
      joined.insert(joined.end(), upper.begin(), upper.end());
      BOOST_TEST(joined == Halves(whole_parameters.at("a")));
      BOOST_TEST(Halves(high_parameters.at("b")) == Halves(whole_parameters.at("b")));
    };
    for (int step = 0; step < 3; ++step) step_all();
    // Refused by name: an unknown parameter (after a good entry), an offset whose indices pass
    // 2^64 - 1. The offsets stay as they were: the next step is still the whole tensor's.
    for (const std::map<std::string, std::uint64_t>& bad :
         {std::map<std::string, std::uint64_t>{{"a", 0}, {"c", 1}},
          std::map<std::string, std::uint64_t>{{"a", UINT64_MAX - 100}}}) {
      try {
        high->SetElementOffsets(bad);
        BOOST_ERROR("no ArgumentError for bad offsets");
      } catch (const ArgumentError& e) {
        BOOST_TEST(e.Parameter() == "offsets");
      }
    }
    step_all();
  };
  check([](const GradientMap& p) {
    AdamOptions options = AdamOptions::AdamW(1e-2, 1e-2);
    options.Masters = MasterFormat::BFloat16StochasticRounding;
    options.RoundingSeed = 5;
    return std::make_unique<Adam>(p, options);
  });
  check([](const GradientMap& p) {
    return std::make_unique<SGD>(p, SGDOptions{.LearningRate = 0.05,
                                               .Momentum = 0.9,
                                               .Masters = MasterFormat::BFloat16StochasticRounding,
                                               .RoundingSeed = 6});
  });
}

BOOST_AUTO_TEST_CASE(RemainderMastersAreBitIdenticalToFP32Masters) {
  std::mt19937 rng(11);
  const AdamOptions options{.LearningRate = 1e-2, .WeightDecay = 1e-2, .DecoupledWeightDecay = true};
  std::vector<TensorPtr> w32;
  std::vector<TensorPtr> m32;
  std::vector<TensorPtr> v32;
  std::vector<TensorPtr> w16;
  std::vector<TensorPtr> rem;
  std::vector<TensorPtr> m16;
  std::vector<TensorPtr> v16;
  for (const std::size_t n : kLowBitSizes) {
    const std::vector<float> init = Random(n, rng, 1.0f);
    w32.push_back(FromVector(init, {n}));
    // The split of the FP32 master: the BF16 parameter rounded up when the low half's top bit is set.
    std::vector<std::uint16_t> params(n);
    std::vector<std::uint16_t> low(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto bits = std::bit_cast<std::uint32_t>(init[i]);
      low[i] = static_cast<std::uint16_t>(bits);
      params[i] = static_cast<std::uint16_t>((bits >> 16) + ((bits & 0x8000u) != 0 ? 1u : 0u));
    }
    w16.push_back(Zeros({n}, DataType::BFloat16));
    rem.push_back(Zeros({n}, DataType::BFloat16));
    std::memcpy(w16.back()->MutableHostBytes().data(), params.data(), 2 * n);
    std::memcpy(rem.back()->MutableHostBytes().data(), low.data(), 2 * n);
    for (auto* list : {&m32, &v32, &m16, &v16}) {
      list->push_back(Zeros({n}));
    }
  }
  for (std::int64_t step = 1; step <= 20; ++step) {
    std::vector<TensorPtr> g;
    for (const std::size_t n : kLowBitSizes) {
      g.push_back(FromVector(Random(n, rng, 0.1f), {n}));
    }
    const AdamStepScalars scalars = AdamStepScalarsFor(options, step);
    BOOST_TEST(FusedAdamStep({.Parameters = w32, .Gradients = g, .FirstState = m32, .SecondState = v32}, scalars));
    BOOST_TEST(FusedAdamStep({.Parameters = w16,
                              .Gradients = g,
                              .FirstState = m16,
                              .SecondState = v16,
                              .Masters = MasterFormat::BFloat16Remainder,
                              .ParameterRemainders = rem},
                             scalars));
  }
  std::size_t differ = 0;
  std::size_t far = 0;
  for (std::size_t t = 0; t < kLowBitSizes.size(); ++t) {
    const std::vector<float> master = w32[t]->ToFloatVector();
    const std::vector<std::uint16_t> params = Halves(w16[t]);
    const std::vector<std::uint16_t> low = Halves(rem[t]);
    const std::vector<float> bf16 = w16[t]->ToFloatVector();
    for (std::size_t i = 0; i < master.size(); ++i) {
      differ += std::bit_cast<std::uint32_t>(Reconstruct(params[i], low[i])) == std::bit_cast<std::uint32_t>(master[i])
                    ? 0
                    : 1;
      // The parameter the model sees is the master to BF16 precision.
      far += std::fabs(bf16[i] - master[i]) <= std::fabs(master[i]) * 0x1p-8f ? 0 : 1;
    }
    BOOST_TEST(m16[t]->ToFloatVector() == m32[t]->ToFloatVector());
    BOOST_TEST(v16[t]->ToFloatVector() == v32[t]->ToFloatVector());
  }
  BOOST_TEST(differ == 0u);
  BOOST_TEST(far == 0u);
}

BOOST_AUTO_TEST_CASE(BadFormatsThrowNamingTheFieldAndWriteNothing) {
  const std::size_t n = 300;
  const std::vector<TensorPtr> w = {FromVector(std::vector<float>(n, 1.0f), {n})};
  const std::vector<TensorPtr> g = {FromVector(std::vector<float>(n, 0.5f), {n})};
  const std::vector<TensorPtr> m8 = {Zeros({n}, DataType::Float8E4M3FN)};
  const std::vector<TensorPtr> v8 = {Zeros({n}, DataType::Float8E4M3FN)};
  const std::vector<TensorPtr> m_scales = {Zeros({2})};
  const std::vector<TensorPtr> v_scales = {Zeros({2})};
  const OptimizerStepLists good{.Parameters = w,
                                .Gradients = g,
                                .FirstState = m8,
                                .SecondState = v8,
                                .FirstStateFormat = StateFormat::Int8Block,
                                .SecondStateFormat = StateFormat::UInt8Block,
                                .FirstStateScales = m_scales,
                                .SecondStateScales = v_scales};
  const AdamStepScalars scalars = AdamStepScalarsFor(AdamOptions{}, 1);
  auto throws = [&](const OptimizerStepLists& lists, const std::string& name, const std::string& value) {
    try {
      FusedAdamStep(lists, scalars);
      BOOST_ERROR("no ArgumentError for " << name);
    } catch (const ArgumentError& e) {
      const std::string what = e.what();
      BOOST_TEST_CONTEXT(what) {
        BOOST_TEST(what.find(name) != std::string::npos);
        BOOST_TEST(what.find(value) != std::string::npos);
      }
    }
    BOOST_TEST(w[0]->ToFloatVector() == std::vector<float>(n, 1.0f));
    BOOST_TEST(Bytes(m8[0]) == std::vector<std::uint8_t>(n, 0));
    BOOST_TEST(m_scales[0]->ToFloatVector() == std::vector<float>(2, 0.0f));
  };
  OptimizerStepLists lists = good;
  lists.StateBlockSize = 100;
  throws(lists, "lists.StateBlockSize", "100");
  lists = good;
  lists.StateBlockSize = 4096;
  throws(lists, "lists.StateBlockSize", "4096");
  // Checked for states without block scales too: unchecked, BF16 moments with blocks of 4096
  // elements would overrun the CPU kernels' tiles, and 0 would divide by zero.
  constexpr std::size_t kLong = 5000;  // more than one tile of 2048
  const std::vector<TensorPtr> w_long = {FromVector(std::vector<float>(kLong, 1.0f), {kLong})};
  const std::vector<TensorPtr> g_long = {FromVector(std::vector<float>(kLong, 0.5f), {kLong})};
  const std::vector<TensorPtr> m16 = {Zeros({kLong}, DataType::BFloat16)};
  const std::vector<TensorPtr> v16 = {Zeros({kLong}, DataType::BFloat16)};
  for (const std::size_t block : {std::size_t{4096}, std::size_t{0}}) {
    BOOST_TEST_CONTEXT("BF16 moments, StateBlockSize " << block) {
      try {
        FusedAdamStep({.Parameters = w_long,
                       .Gradients = g_long,
                       .FirstState = m16,
                       .SecondState = v16,
                       .FirstStateFormat = StateFormat::BFloat16,
                       .SecondStateFormat = StateFormat::BFloat16,
                       .StateBlockSize = block},
                      scalars);
        BOOST_ERROR("no ArgumentError");
      } catch (const ArgumentError& e) {
        BOOST_TEST(std::string(e.what()).find("lists.StateBlockSize") != std::string::npos);
        BOOST_TEST(std::string(e.what()).find(std::to_string(block)) != std::string::npos);
      }
      BOOST_TEST(w_long[0]->ToFloatVector() == std::vector<float>(kLong, 1.0f));
      BOOST_TEST(Halves(m16[0]) == std::vector<std::uint16_t>(kLong, 0));
    }
  }
  lists = good;
  lists.FirstStateFormat = static_cast<StateFormat>(42);
  throws(lists, "lists.FirstStateFormat", "42");
  lists = good;
  lists.FirstStateFormat = StateFormat::UInt8Block;
  throws(lists, "lists.FirstStateFormat", "UInt8Block");
  lists = good;
  lists.SecondStateFormat = StateFormat::Int8Block;
  throws(lists, "lists.SecondStateFormat", "Int8Block");
  lists = good;
  lists.Masters = static_cast<MasterFormat>(9);
  throws(lists, "lists.Masters", "9");
  lists = good;
  lists.FirstStateFormat = StateFormat::BFloat16;  // the state is a one-byte tensor
  lists.FirstStateScales = {};
  throws(lists, "lists.FirstState[0]", "Float8E4M3FN");
  const std::vector<TensorPtr> wrong_scales = {Zeros({3})};
  lists = good;
  lists.SecondStateScales = wrong_scales;
  throws(lists, "lists.SecondStateScales[0]", "3");
  lists = good;
  lists.SecondStateScales = {};
  throws(lists, "lists.SecondStateScales", "0");
  lists = good;
  lists.Masters = MasterFormat::BFloat16StochasticRounding;  // FP32 parameters
  throws(lists, "lists.Parameters[0]", "Float32");
  lists = good;
  lists.Masters = MasterFormat::BFloat16Remainder;
  throws(lists, "lists.ParameterRemainders", "0");
  const std::vector<std::uint64_t> two_offsets = {0, 0};
  lists = good;
  lists.ElementOffsets = two_offsets;
  throws(lists, "lists.ElementOffsets", "2");
  const std::vector<std::uint64_t> too_far = {UINT64_MAX - 299};  // offset + 300 elements = 2^64
  lists = good;
  lists.ElementOffsets = too_far;
  throws(lists, "lists.ElementOffsets[0]", std::to_string(UINT64_MAX - 299));
  // SGD keeps no second moment.
  try {
    FusedSGDStep({.Parameters = w, .Gradients = g, .SecondStateFormat = StateFormat::BFloat16},
                 SGDStepScalarsFor(SGDOptions{}, true));
    BOOST_ERROR("no ArgumentError for an SGD second-state format");
  } catch (const ArgumentError& e) {
    BOOST_TEST(std::string(e.what()).find("lists.SecondStateFormat") != std::string::npos);
  }
  BOOST_TEST(w[0]->ToFloatVector() == std::vector<float>(n, 1.0f));
  BOOST_TEST(FusedAdamStep(good, scalars));  // the lists themselves are good
}

BOOST_AUTO_TEST_CASE(EveryModeTrainsARegressionCloseToFP32Adam) {
  // Linear regression y = X w*, 256 samples of 64 features, 300 AdamW steps on the mean squared
  // error, gradients computed here in double; each mode's final loss against FP32 Adam's.
  constexpr std::size_t kSamples = 256;
  constexpr std::size_t kFeatures = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kSamples * kFeatures);
  std::vector<float> truth(kFeatures);
  for (float& e : x) {
    e = normal(rng);
  }
  for (float& e : truth) {
    e = normal(rng);
  }
  std::vector<double> y(kSamples, 0.0);
  for (std::size_t s = 0; s < kSamples; ++s) {
    for (std::size_t f = 0; f < kFeatures; ++f) {
      y[s] += static_cast<double>(x[s * kFeatures + f]) * truth[f];
    }
  }
  auto loss_and_grad = [&](const std::vector<float>& w, std::vector<float>& grad) {
    std::vector<double> acc(kFeatures, 0.0);
    double loss = 0.0;
    for (std::size_t s = 0; s < kSamples; ++s) {
      double r = -y[s];
      for (std::size_t f = 0; f < kFeatures; ++f) {
        r += static_cast<double>(x[s * kFeatures + f]) * w[f];
      }
      loss += r * r / kSamples;
      for (std::size_t f = 0; f < kFeatures; ++f) {
        acc[f] += 2.0 * r * x[s * kFeatures + f] / kSamples;
      }
    }
    for (std::size_t f = 0; f < kFeatures; ++f) {
      grad[f] = static_cast<float>(acc[f]);
    }
    return loss;
  };
  struct Mode {
    MasterFormat masters;
    StateFormat first, second;
  };
  const AdamOptions options{.LearningRate = 2e-2, .WeightDecay = 0.0};
  auto train = [&](const Mode& mode) {
    const std::size_t block = 32;
    const DataType param_dtype = mode.masters == MasterFormat::Float32 ? DataType::Float32 : DataType::BFloat16;
    const std::vector<TensorPtr> w = {Zeros({kFeatures}, param_dtype)};
    const std::vector<TensorPtr> rem = {Zeros({kFeatures}, DataType::BFloat16)};
    const Stored m = ZeroState(mode.first, kFeatures, block);
    const Stored v = ZeroState(mode.second, kFeatures, block);
    const std::vector<TensorPtr> m_data = {m.data};
    const std::vector<TensorPtr> v_data = {v.data};
    const std::vector<TensorPtr> m_scales = {m.scales};
    const std::vector<TensorPtr> v_scales = {v.scales};
    std::vector<float> grad(kFeatures);
    double loss = 0.0;
    for (std::int64_t step = 1; step <= 300; ++step) {
      loss = loss_and_grad(w[0]->ToFloatVector(), grad);
      const std::vector<TensorPtr> g = {FromVector(grad, {kFeatures})};
      OptimizerStepLists lists{.Parameters = w,
                               .Gradients = g,
                               .FirstState = m_data,
                               .SecondState = v_data,
                               .FirstStateFormat = mode.first,
                               .SecondStateFormat = mode.second,
                               .StateBlockSize = block,
                               .Masters = mode.masters,
                               .RoundingSeed = 2024,
                               .RoundingStep = static_cast<std::uint64_t>(step)};
      if (m.scales) {
        lists.FirstStateScales = m_scales;
      }
      if (v.scales) {
        lists.SecondStateScales = v_scales;
      }
      if (mode.masters == MasterFormat::BFloat16Remainder) {
        lists.ParameterRemainders = rem;
      }
      BOOST_REQUIRE(FusedAdamStep(lists, AdamStepScalarsFor(options, step)));
    }
    return loss;
  };
  const double baseline = train({MasterFormat::Float32, StateFormat::Float32, StateFormat::Float32});
  const double initial = [&] {
    std::vector<float> grad(kFeatures);
    return loss_and_grad(std::vector<float>(kFeatures, 0.0f), grad);
  }();
  BOOST_TEST_MESSAGE("FP32 Adam: loss " << initial << " -> " << baseline);
  BOOST_TEST(baseline < initial * 1e-2);  // it trains
  const std::vector<Mode> modes = {
      {MasterFormat::Float32, StateFormat::BFloat16, StateFormat::BFloat16},
      {MasterFormat::Float32, StateFormat::Float16, StateFormat::Float16},
      {MasterFormat::Float32, StateFormat::Int8Block, StateFormat::UInt8Block},
      {MasterFormat::Float32, StateFormat::Float8E4M3Block, StateFormat::Float8E4M3Block},
      {MasterFormat::BFloat16Remainder, StateFormat::Float32, StateFormat::Float32},
      {MasterFormat::BFloat16StochasticRounding, StateFormat::Int8Block, StateFormat::UInt8Block},
  };
  for (const Mode& mode : modes) {
    const double loss = train(mode);
    BOOST_TEST_MESSAGE(ToString(mode.masters) << " masters, " << ToString(mode.first) << "/" << ToString(mode.second)
                                              << " states: loss " << loss);
    BOOST_TEST_CONTEXT(ToString(mode.masters) << " " << ToString(mode.first) << "/" << ToString(mode.second)) {
      // The model sees the BF16 parameters under either BF16 master mode (the remainder keeps the
      // master exact, RemainderMastersAreBitIdenticalToFP32Masters): every mode lands near FP32.
      BOOST_TEST(loss < initial * 2e-2);
      BOOST_TEST(std::fabs(loss - baseline) <= 0.02 * initial);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
