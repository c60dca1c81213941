// The CUDA backend's low-bit fused steps (LowBitSteps.cu) compose shared host/device functions:
// the FP32 element update (core/StepElements.hpp), the state and master codes and the block
// scale of a block's largest magnitude (core/StateCodes.hpp), Philox (core/Philox.hpp). Here the
// same composition runs on the host, one block after another, and must give the CPU backend's
// step bits for every state format and master format over several steps, odd sizes and partial
// last blocks included: the device kernel computes the same functions, so it gives them too
// (test_cuda_device.CudaLowBitSteps compares the device itself). The element update fuses
// multiply-adds as every vector table does and takes the IEEE root, as every table does for a
// step with a moment below FP32 or stochastically rounded masters (the AVX-512 tables take MKL's
// root for FP32 moments, as torch does): CMake runs this suite on the host's own table and with
// MLFW_CPU_ISA=avx2, which compares the FP32-moment steps too. This file is compiled with
// -ffp-contract=off, as the device kernels spell every rounding.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "cuda/CudaTestUtil.hpp"
#include "mlframework/backends/cuda/LowBitSteps.cuh"
#include "mlframework/core/StateCodes.hpp"
#include "mlframework/core/StepElements.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
namespace codes = mlframework::detail;
using mlfw_cuda_test::HostAdamRoundsAsTheDevice;
using mlfw_cuda_test::HostFusesAsTheDevice;
using mlfw_cuda_test::kFirstStateFormats;
using mlfw_cuda_test::kMasterFormats;
using mlfw_cuda_test::kSecondStateFormats;

namespace {

const std::vector<std::size_t> kSizes = {1, 31, 257, 2048 + 33, 0, 5000};
// Element offsets of the tensors of kSizes: none (all zero), or offsets that are not multiples of
// eight, one past 2^35 (the high word of the Philox counter of its group of eight elements).
const std::vector<std::uint64_t> kNoOffsets = {};
const std::vector<std::uint64_t> kOffsets = {5, 0, (std::uint64_t{1} << 35) + 1, 3, 7, 1234567};

std::span<std::byte> BytesOf(const TensorPtr& tensor) { return tensor->MutableHostBytes(); }

void* DataOf(std::span<const TensorPtr> list, std::size_t i) {
  return list.empty() ? nullptr : static_cast<void*>(BytesOf(list[i]).data());
}

// A host tensor of @p dtype with the bits of @p values rounded to it (FP32, BF16), or zero bytes.
TensorPtr HostTensor(std::size_t n, DataType dtype, const std::vector<float>* values = nullptr) {
  TensorPtr tensor = backends::cpu::Empty({n}, dtype);
  std::span<std::byte> bytes = BytesOf(tensor);
  std::fill(bytes.begin(), bytes.end(), std::byte{0});  // no memset: an empty tensor has no data pointer
  if (values != nullptr) {
    for (std::size_t i = 0; i < n; ++i) {
      const float x = (*values)[i];
      if (dtype == DataType::Float32) {
        std::memcpy(bytes.data() + 4 * i, &x, 4);
      } else {
        const std::uint16_t b = codes::FloatToBFloat16Bits(x);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
    }
  }
  return tensor;
}

std::vector<float> Normal(std::mt19937& rng, std::size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) {
    x = normal(rng);
  }
  return v;
}

// The lists of one step (every tensor in host memory).
struct Lists {
  std::vector<TensorPtr> w, g, first, second, first_scales, second_scales, remainders;
};

Lists MakeLists(std::mt19937& rng, StateFormat first, StateFormat second, MasterFormat masters, bool has_second,
                std::size_t block) {
  Lists l;
  for (const std::size_t n : kSizes) {
    const std::vector<float> w = Normal(rng, n, 1.0f);
    l.w.push_back(HostTensor(n, masters == MasterFormat::Float32 ? DataType::Float32 : DataType::BFloat16, &w));
    l.g.push_back(HostTensor(n, DataType::Float32));
    l.first.push_back(HostTensor(n, StateStorageDType(first)));
    if (IsBlockScaled(first)) {
      l.first_scales.push_back(HostTensor(StateBlockCount(n, block), DataType::Float32));
    }
    if (has_second) {
      l.second.push_back(HostTensor(n, StateStorageDType(second)));
      if (IsBlockScaled(second)) {
        l.second_scales.push_back(HostTensor(StateBlockCount(n, block), DataType::Float32));
      }
    }
    if (masters == MasterFormat::BFloat16Remainder) {
      l.remainders.push_back(HostTensor(n, DataType::BFloat16));
    }
  }
  return l;
}

Lists Copy(const Lists& l) {
  auto copy = [](const std::vector<TensorPtr>& list) {
    std::vector<TensorPtr> out;
    for (const TensorPtr& t : list) {
      TensorPtr c = backends::cpu::Empty({t->Size()}, t->GetDataType());
      std::ranges::copy(t->HostBytes(), BytesOf(c).begin());
      out.push_back(c);
    }
    return out;
  };
  return Lists{copy(l.w),         copy(l.g), copy(l.first), copy(l.second), copy(l.first_scales), copy(l.second_scales),
               copy(l.remainders)};
}

OptimizerStepLists StepLists(const Lists& l, StateFormat first, StateFormat second, MasterFormat masters,
                             std::size_t block, std::uint64_t step, std::span<const std::uint64_t> offsets = {}) {
  return OptimizerStepLists{.Parameters = l.w,
                            .Gradients = l.g,
                            .FirstState = l.first,
                            .SecondState = l.second,
                            .FirstStateFormat = first,
                            .SecondStateFormat = second,
                            .FirstStateScales = l.first_scales,
                            .SecondStateScales = l.second_scales,
                            .StateBlockSize = block,
                            .Masters = masters,
                            .ParameterRemainders = l.remainders,
                            .RoundingSeed = 0x0123456789abcdefULL,
                            .RoundingStep = step,
                            .ElementOffsets = offsets};
}

// Encodes @p values into a state stored as @p format: each block's scale from its largest
// magnitude, as the kernel's max-reduction finds it, and its code factor, once per block as the
// kernel takes them (EncodeBlockElement()).
void EncodeState(StateFormat format, void* data, float* scales, std::size_t block, const std::vector<float>& values,
                 bool keep_positive) {
  if (!IsBlockScaled(format)) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      codes::EncodeStateElement(format, data, i, values[i], 0.0f, keep_positive);
    }
    return;
  }
  for (std::size_t b = 0; b * block < values.size(); ++b) {
    const std::size_t end = (b + 1) * block < values.size() ? (b + 1) * block : values.size();
    std::uint32_t largest = 0;
    for (std::size_t i = b * block; i < end; ++i) {
      const std::uint32_t bits = codes::MagnitudeBits(values[i]);
      largest = bits > largest ? bits : largest;
    }
    const float scale = codes::BlockScale(format, codes::BitsAsFloat(largest));
    const float factor = codes::BlockCodeFactor(format, scale);
    scales[b] = scale;
    for (std::size_t i = b * block; i < end; ++i) {
      codes::EncodeBlockElement(format, data, i, values[i], scale, factor, keep_positive);
    }
  }
}

// The kernel's composition on the host: per tensor, decode, update(w, g, first, second), encode.
template <class Update>
void SharedStep(const OptimizerStepLists& l, bool has_second, Update&& update) {
  for (std::size_t t = 0; t < l.Parameters.size(); ++t) {
    const std::size_t n = l.Parameters[t]->Size();
    void* parameter = DataOf(l.Parameters, t);
    auto* remainders = static_cast<std::uint16_t*>(DataOf(l.ParameterRemainders, t));
    const auto* g = static_cast<const float*>(DataOf(l.Gradients, t));
    void* first = DataOf(l.FirstState, t);
    void* second = has_second ? DataOf(l.SecondState, t) : nullptr;
    auto* first_scales = static_cast<float*>(DataOf(l.FirstStateScales, t));
    auto* second_scales = static_cast<float*>(DataOf(l.SecondStateScales, t));
    std::vector<float> w(n);
    std::vector<float> m(n);
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = codes::DecodeMasterElement(l.Masters, parameter, remainders, i);
      m[i] = codes::DecodeStateElement(l.FirstStateFormat, first, first_scales, l.StateBlockSize, i);
      if (second != nullptr) {
        v[i] = codes::DecodeStateElement(l.SecondStateFormat, second, second_scales, l.StateBlockSize, i);
      }
      update(w[i], g[i], &m[i], v[i]);
      codes::EncodeMasterElement(l.Masters, parameter, remainders, i, w[i], l.RoundingSeed, l.RoundingStep,
                                 static_cast<std::uint32_t>(t), l.ElementOffsets.empty() ? 0 : l.ElementOffsets[t]);
    }
    EncodeState(l.FirstStateFormat, first, first_scales, l.StateBlockSize, m, false);
    if (second != nullptr) {
      EncodeState(l.SecondStateFormat, second, second_scales, l.StateBlockSize, v, true);
    }
  }
}

// Fresh gradients, the same in both lists.
void NewGradients(std::mt19937& rng, const Lists& a, const Lists& b) {
  for (std::size_t t = 0; t < a.g.size(); ++t) {
    const std::vector<float> g = Normal(rng, a.g[t]->Size(), 0.1f);
    std::ranges::copy(std::as_bytes(std::span<const float>(g)), BytesOf(a.g[t]).begin());
    std::ranges::copy(std::as_bytes(std::span<const float>(g)), BytesOf(b.g[t]).begin());
  }
}

void RequireSameBytes(const std::vector<TensorPtr>& a, const std::vector<TensorPtr>& b, const char* what) {
  for (std::size_t t = 0; t < a.size(); ++t) {
    const std::span<const std::byte> x = a[t]->HostBytes();
    const std::span<const std::byte> y = b[t]->HostBytes();
    BOOST_TEST_INFO(what << "[" << t << "]");
    BOOST_TEST(std::ranges::equal(x, y));
  }
}

void RequireSame(const Lists& a, const Lists& b) {
  RequireSameBytes(a.w, b.w, "parameters");
  RequireSameBytes(a.first, b.first, "first state");
  RequireSameBytes(a.second, b.second, "second state");
  RequireSameBytes(a.first_scales, b.first_scales, "first scales");
  RequireSameBytes(a.second_scales, b.second_scales, "second scales");
  RequireSameBytes(a.remainders, b.remainders, "remainders");
}

// Gradients holding NaNs of either sign and with payloads, and infinities, in some blocks.
void NonFiniteGradients(std::mt19937& rng, const Lists& a, const Lists& b) {
  NewGradients(rng, a, b);
  for (std::size_t t = 0; t < a.g.size(); ++t) {
    auto* ga = reinterpret_cast<float*>(BytesOf(a.g[t]).data());
    auto* gb = reinterpret_cast<float*>(BytesOf(b.g[t]).data());
    for (std::size_t i = 0; i < a.g[t]->Size(); ++i) {
      ga[i] = gb[i] = mlfw_cuda_test::WithNonFinite(i, ga[i]);
    }
  }
}

// The NaN the GPU's arithmetic gives for every NaN it computes.
float DeviceNaN(float x) { return std::isnan(x) ? std::bit_cast<float>(0x7fffffffu) : x; }

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaLowBitStepsOnTheHost)

// Blocks holding NaNs and infinities: the block-scaled states and their scales get the CPU
// backend's bytes from the shared element codes, whether the updated values carry the host's NaNs
// (sign and payload of an operand) or the device's (0x7fffffff): the codes select their NaN bits
// (StateCodes.hpp's BlockNaNScale(), kHalfNaNCode, kFloat8NaNCode) instead of computing them.
// The FP32 parameters are not compared: there a NaN keeps the bits of the arithmetic that made it.
BOOST_AUTO_TEST_CASE(NaNAndInfinityBlocksStoreTheCpuBackendsBitsWithTheHostsAndTheDevicesNaNs) {
  if (!HostFusesAsTheDevice()) {
    return;
  }
  std::mt19937 rng(44);
  for (const StateFormat first : mlfw_cuda_test::kBlockScaledFirstFormats) {
    for (const StateFormat second : mlfw_cuda_test::kBlockScaledSecondFormats) {
      for (const bool device_nans : {false, true}) {
        BOOST_TEST_CONTEXT(ToString(first) << " / " << ToString(second) << (device_nans ? " / device NaNs" : "")) {
          const Lists cpu = MakeLists(rng, first, second, MasterFormat::Float32, true, 32);
          const Lists shared = Copy(cpu);
          const AdamOptions options = AdamOptions::AdamW(3e-3, 5e-2);
          for (std::int64_t step = 1; step <= 2; ++step) {
            NonFiniteGradients(rng, cpu, shared);
            const AdamStepScalars scalars = AdamStepScalarsFor(options, step);
            const auto s = static_cast<std::uint64_t>(step);
            BOOST_TEST(FusedAdamStep(StepLists(cpu, first, second, MasterFormat::Float32, 32, s), scalars));
            const codes::AdamElementConstants c = codes::AdamConstantsOf(scalars);
            SharedStep(StepLists(shared, first, second, MasterFormat::Float32, 32, s), true,
                       [&](float& w, float g, float* m, float& v) {
                         codes::AdamUpdate(w, g, *m, v, c);
                         if (device_nans) {
                           *m = DeviceNaN(*m);
                           v = DeviceNaN(v);
                         }
                       });
            RequireSameBytes(cpu.first, shared.first, "first state");
            RequireSameBytes(cpu.second, shared.second, "second state");
            RequireSameBytes(cpu.first_scales, shared.first_scales, "first scales");
            RequireSameBytes(cpu.second_scales, shared.second_scales, "second scales");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(AdamOfTheSharedElementFunctionsIsTheCpuBackendsBits) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  std::mt19937 rng(42);
  std::size_t compared = 0;
  for (const StateFormat first : kFirstStateFormats) {
    for (const StateFormat second : kSecondStateFormats) {
      for (const MasterFormat masters : kMasterFormats) {
        if (!HostAdamRoundsAsTheDevice(first, second, masters)) {
          continue;  // FP32 moments on an AVX-512 table: MKL's root, torch's bits
        }
        ++compared;
        const std::size_t block = first == StateFormat::Int8Block ? 32 : 256;
        // Element offsets matter to stochastic rounding alone.
        const bool rounding = masters == MasterFormat::BFloat16StochasticRounding;
        for (const std::vector<std::uint64_t>* offsets : {&kNoOffsets, &kOffsets}) {
          if (!offsets->empty() && !rounding) continue;
          BOOST_TEST_CONTEXT(ToString(first) << " / " << ToString(second) << " / " << ToString(masters)
                                             << (offsets->empty() ? "" : " / element offsets")) {
            const Lists cpu = MakeLists(rng, first, second, masters, true, block);
            const Lists shared = Copy(cpu);
            const AdamOptions options = AdamOptions::AdamW(3e-3, 5e-2);
            for (std::int64_t step = 1; step <= 3; ++step) {
              NewGradients(rng, cpu, shared);
              const AdamStepScalars scalars = AdamStepScalarsFor(options, step);
              const auto s = static_cast<std::uint64_t>(step);
              BOOST_TEST(FusedAdamStep(StepLists(cpu, first, second, masters, block, s, *offsets), scalars));
              const codes::AdamElementConstants c = codes::AdamConstantsOf(scalars);
              SharedStep(StepLists(shared, first, second, masters, block, s, *offsets), true,
                         [&](float& w, float g, float* m, float& v) { codes::AdamUpdate(w, g, *m, v, c); });
              RequireSame(cpu, shared);
            }
          }
        }
      }
    }
  }
  BOOST_TEST_MESSAGE("compared " << compared << " format combinations with the CPU backend's bits");
}

BOOST_AUTO_TEST_CASE(SGDOfTheSharedElementFunctionsIsTheCpuBackendsBits) {
  if (!HostFusesAsTheDevice()) {
    return;
  }
  std::mt19937 rng(43);
  for (const StateFormat momentum : kFirstStateFormats) {
    for (const MasterFormat masters : kMasterFormats) {
      for (const bool nesterov : {false, true}) {
        BOOST_TEST_CONTEXT(ToString(momentum) << " / " << ToString(masters) << " / nesterov " << nesterov) {
          const Lists cpu = MakeLists(rng, momentum, StateFormat::Float32, masters, false, 64);
          const Lists shared = Copy(cpu);
          const SGDOptions options{.LearningRate = 0.01, .Momentum = 0.9, .WeightDecay = 1e-3, .Nesterov = nesterov};
          for (std::int64_t step = 1; step <= 3; ++step) {
            NewGradients(rng, cpu, shared);
            const SGDStepScalars scalars = SGDStepScalarsFor(options, step == 1);
            const auto s = static_cast<std::uint64_t>(step);
            BOOST_TEST(FusedSGDStep(StepLists(cpu, momentum, StateFormat::Float32, masters, 64, s), scalars));
            SharedStep(StepLists(shared, momentum, StateFormat::Float32, masters, 64, s), false,
                       [&](float& w, float g, float* b, float& /*second*/) { codes::SGDUpdate(w, g, b, scalars); });
            RequireSame(cpu, shared);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(StochasticRoundingTakesEachElementsCounterFromALaneThatDrewIt) {
  // The kernel draws one Philox counter per thread and hands each element the words of its
  // counter from a lane of its warp (RoundingBits() in LowBitSteps.cu). For tiles starting at
  // every Philox index modulo 8 (element offsets that are not multiples of 8, a counter's low
  // word wrapping) and every warp of the block: each element's source lane lies in its warp,
  // among the lanes that drew the counters of its k, and drew the element's counter (index / 8).
  using mlframework::backends::cuda::kLowBitThreads;
  using mlframework::backends::cuda::kLowBitTile;
  using mlframework::backends::cuda::RoundingCounterOfLane;
  using mlframework::backends::cuda::RoundingSourceLane;
  std::size_t checked = 0;
  std::size_t wrong = 0;
  for (const std::uint64_t tile_first : {0ull, 1ull, 7ull, 2048ull + 3ull, 0xfffffffcull, 0x1234567891ull}) {
    for (std::uint64_t shift = 0; shift < 8; ++shift) {
      const std::uint64_t first = tile_first + shift;
      for (std::uint32_t warp = 0; warp < kLowBitThreads / 32; ++warp) {
        const std::uint64_t warp_first = first + 32ull * warp;
        for (std::uint32_t k = 0; k < kLowBitTile / kLowBitThreads; ++k) {
          for (std::uint32_t lane = 0; lane < 32; ++lane) {
            const std::uint64_t lane0 = warp_first + static_cast<std::uint64_t>(k) * kLowBitThreads;
            const std::uint32_t source = RoundingSourceLane(k, lane, lane0);
            const bool ok = source < 32 && source / 8 == k && source % 8 <= 4 &&
                            RoundingCounterOfLane(source, warp_first) == (lane0 + lane) / 8;
            wrong += ok ? 0 : 1;
            ++checked;
          }
        }
      }
    }
  }
  BOOST_TEST(checked == 6u * 8u * kLowBitTile);
  BOOST_TEST(wrong == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
