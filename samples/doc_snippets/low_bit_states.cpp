// docs/optimizers.md: one fused step over BF16 masters and 8-bit moments (compiled only).
#include <cstdint>
#include <span>

#include <mlframework/mlframework.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

using namespace mlframework;
using namespace mlframework::optimizers;

// BF16 masters rounded stochastically, exp_avg in signed and exp_avg_sq in unsigned 8-bit codes
// with one FP32 scale per block of 256 elements.
bool StepLowBit(std::span<const TensorPtr> bf16_params, std::span<const TensorPtr> grads,
                std::span<const TensorPtr> exp_avg_codes, std::span<const TensorPtr> exp_avg_scales,
                std::span<const TensorPtr> exp_avg_sq_codes, std::span<const TensorPtr> exp_avg_sq_scales,
                const AdamOptions& options, std::int64_t step, std::uint64_t seed) {
  const OptimizerStepLists lists{.Parameters = bf16_params,
                                 .Gradients = grads,
                                 .FirstState = exp_avg_codes,
                                 .SecondState = exp_avg_sq_codes,
                                 .FirstStateFormat = StateFormat::Int8Block,
                                 .SecondStateFormat = StateFormat::UInt8Block,
                                 .FirstStateScales = exp_avg_scales,
                                 .SecondStateScales = exp_avg_sq_scales,
                                 .StateBlockSize = 256,
                                 .Masters = MasterFormat::BFloat16StochasticRounding,
                                 .RoundingSeed = seed,
                                 .RoundingStep = static_cast<std::uint64_t>(step)};
  return FusedAdamStep(lists, AdamStepScalarsFor(options, step));
}
