#pragma once
// A multi-layer perceptron whose activations, weights and gradients live in a
// storage precision (FP32, FP16 or BF16), the way a GPU holds them: every
// matrix product runs in FP32 through BLAS (as tensor cores accumulate in
// FP32) and its result is rounded into the storage dtype at the layer boundary.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>

namespace fashion_mnist {

class Fp8Codec;

/// Gradient values produced by one or more backward passes, counted where they
/// are rounded into the storage dtype.
struct UnderflowCount {
  std::uint64_t nonzero = 0;  ///< Values that were non-zero in FP32 before rounding.
  std::uint64_t flushed = 0;  ///< Of those, the ones that rounded to zero in the storage dtype.
  /// flushed / nonzero (0 when nothing was counted).
  double Share() const { return nonzero == 0 ? 0.0 : static_cast<double>(flushed) / static_cast<double>(nonzero); }
};

/// Loss and accuracy of one forward pass over a batch.
struct BatchLoss {
  double mean_loss = 0.0;   ///< Mean cross-entropy per example, computed in FP32 (double sum).
  std::size_t correct = 0;  ///< Examples whose arg-max logit is the label.
  bool finite = true;       ///< False when a logit was Inf or NaN.
};

/// The MLP: Linear -> ReLU -> ... -> Linear, softmax cross-entropy on the logits.
class Mlp {
 public:
  /// @p sizes: input, hidden..., output. Weights are He-initialized from @p seed, times @p init_gain,
  /// computed in FP32 and rounded into @p storage.
  Mlp(std::vector<std::size_t> sizes, mlframework::DataType storage, std::uint64_t seed, float init_gain);

  /// Library tensors of the storage dtype, named "layerK.weight" ([out, in]) and "layerK.bias" ([out]).
  /// The optimizer updates them in place.
  const mlframework::GradientMap& Parameters() const { return parameters_; }
  /// Gradient tensors of the storage dtype, same names and shapes, written by Backward().
  const mlframework::GradientMap& Gradients() const { return gradients_; }
  /// Storage dtype.
  mlframework::DataType Storage() const { return storage_; }

  /// FP8 storage through @p codec (not owned; null turns it off), on a Float32 network: every
  /// forward quantizes the weights and each layer's input (E4M3 under HYBRID), every backward each
  /// layer's output gradient (E5M2), and the products run in FP32 on the decoded values. Biases,
  /// logits and parameter gradients stay FP32, as Transformer Engine keeps them in higher precision.
  /// ArgumentError naming `codec` on a network whose storage is not Float32.
  void UseFp8(Fp8Codec* codec);

  /// Re-reads the parameters (after an optimizer step) into the FP32 copies BLAS reads.
  void RefreshWeights();

  /// Forward pass over @p batch rows of @p inputs (FP32 values, rounded into the storage dtype on entry).
  /// Keeps what Backward() needs. Returns loss and accuracy against @p labels.
  BatchLoss Forward(std::span<const float> inputs, std::span<const std::uint8_t> labels, std::size_t batch);

  /// Backward pass of `seed * sum_b CE_b` for the last Forward(): gradients of the logits
  /// are `seed * (softmax - onehot)` computed in FP32 and rounded into the storage dtype,
  /// then every product is rounded likewise. @p seed carries the loss scale, the loss weight
  /// and 1/batch for a mean reduction. Counts non-zero values flushed to zero into @p count.
  void Backward(float seed, UnderflowCount& count);

 private:
  struct Layer {
    std::size_t in = 0;
    std::size_t out = 0;
    mlframework::TensorPtr weight;       // storage dtype, [out, in]
    mlframework::TensorPtr bias;         // storage dtype, [out]
    mlframework::TensorPtr weight_grad;  // storage dtype
    mlframework::TensorPtr bias_grad;    // storage dtype
    mlframework::TensorPtr weight_wide;  // FP32 copy read by BLAS (the parameter itself in FP32 mode)
    mlframework::TensorPtr bias_wide;
  };

  std::vector<std::size_t> sizes_;
  mlframework::DataType storage_;
  std::vector<Layer> layers_;
  mlframework::GradientMap parameters_;
  mlframework::GradientMap gradients_;
  // activations_[0] is the input; activations_[k + 1] is layer k's output (after ReLU, logits for the last).
  std::vector<xt::xtensor<float, 2>> activations_;
  std::vector<xt::xtensor<float, 2>> deltas_;  // gradient w.r.t. each layer's pre-activation
  xt::xtensor<float, 2> dinput_;               // gradient w.r.t. a layer's input
  xt::xtensor<float, 2> weight_grad_wide_;     // FP32 product before rounding
  std::vector<float> bias_grad_wide_;
  std::vector<std::uint8_t> labels_;
  std::size_t batch_ = 0;
  Fp8Codec* fp8_ = nullptr;  // FP8 storage when set (UseFp8)
};

}  // namespace fashion_mnist
