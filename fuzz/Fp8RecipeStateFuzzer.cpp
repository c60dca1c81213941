// Fuzz target: LoadStateDict of the FP8 scaling recipes (fp8::DelayedScaling, fp8::CurrentScaling).
//
// Properties: any bytes are accepted or rejected with ArgumentError, and a rejected blob leaves
// the recipe exactly as it was (same StateDict). An accepted blob gives a recipe whose StateDict
// loads back to the same bytes, whose scales are finite and positive with scale_inv = 1 / scale,
// and which keeps that (and its blob size) through the amax records and updates that follow.
//
// Input: byte 0 picks the recipe, byte 1 flags (bit 0: re-seal the checksum), byte 2 the number
// of steps, then one byte per step (the amax recorded for every tensor: 0, Inf, NaN, a tiny or a
// huge value, or a power of two), then the blob.
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>

#include "FuzzSupport.hpp"

using namespace mlframework;
using mlframework::fuzz::PropertyFailed;

namespace {

constexpr std::size_t kMaxSteps = 64;
const std::array<std::string, 3> kNames = {"w", "x", "g"};

// The recipes the seeds are written for (fuzz/make_seeds.py), registered the same way.
std::unique_ptr<fp8::IScalingRecipe> MakeRecipe(std::uint8_t which) {
  std::unique_ptr<fp8::IScalingRecipe> recipe;
  switch (which % 3) {
    case 0:
      recipe = std::make_unique<fp8::DelayedScaling>(
          fp8::DelayedScalingConfig{.Margin = 1, .Fp8Format = fp8::Format::HYBRID, .AmaxHistoryLen = 4});
      break;
    case 1:
      recipe = std::make_unique<fp8::DelayedScaling>(
          fp8::DelayedScalingConfig{.Margin = 0,
                                    .Fp8Format = fp8::Format::E4M3,
                                    .AmaxHistoryLen = 1,
                                    .AmaxComputeAlgo = fp8::AmaxComputeAlgorithm::MostRecent});
      break;
    default:
      recipe = std::make_unique<fp8::CurrentScaling>();
  }
  const TensorPtr like = Zeros({1});
  recipe->Register(kNames[0], fp8::TensorRole::Forward, *like);
  recipe->Register(kNames[1], fp8::TensorRole::Forward, *like);
  recipe->Register(kNames[2], fp8::TensorRole::Gradient, *like);
  return recipe;
}

float AmaxOf(std::uint8_t code) {
  switch (code % 8) {
    case 0:
      return 0.0f;
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return std::numeric_limits<float>::quiet_NaN();
    case 3:
      return 1e-42f;
    case 4:
      return 3.0e38f;
    default:
      return std::ldexp(1.0f, static_cast<int>(code / 8) - 16);
  }
}

float Read(const TensorPtr& one) { return one->ToFloatVector().at(0); }

void CheckScales(const fp8::IScalingRecipe& recipe) {
  for (const std::string& name : kNames) {
    const float scale = Read(recipe.Scale(name));
    const float inverse = Read(recipe.ScaleInv(name));
    if (!std::isfinite(scale) || !(scale > 0.0f)) {
      PropertyFailed("scale is not finite and positive");
    }
    if (std::bit_cast<std::uint32_t>(inverse) != std::bit_cast<std::uint32_t>(1.0f / scale)) {
      PropertyFailed("scale_inv is not 1 / scale");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlframework::fuzz::FuzzInput input(data, size);
  const std::uint8_t which = input.Byte();
  const std::uint8_t flags = input.Byte();
  const std::size_t step_count = input.Byte() % (kMaxSteps + 1);
  std::vector<std::uint8_t> steps;
  for (std::size_t i = 0; i < step_count; ++i) {
    steps.push_back(input.Byte());
  }
  std::vector<std::byte> blob = input.Rest();
  if ((flags & 1U) != 0) {
    mlframework::fuzz::ResealChecksum(blob);
  }

  const std::unique_ptr<fp8::IScalingRecipe> recipe = MakeRecipe(which);
  const std::vector<std::byte> before = recipe->StateDict();
  try {
    recipe->LoadStateDict(blob);
  } catch (const ArgumentError&) {
    if (recipe->StateDict() != before) {
      PropertyFailed("a rejected blob changed the recipe");
    }
    return 0;
  }
  const std::vector<std::byte> loaded = recipe->StateDict();
  const std::unique_ptr<fp8::IScalingRecipe> fresh = MakeRecipe(which);
  fresh->LoadStateDict(loaded);
  if (fresh->StateDict() != loaded) {
    PropertyFailed("StateDict of an accepted blob does not load back to the same bytes");
  }
  CheckScales(*recipe);
  for (const std::uint8_t step : steps) {
    for (std::size_t k = 0; k < kNames.size(); ++k) {
      const std::vector<float> amax{AmaxOf(static_cast<std::uint8_t>(step + 37 * k))};
      recipe->Amax(kNames[k])->CopyFromFloats(amax);
    }
    recipe->UpdateScales();
    CheckScales(*recipe);
  }
  if (recipe->StateDict().size() != loaded.size()) {
    PropertyFailed("the blob's size changed with the steps");
  }
  return 0;
}
