#pragma once
/// @file OptimizerStep.hpp
/// @brief The tensor lists and per-step constants of one fused optimizer step (TensorBackend::AdamStep(),
/// TensorBackend::SGDStep(), optimizers/FusedSteps.hpp).

#include <cstddef>
#include <cstdint>
#include <span>

#include <mlframework/core/HostDevice.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework {

/// How an optimizer state (Adam's exp_avg or exp_avg_sq, SGD's momentum buffer) is stored between
/// steps. Each step decodes the state into FP32, updates it in FP32 exactly as an FP32 state, and
/// encodes it again, in the same pass over memory.
///
/// - Float32, BFloat16: a tensor of that dtype; encoding rounds to nearest even.
/// - Float16: FP16 codes (a Float16 tensor) with one FP32 scale per block of
///   OptimizerStepLists::StateBlockSize elements: the scale is the power of two that puts the
///   block's largest magnitude in FP16's top binade (below 65504), `code = fp16(x / scale)` (nearest
///   even), `x' = code * scale`, every product exact. Relative error at most 2^-11 for
///   `|x| >= scale * 2^-14` (at most `absmax * 2^-29`, unless absmax is below 2^-111: the
///   scale is at least 2^-126), absolute error at most `scale * 2^-25` below: the second moment, whose
///   values mostly lie far below FP16's normal range in absolute terms, keeps FP16's precision
///   relative to its block (Transformer Engine scales its FP16 states for the same reason). A NaN
///   block stays NaN; an infinite value stays infinite.
/// - Int8Block (first moment and momentum only): signed linear codes, one byte per element, and one
///   FP32 scale per block of OptimizerStepLists::StateBlockSize elements: `scale = absmax / 127`,
///   `code = round_half_even(x / scale)` in [-127, 127], `x' = code * scale`. Error bound:
///   `|x - x'| <= scale / 2 + absmax * 2^-22`.
/// - UInt8Block (second moment only): unsigned linear codes in [0, 255], `scale = absmax / 255`,
///   the same rounding; a positive value that would round to code 0 is stored as code 1. Error
///   bound: `|x - x'| <= scale / 2 + absmax * 2^-22` for `x >= scale / 2`, `x' - x <= scale` below.
/// - Float8E4M3Block: FP8 E4M3FN codes of `x * (1 / scale)` (saturating) with `scale = absmax / 448`
///   per block (signed: either moment). Relative error at most 2^-4 for `|x| >= 2^-6 * scale`,
///   absolute error at most `2^-10 * scale` below; a positive second moment that would round to 0
///   is stored as the smallest subnormal (`2^-9 * scale`).
///
/// A block-scaled block holding a NaN stores the quiet NaN 0x7FC00000 as its scale, and every element
/// decodes to NaN (the Float16 and Float8E4M3Block codes of such a block are the positive quiet NaN,
/// 0x7E00 and 0x7F); a block holding an infinity (and no NaN) has an infinite scale (Float16: 2^113,
/// its infinities stay infinite; the other formats' elements then decode to NaN or an infinity),
/// and an infinity's Float8E4M3Block code is 0x7F too. These bits are the same on every CPU
/// instruction set and on CUDA, whatever the NaNs' signs and payloads.
///
/// Every second-moment format keeps a positive value positive (Float16 and BFloat16 store the
/// smallest subnormal code where round-to-nearest would give 0), so Adam's denominator never collapses
/// to epsilon. The codes of the 8-bit formats live in a tensor of any one-byte dtype (the library
/// has no integer dtype: the format, not the tensor's dtype, says how the bytes are read); the
/// Float8E4M3Block codes are Float8E4M3FN values.
enum class StateFormat : std::uint8_t {
  Float32,          ///< FP32 (bit-identical to PyTorch's FP32 state).
  BFloat16,         ///< BF16, round to nearest even.
  Float16,          ///< FP16 codes with one power-of-two FP32 scale per block.
  Int8Block,        ///< Signed linear 8-bit codes with one FP32 scale per block.
  UInt8Block,       ///< Unsigned linear 8-bit codes with one FP32 scale per block.
  Float8E4M3Block,  ///< FP8 E4M3FN codes with one FP32 scale per block.
};

/// Name of @p format ("Float32", ..., "Float8E4M3Block"); "Unknown" outside the enum.
constexpr const char* ToString(StateFormat format) noexcept {
  switch (format) {
    case StateFormat::Float32:
      return "Float32";
    case StateFormat::BFloat16:
      return "BFloat16";
    case StateFormat::Float16:
      return "Float16";
    case StateFormat::Int8Block:
      return "Int8Block";
    case StateFormat::UInt8Block:
      return "UInt8Block";
    case StateFormat::Float8E4M3Block:
      return "Float8E4M3Block";
  }
  return "Unknown";
}

/// True for the formats with one FP32 scale per block (Float16, Int8Block, UInt8Block, Float8E4M3Block).
/// Callable from CUDA device code too.
MLFW_HOST_DEVICE constexpr bool IsBlockScaled(StateFormat format) noexcept {
  return format == StateFormat::Float16 || format == StateFormat::Int8Block || format == StateFormat::UInt8Block ||
         format == StateFormat::Float8E4M3Block;
}

/// The dtype of the tensor that stores a state as @p format: the format's own for Float32,
/// BFloat16 and Float16, Float8E4M3FN for the FP8 codes and, as their one-byte carrier, for the
/// linear 8-bit codes (any one-byte dtype holds those).
constexpr DataType StateStorageDType(StateFormat format) noexcept {
  switch (format) {
    case StateFormat::Float32:
      return DataType::Float32;
    case StateFormat::BFloat16:
      return DataType::BFloat16;
    case StateFormat::Float16:
      return DataType::Float16;
    case StateFormat::Int8Block:
    case StateFormat::UInt8Block:
    case StateFormat::Float8E4M3Block:
      return DataType::Float8E4M3FN;
  }
  return DataType::Float32;
}

/// How the master weights (OptimizerStepLists::Parameters) are stored.
///
/// - Float32: FP32 parameters (today's masters).
/// - BFloat16StochasticRounding: BF16 parameters; each step widens them to FP32 (exactly), updates in
///   FP32 and rounds back stochastically: the FP32 value's low 16 bits plus 16 random bits carry into
///   the BF16 value, so the expected BF16 value is the FP32 one. The random bits are Philox-4x32-10
///   (core/Philox.hpp) keyed by OptimizerStepLists::RoundingSeed, the step, the tensor's index in the
///   list and the element's index plus the tensor's OptimizerStepLists::ElementOffsets entry: a rerun
///   gives the same bits, on every backend, and a shard stepped on its own draws the bits of the
///   same elements of the whole tensor.
/// - BFloat16Remainder: BF16 parameters plus a 16-bit remainder per element (Transformer Engine's
///   `store_param_remainders`): the FP32 master's high half, rounded up when the remainder's top bit
///   is set, is the BF16 parameter; its low half is the remainder. The pair reconstructs the FP32
///   master exactly, so the trajectory is bit-identical to FP32 masters, at 4 bytes per parameter.
enum class MasterFormat : std::uint8_t {
  Float32,                     ///< FP32 masters.
  BFloat16StochasticRounding,  ///< BF16 masters rounded stochastically (Philox).
  BFloat16Remainder,           ///< BF16 parameters and 16-bit remainders: exact FP32 masters.
};

/// Name of @p format ("Float32", "BFloat16StochasticRounding", "BFloat16Remainder"); "Unknown" outside the enum.
constexpr const char* ToString(MasterFormat format) noexcept {
  switch (format) {
    case MasterFormat::Float32:
      return "Float32";
    case MasterFormat::BFloat16StochasticRounding:
      return "BFloat16StochasticRounding";
    case MasterFormat::BFloat16Remainder:
      return "BFloat16Remainder";
  }
  return "Unknown";
}

/// Block size of the block-scaled state formats unless a step names another.
inline constexpr std::size_t kDefaultStateBlockSize = 256;

/// Number of blocks (FP32 scales) of a block-scaled state of @p count elements.
constexpr std::size_t StateBlockCount(std::size_t count, std::size_t block_size) noexcept {
  return block_size == 0 ? 0 : (count + block_size - 1) / block_size;
}

/// What Adam's bias corrections are computed from at each step when the step count is kept in a
/// tensor (OptimizerStepLists::StepCount): the options' doubles, as torch holds them.
struct AdamBiasCorrection {
  double LearningRate = 1e-3;  ///< `lr`.
  double Beta1 = 0.9;          ///< `beta1`.
  double Beta2 = 0.999;        ///< `beta2`.
};

/// The constants of one Adam/AdamW step, computed once on the host (optimizers::AdamStepScalarsFor()).
///
/// Each field is a double of PyTorch's Python-side arithmetic rounded once to FP32, where torch's
/// kernels round it when it meets an FP32 tensor. Per element, the ops of torch's single-tensor
/// Adam (`foreach=False`) in its order, each rounded to FP32:
/// `d = L2 != 0 ? fma(w, L2, g) : g; w = Decay != 1 ? w*Decay : w;
/// m = FirstMomentWeight < 0.5 ? fma(FirstMomentWeight, d - m, m) : fma(FirstMomentWeight - 1, d - m, d);`
/// `v = fma(SecondMomentWeight*d, d, v*Beta2); w = w + (-StepSize*m) / (sqrt(v)/BiasCorrection2Sqrt + Epsilon)`,
/// where `fma(a, b, c)` is a fused multiply-add on the CPU backend's AVX2 and AVX-512 kernels and the
/// CUDA backend (PyTorch's vectorised CPU kernels), and `a*b + c` rounded twice on the portable
/// kernels (PyTorch's default CPU capability). `sqrt` is MKL's (torch's) on the AVX-512 kernels,
/// the IEEE root elsewhere (about 0.6% of MKL's roots round the other way).
struct AdamStepScalars {
  float StepSize = 0.0f;              ///< `lr / (1 - beta1^t)`, computed in double and rounded to FP32.
  float BiasCorrection2Sqrt = 1.0f;   ///< `(1 - beta2^t)^0.5`, computed in double and rounded to FP32.
  float FirstMomentWeight = 0.1f;     ///< `1 - beta1` (lerp's weight), computed in double and rounded to FP32.
  float Beta2 = 0.999f;               ///< Second-moment decay, rounded to FP32.
  float SecondMomentWeight = 0.001f;  ///< `1 - beta2`, computed in double and rounded to FP32.
  float Epsilon = 1e-8f;              ///< Denominator term, rounded to FP32.
  float L2 = 0.0f;                    ///< Weight decay added to the gradient (Adam); 0 for AdamW.
  float Decay = 1.0f;                 ///< `1 - lr*wd` computed in double, multiplies the weight (AdamW); 1 for Adam.
  /// With a step count kept in a tensor, StepSize and BiasCorrection2Sqrt are not used: the step
  /// computes them from these doubles and the count it reads, as AdamStepScalarsFor() does.
  AdamBiasCorrection BiasCorrection{};
};

/// The constants of one SGD step (optimizers::SGDStepScalarsFor()), each a double of PyTorch's
/// rounded once to FP32.
///
/// Per element, the ops of torch's single-tensor SGD (`foreach=False`), `fma` as for AdamStepScalars:
/// `d = WeightDecay != 0 ? fma(w, WeightDecay, g) : g`; with momentum
/// `b = FirstStep ? d : fma(d, GradientWeight, b*Momentum); d = Nesterov ? fma(b, Momentum, d) : b`;
/// then `w = fma(d, -LearningRate, w)`.
struct SGDStepScalars {
  float LearningRate = 0.01f;   ///< Step size.
  float Momentum = 0.0f;        ///< Momentum factor; 0: no buffer is read or written.
  float WeightDecay = 0.0f;     ///< L2 penalty added to the gradient.
  float GradientWeight = 1.0f;  ///< `1 - dampening`, computed in double: the weight of d in the buffer.
  bool Nesterov = false;        ///< Nesterov momentum.
  bool FirstStep = false;       ///< The momentum buffer starts as a copy of the first `d` (PyTorch).
};

/// The lists one fused optimizer step reads and writes, entry i of each belonging to parameter i.
///
/// Gradients are FP32. Parameters are FP32 (the FP32 master weights of a mixed-precision model), or
/// BF16 under a MasterFormat other than Float32. Each state is stored as its StateFormat says
/// (FP32 by default); the block-scaled formats carry their FP32 scales, one per block of
/// StateBlockSize elements (StateBlockCount()), in FirstStateScales / SecondStateScales.
/// LowPrecisionCopies is empty, or holds one entry per parameter: null for none, else an FP16 or
/// BF16 tensor that receives the updated parameter rounded to its dtype in the same pass (the copy
/// the next all-gather sends, as Megatron's distributed optimizer writes it).
///
/// StepCount is null, or the step count kept in a tensor, as torch's `capturable` and `fused`
/// optimizers keep `state["step"]`: a one-element FP32 tensor beside the parameters (host memory
/// for host lists, the parameters' GPU for device lists) holding the steps taken so far. The step
/// reads it, runs as step `count + 1` (Adam's bias corrections, SGD's first step when the count
/// is 0) and writes `count + 1` only when it steps: a step skipped for a found-inf flag leaves it
/// as it was. A device backend reads and writes it on the device, so the host never needs to
/// know whether the device skipped (the step can be captured in a CUDA graph).
struct OptimizerStepLists {
  std::span<const TensorPtr> Parameters{};          ///< FP32, updated in place.
  std::span<const TensorPtr> Gradients{};           ///< FP32, read only.
  std::span<const TensorPtr> FirstState{};          ///< Adam's exp_avg, SGD's momentum buffer (empty without momentum).
  std::span<const TensorPtr> SecondState{};         ///< Adam's exp_avg_sq; empty for SGD.
  std::span<const TensorPtr> LowPrecisionCopies{};  ///< Empty, or per parameter null / FP16 / BF16.
  TensorPtr StepCount{};                            ///< Null, or the step count (see above).
  StateFormat FirstStateFormat = StateFormat::Float32;   ///< How FirstState is stored.
  StateFormat SecondStateFormat = StateFormat::Float32;  ///< How SecondState is stored.
  std::span<const TensorPtr> FirstStateScales{};   ///< Block-scaled FirstState: per parameter, FP32 scales; else empty.
  std::span<const TensorPtr> SecondStateScales{};  ///< Block-scaled SecondState: likewise; else empty.
  /// Elements per scale of the block-scaled formats: a power of two from 32 to 2048 (checked
  /// whatever the formats).
  std::size_t StateBlockSize = kDefaultStateBlockSize;
  MasterFormat Masters = MasterFormat::Float32;  ///< How Parameters are stored.
  /// BFloat16Remainder: per parameter, the 16-bit remainders (a tensor of any two-byte dtype, read
  /// as raw bits); else empty.
  std::span<const TensorPtr> ParameterRemainders{};
  std::uint64_t RoundingSeed = 0;  ///< BFloat16StochasticRounding: the Philox key.
  /// BFloat16StochasticRounding: the step in the Philox counter (with a StepCount: count + 1 instead).
  std::uint64_t RoundingStep = 0;
  /// Empty (every offset 0), or one entry per parameter: the index that element 0 of the parameter
  /// has in the Philox counter of stochastic rounding, so element i draws the bits of element
  /// `offset + i`. A shard of a larger tensor passes the index of its first element in that
  /// tensor (FSDP passes each unit's ShardOffset()), so its bits do not depend on how the tensor
  /// is cut. Another size, or an offset plus the parameter's element count above 2^64 - 1, is an
  /// ArgumentError naming the field. Read only by BFloat16StochasticRounding.
  std::span<const std::uint64_t> ElementOffsets{};
};

}  // namespace mlframework
