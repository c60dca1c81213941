// docs/optimizers.md: one fused step over BF16 masters and 8-bit moments, the Adam class with
// those formats, and a converting load (compiled only).
#include <cstddef>
#include <cstdint>
#include <memory>
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

// bf16_parameters: the model's BF16 parameters by name, in host memory
std::unique_ptr<Adam> MakeLowBitAdamW(const GradientMap& bf16_parameters) {
  AdamOptions options = AdamOptions::AdamW(1e-3, 1e-2);
  options.FirstMomentFormat = StateFormat::Int8Block;    // exp_avg
  options.SecondMomentFormat = StateFormat::UInt8Block;  // exp_avg_sq
  options.StateBlockSize = 256;
  options.Masters = MasterFormat::BFloat16StochasticRounding;  // the BF16 parameters are the masters
  options.RoundingSeed = 1234;
  return std::make_unique<Adam>(bf16_parameters, options);  // 4.03 bytes per parameter of masters and state
}

// fp32_blob: the state blob of an Adam with FP32 moments (StateDict())
void LoadConverted(Adam& adam_8bit, std::span<const std::byte> fp32_blob) {
  adam_8bit.LoadStateDict(fp32_blob, amp::StateConversion::Convert);  // FP32 moments into 8-bit
}
