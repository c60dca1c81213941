// docs/fp8.md: FP8 tensors, the fused FP8 list kernels, scaling recipes, FP8 under FSDP.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/mlframework.hpp>

using namespace mlframework;
using distributed::fsdp::FSDP;
using distributed::fsdp::ShardingStrategy;

// FP32 values into the two FP8 formats, and back.
std::vector<TensorPtr> Float8Casts() {
  auto x = FromVector({1.0f, 300.0f, 1e6f}, {3}, DataType::Float32);
  auto e4m3 = x->CastTo(DataType::Float8E4M3FN);  // {1, 288, 448}: saturates, as torch 2.15 does
  auto e5m2 = x->CastTo(DataType::Float8E5M2);    // {1, 320, inf}
  auto back = e4m3->CastTo(DataType::BFloat16);   // exact
  return {e4m3, e5m2, back};
}

// scale, scale_inv, amax: FP32 tensors of one value per tensor of the lists, on their device
float CastToFloat8(std::span<const TensorPtr> weights, std::span<const TensorPtr> fp8,
                   std::span<const TensorPtr> decoded, const TensorPtr& scale, const TensorPtr& scale_inv,
                   const TensorPtr& amax) {
  Amax(weights, amax);                            // amax[i] = max |weights[i]|
  ScaledCastToFloat8(weights, fp8, scale, amax);  // fp8[i] = sat(w[i] * scale[i]), amax in the same pass
  DequantizeFloat8(fp8, decoded, scale_inv);      // float(fp8[i]) * scale_inv[i] into FP32/FP16/BF16
  return ListAmax(weights);                       // over the whole list, on the host
}

// fc1's weight cast to FP8 on every step with Transformer Engine's delayed scaling
std::vector<std::byte> TrainFc1InFp8(const TensorPtr& weight, const TensorPtr& grad_out, int steps) {
  fp8::DelayedScaling recipe({.Margin = 0, .Fp8Format = fp8::Format::HYBRID, .AmaxHistoryLen = 16});
  recipe.Register("fc1.weight", fp8::TensorRole::Forward, *weight);       // state on weight's device
  recipe.Register("fc1.grad_out", fp8::TensorRole::Gradient, *grad_out);  // E5M2 under HYBRID
  auto w8 = Zeros(weight->GetShape(), recipe.Float8TypeOf("fc1.weight"), weight->GetDevice());
  for (int step = 0; step < steps; ++step) {
    recipe.Quantize(std::vector<std::string>{"fc1.weight"}, std::vector{weight}, std::vector{w8});
    // ... compute on w8 (decode with recipe.Dequantize or multiply by recipe.ScaleInv(name)) ...
    recipe.UpdateScales();  // after the step, as Transformer Engine does
  }
  return recipe.StateDict();  // a checkpoint of the scales and amax histories
}

// A weight as MXFP8: E4M3 elements in w8 (the weight's shape) and one E8M0 byte per block
std::vector<std::uint8_t> WeightInMxfp8(const TensorPtr& weight, const TensorPtr& w8) {
  const fp8::MXFP8BlockScaling mx(DataType::Float8E4M3FN);
  std::vector<std::uint8_t> scales(fp8::MXFP8BlockScaling::ScaleCount(weight->GetShape()));
  mx.Quantize(*weight, *w8, scales);  // w8 * 2^(scales - 127) is the weight, rounded
  return scales;
}

// one FSDP unit gathered as FP8: one byte per element on the wire
TensorPtr GatherInFp8(std::shared_ptr<distributed::IProcessGroup> world, const TensorPtr& w,
                      fp8::IScalingRecipe& recipe) {
  FSDP fsdp(std::move(world), {.Strategy = ShardingStrategy::FullShard, .ParamDType = DataType::Float8E4M3FN});
  auto& layer = fsdp.RegisterUnit("layer1", {{"weight", w}});
  layer.Gather();
  TensorPtr w8 = layer.Parameters().at("weight");  // E4M3 values w * scale
  TensorPtr w32 = Zeros(w8->GetShape(), DataType::Float32, w8->GetDevice());
  DequantizeFloat8({&w8, 1}, {&w32, 1}, layer.Float8ScaleInverses().at("weight"));
  // ... forward and backward on w8 / w32, layer.ReduceGradients(grads) in FP32 ...
  layer.Release();
  fsdp.AgreeAmax(recipe);  // activations' and gradients' amaxes, before recipe.UpdateScales()
  return w32;
}
