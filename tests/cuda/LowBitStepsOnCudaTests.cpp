// The CUDA backend's fused steps with low-precision states and masters (LowBitSteps.cu): the
// same bits as the CPU backend's vector kernels (on an AVX-512 table the steps with FP32 moments
// take MKL's root and are compared only under MLFW_CPU_ISA=avx2, as CMake and
// scripts/gpu-check.sh run this suite) for every state format and master format, over several steps, odd sizes and
// partial last blocks and tiles, the block scales, the remainders and the FP16 copies included; a
// step skipped on the device for the found-inf flag writes nothing and does not count, so
// stochastic rounding keeps drawing the bits of the steps taken; element offsets move the
// rounding's counter as on the CPU. Needs a CUDA device.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
using mlfw_cuda_test::HostAdamRoundsAsTheDevice;
using mlfw_cuda_test::HostFusesAsTheDevice;
using mlfw_cuda_test::kFirstStateFormats;
using mlfw_cuda_test::kGpu;
using mlfw_cuda_test::kMasterFormats;
using mlfw_cuda_test::kSecondStateFormats;
namespace cuda = mlframework::backends::cuda;

namespace {

const std::vector<std::size_t> kSizes = {1, 33, 300, 0, 2048 + 5, 9000};

// The stored bytes of @p tensor, wherever it lives.
std::vector<std::byte> Raw(const TensorPtr& tensor) {
  std::vector<std::byte> out(tensor->Size() * ElementSize(tensor->GetDataType()));
  if (out.empty()) {
    return out;
  }
  if (!tensor->HostBytes().empty()) {
    std::memcpy(out.data(), tensor->HostBytes().data(), out.size());
    return out;
  }
  cuda::Synchronize(0);
  BOOST_REQUIRE(cudaMemcpy(out.data(), cuda::DevicePointer(*tensor), out.size(), cudaMemcpyDeviceToHost) ==
                cudaSuccess);
  return out;
}

// The same tensors on the host and on the GPU.
struct Pair {
  std::vector<TensorPtr> host;
  std::vector<TensorPtr> gpu;
  const std::vector<TensorPtr>& On(bool gpu_side) const { return gpu_side ? gpu : host; }
};

// Tensors of @p elements(n) elements per size: normal values of @p scale (0: zeros) in @p dtype.
template <class Elements>
Pair Make(std::mt19937& rng, DataType dtype, float scale, Elements&& elements) {
  Pair pair;
  for (const std::size_t size : kSizes) {
    const std::size_t n = elements(size);
    std::normal_distribution<float> normal(0.0f, scale > 0.0f ? scale : 1.0f);
    std::vector<float> values(n, 0.0f);
    if (scale > 0.0f) {
      for (float& x : values) {
        x = normal(rng);
      }
    }
    pair.host.push_back(FromVector(values, {n}, dtype));
    pair.gpu.push_back(FromVector(values, {n}, dtype, kGpu));
  }
  return pair;
}

Pair Make(std::mt19937& rng, DataType dtype, float scale) {
  return Make(rng, dtype, scale, [](std::size_t n) { return n; });
}

void RequireSame(const Pair& pair, const char* what) {
  for (std::size_t t = 0; t < pair.host.size(); ++t) {
    BOOST_TEST_INFO(what << "[" << t << "]");
    BOOST_TEST((Raw(pair.gpu[t]) == Raw(pair.host[t])));
  }
}

// Every list of a step with formats @p first / @p second / @p masters.
struct Step {
  Pair w, g, first, second, first_scales, second_scales, remainders;
  Pair copies;  // FP32 masters: the FP16 copy of the updated parameters
  StateFormat first_format, second_format;
  MasterFormat masters;
  std::size_t block;
  std::vector<std::uint64_t> offsets;  // OptimizerStepLists::ElementOffsets (empty: all zero)

  Step(std::mt19937& rng, StateFormat f1, StateFormat f2, MasterFormat m, std::size_t block_size, bool has_second)
      : first_format(f1), second_format(f2), masters(m), block(block_size) {
    w = Make(rng, m == MasterFormat::Float32 ? DataType::Float32 : DataType::BFloat16, 1.0f);
    first = Make(rng, StateStorageDType(f1), 0.0f);
    if (IsBlockScaled(f1)) {
      first_scales = Make(rng, DataType::Float32, 0.0f, [&](std::size_t n) { return StateBlockCount(n, block); });
    }
    if (has_second) {
      second = Make(rng, StateStorageDType(f2), 0.0f);
      if (IsBlockScaled(f2)) {
        second_scales = Make(rng, DataType::Float32, 0.0f, [&](std::size_t n) { return StateBlockCount(n, block); });
      }
    }
    if (m == MasterFormat::BFloat16Remainder) {
      remainders = Make(rng, DataType::BFloat16, 0.0f);
    }
    if (m == MasterFormat::Float32) {
      copies = Make(rng, DataType::Float16, 0.0f);
    }
  }

  OptimizerStepLists Lists(bool gpu, std::uint64_t step, const TensorPtr& count = nullptr) const {
    return OptimizerStepLists{.Parameters = w.On(gpu),
                              .Gradients = g.On(gpu),
                              .FirstState = first.On(gpu),
                              .SecondState = second.On(gpu),
                              .LowPrecisionCopies = copies.On(gpu),
                              .StepCount = count,
                              .FirstStateFormat = first_format,
                              .SecondStateFormat = second_format,
                              .FirstStateScales = first_scales.On(gpu),
                              .SecondStateScales = second_scales.On(gpu),
                              .StateBlockSize = block,
                              .Masters = masters,
                              .ParameterRemainders = remainders.On(gpu),
                              .RoundingSeed = 0xfeedbeefcafe1234ULL,
                              .RoundingStep = step,
                              .ElementOffsets = offsets};
  }

  void RequireSameBits() const {
    RequireSame(w, "parameters");
    RequireSame(first, "first state");
    RequireSame(second, "second state");
    RequireSame(first_scales, "first scales");
    RequireSame(second_scales, "second scales");
    RequireSame(remainders, "remainders");
    RequireSame(copies, "FP16 copies");
  }
};

constexpr std::size_t kBlocks[] = {32, 256, 2048};

// Three AdamW steps of @p s with fresh gradients on the host and on the GPU, the same bits after each.
void AdamOnBothSides(Step& s, std::mt19937& rng) {
  for (std::uint64_t step = 1; step <= 3; ++step) {
    s.g = Make(rng, DataType::Float32, 0.1f);
    const AdamStepScalars scalars = AdamStepScalarsFor(AdamOptions::AdamW(3e-3, 5e-2), static_cast<std::int64_t>(step));
    BOOST_TEST(FusedAdamStep(s.Lists(false, step), scalars));
    BOOST_TEST(FusedAdamStep(s.Lists(true, step), scalars));
    s.RequireSameBits();
  }
}

// Gradients of scale 0.1 with NaNs of either sign and with payloads, and infinities (WithNonFinite()).
Pair NonFiniteGradients(std::mt19937& rng) {
  Pair pair;
  for (const std::size_t n : kSizes) {
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> values(n);
    for (std::size_t i = 0; i < n; ++i) {
      values[i] = mlfw_cuda_test::WithNonFinite(i, normal(rng));
    }
    pair.host.push_back(FromVector(values, {n}, DataType::Float32));
    pair.gpu.push_back(FromVector(values, {n}, DataType::Float32, kGpu));
  }
  return pair;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaLowBitSteps)

// Blocks holding NaNs and infinities: the device's block-scaled states and scales are the CPU's
// bytes (the quiet NaN scale, the positive NaN codes), although the device's arithmetic makes
// every NaN 0x7FFFFFFF and the host's keeps an operand's sign and payload. The parameters are not
// compared: there a NaN keeps the bits of the arithmetic that made it.
BOOST_AUTO_TEST_CASE(NaNAndInfinityBlocksStoreTheCpuBitsOnTheDevice) {
  if (!HostFusesAsTheDevice()) {
    return;
  }
  std::mt19937 rng(11);
  for (const StateFormat first : mlfw_cuda_test::kBlockScaledFirstFormats) {
    for (const StateFormat second : mlfw_cuda_test::kBlockScaledSecondFormats) {
      BOOST_TEST_CONTEXT(ToString(first) << " / " << ToString(second)) {
        Step s(rng, first, second, MasterFormat::Float32, 32, true);
        for (std::uint64_t step = 1; step <= 2; ++step) {
          s.g = NonFiniteGradients(rng);
          const AdamStepScalars scalars =
              AdamStepScalarsFor(AdamOptions::AdamW(3e-3, 5e-2), static_cast<std::int64_t>(step));
          BOOST_TEST(FusedAdamStep(s.Lists(false, step), scalars));
          BOOST_TEST(FusedAdamStep(s.Lists(true, step), scalars));
          RequireSame(s.first, "first state");
          RequireSame(s.second, "second state");
          RequireSame(s.first_scales, "first scales");
          RequireSame(s.second_scales, "second scales");
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(AdamMatchesTheCpuKernelsBitForBitInEveryFormat) {
  std::mt19937 rng(7);
  // Every pair of moment formats, each with one of the master formats and block sizes in turn
  // (every master format meets every moment format), so the suite stays short under compute-sanitizer.
  std::size_t combination = 0;
  for (const StateFormat first : kFirstStateFormats) {
    for (const StateFormat second : kSecondStateFormats) {
      const MasterFormat masters = kMasterFormats[combination % 3];
      const std::size_t block = kBlocks[(combination / 3) % 3];
      ++combination;
      if (!HostAdamRoundsAsTheDevice(first, second, masters)) {
        continue;  // FP32 moments on an AVX-512 table: MKL's root (run with MLFW_CPU_ISA=avx2)
      }
      BOOST_TEST_CONTEXT(ToString(first) << " / " << ToString(second) << " / " << ToString(masters) << " / block "
                                         << block) {
        Step s(rng, first, second, masters, block, true);
        AdamOnBothSides(s, rng);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SGDMatchesTheCpuKernelsBitForBitInEveryFormat) {
  if (!HostFusesAsTheDevice()) {
    return;
  }
  std::mt19937 rng(8);
  std::size_t combination = 0;
  for (const StateFormat momentum : kFirstStateFormats) {
    for (const MasterFormat masters : kMasterFormats) {
      const bool nesterov = combination % 2 == 1;
      const std::size_t block = kBlocks[combination % 3];
      ++combination;
      BOOST_TEST_CONTEXT(ToString(momentum) << " / " << ToString(masters) << " / nesterov " << nesterov) {
        Step s(rng, momentum, StateFormat::Float32, masters, block, false);
        const SGDOptions options{.LearningRate = 0.01, .Momentum = 0.9, .WeightDecay = 1e-3, .Nesterov = nesterov};
        for (std::uint64_t step = 1; step <= 3; ++step) {
          s.g = Make(rng, DataType::Float32, 0.1f);
          const SGDStepScalars scalars = SGDStepScalarsFor(options, step == 1);
          BOOST_TEST(FusedSGDStep(s.Lists(false, step), scalars));
          BOOST_TEST(FusedSGDStep(s.Lists(true, step), scalars));
          s.RequireSameBits();
        }
      }
    }
  }
}

// Element offsets move each tensor's Philox counter (stochastic rounding) as on the CPU: offsets
// that are not multiples of eight, one past 2^35 (the counter's high word).
BOOST_AUTO_TEST_CASE(ElementOffsetsMoveTheRoundingBitsAsOnTheCpu) {
  if (!HostFusesAsTheDevice()) {  // stochastically rounded masters: the IEEE root on every table
    return;
  }
  std::mt19937 rng(10);
  for (const StateFormat first : {StateFormat::Float32, StateFormat::Int8Block}) {
    BOOST_TEST_CONTEXT(ToString(first)) {
      Step s(rng, first, StateFormat::Float32, MasterFormat::BFloat16StochasticRounding, 256, true);
      s.offsets = {5, 0, (std::uint64_t{1} << 35) + 1, 3, 7, 1234567};  // one per kSizes entry
      AdamOnBothSides(s, rng);
    }
  }
}

// Steps 2 and 4 overflow: the device skips them (nothing written, the count not moved on), so
// the device count gives the host's step numbers and Philox counters of the steps taken.
BOOST_AUTO_TEST_CASE(AnOverflowSkipsTheStepAndTheCountOnTheDevice) {
  std::mt19937 rng(9);
  Step s(rng, StateFormat::Int8Block, StateFormat::UInt8Block, MasterFormat::BFloat16StochasticRounding, 256, true);
  const TensorPtr host_count = Zeros({1}, DataType::Float32);
  const TensorPtr gpu_count = Zeros({1}, DataType::Float32, kGpu);
  const ScalePolicy policy;
  const std::unique_ptr<DeviceScaleState> state =
      cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  const bool compare = HostAdamRoundsAsTheDevice(StateFormat::Int8Block, StateFormat::UInt8Block,
                                                 MasterFormat::BFloat16StochasticRounding);
  for (int call = 1; call <= 5; ++call) {
    s.g = Make(rng, DataType::Float32, 0.1f);
    const bool overflow = call % 2 == 0;
    if (overflow) {
      state->MarkFoundInf();
    } else {
      state->ClearFoundInf();
    }
    std::vector<std::vector<std::byte>> before;
    for (const TensorPtr& t : s.w.gpu) {
      before.push_back(Raw(t));
    }
    // The scalars' step is ignored with a count: each step runs as count + 1.
    BOOST_TEST(FusedAdamStep(s.Lists(true, 99, gpu_count), AdamStepScalarsFor(AdamOptions{}, 1), state.get()));
    if (overflow) {
      for (std::size_t t = 0; t < s.w.gpu.size(); ++t) {
        BOOST_TEST((Raw(s.w.gpu[t]) == before[t]));
      }
      continue;
    }
    BOOST_TEST(FusedAdamStep(s.Lists(false, 99, host_count), AdamStepScalarsFor(AdamOptions{}, 1)));
    if (compare) {
      s.RequireSameBits();
    }
  }
  BOOST_TEST(gpu_count->ToFloatVector() == std::vector<float>{3.0f});
  BOOST_TEST(host_count->ToFloatVector() == std::vector<float>{3.0f});
}

BOOST_AUTO_TEST_SUITE_END()
