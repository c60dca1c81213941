// FSDP training of a small MLP with FP16 forward and dynamic loss scaling.
//
//   mpiexec -n 2 build/samples/fsdp_training/fsdp_training      (any number of ranks)
//   build/samples/fsdp_training/fsdp_training                   (one process)
//
// Each layer is one FSDP unit: its FP32 master weights are sharded across ranks, gathered in
// FP16 before the forward pass and released after the backward pass; gradients come out of
// the "framework" in FP16 (scaled by the loss scale), are reduce-scattered into FP32 shards,
// unscaled and checked for overflow (agreed by all ranks), clipped by the global norm and
// applied by Adam on the local shards. Rank 0 prints loss and scale per step.
#include <cmath>
#include <cstdio>
#include <vector>

#include <mlframework/mlframework.hpp>

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::GradientMap;

namespace {

constexpr std::size_t kIn = 16, kHidden = 32, kOut = 4, kGlobalBatch = 32;

std::vector<float> Wave(std::size_t count, float a, float b, float amplitude) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = amplitude * std::sin(a * static_cast<float>(i) + b);
  return v;
}

GradientMap Layer(std::size_t out, std::size_t in, float seed) {
  return {{"weight", mlframework::FromVector(
                         Wave(out * in, 0.77f + seed, seed, 1.0f / std::sqrt(static_cast<float>(in))), {out, in})},
          {"bias", mlframework::Zeros({out})}};
}

// The framework's part: forward and backward of relu(x W1^T + b1) W2^T + b2 with MSE loss on
// this rank's samples. Gradients of (loss * scale) are returned in FP16, as an FP16 backward
// pass would produce them (large scales overflow to infinity here, which loss scaling handles).
struct Result {
  double loss = 0.0;
  GradientMap layer1, layer2;
};

Result ForwardBackward(const GradientMap& l1, const GradientMap& l2, std::size_t first, std::size_t count, int step,
                       float scale) {
  const auto w1 = l1.at("weight")->ToFloatVector(), b1 = l1.at("bias")->ToFloatVector();
  const auto w2 = l2.at("weight")->ToFloatVector(), b2 = l2.at("bias")->ToFloatVector();
  std::vector<float> gw1(w1.size()), gb1(b1.size()), gw2(w2.size()), gb2(b2.size());
  double loss = 0.0;
  const float norm = 1.0f / static_cast<float>(count * kOut);
  for (std::size_t b = first; b < first + count; ++b) {
    std::vector<float> x(kIn), h(kHidden), dh(kHidden, 0.0f);
    for (std::size_t i = 0; i < kIn; ++i)
      x[i] = std::sin(0.3f * static_cast<float>(b * kIn + i + static_cast<std::size_t>(step % 4)));
    for (std::size_t j = 0; j < kHidden; ++j) {
      float acc = b1[j];
      for (std::size_t i = 0; i < kIn; ++i) acc += w1[j * kIn + i] * x[i];
      h[j] = acc > 0.0f ? acc : 0.0f;
    }
    for (std::size_t o = 0; o < kOut; ++o) {
      float pred = b2[o];
      for (std::size_t j = 0; j < kHidden; ++j) pred += w2[o * kHidden + j] * h[j];
      const float target = 0.5f * x[o] - 0.25f * x[(o + 3) % kIn];
      const float err = pred - target;
      loss += static_cast<double>(err * err * norm);
      const float dpred = 2.0f * err * norm * scale;
      gb2[o] += dpred;
      for (std::size_t j = 0; j < kHidden; ++j) {
        gw2[o * kHidden + j] += dpred * h[j];
        dh[j] += dpred * w2[o * kHidden + j];
      }
    }
    for (std::size_t j = 0; j < kHidden; ++j) {
      if (h[j] <= 0.0f) continue;
      gb1[j] += dh[j];
      for (std::size_t i = 0; i < kIn; ++i) gw1[j * kIn + i] += dh[j] * x[i];
    }
  }
  auto fp16 = [](const std::vector<float>& g, mlframework::Shape shape) {
    return mlframework::FromVector(g, std::move(shape), DataType::Float16);
  };
  return {loss,
          {{"weight", fp16(gw1, {kHidden, kIn})}, {"bias", fp16(gb1, {kHidden})}},
          {{"weight", fp16(gw2, {kOut, kHidden})}, {"bias", fp16(gb2, {kOut})}}};
}

}  // namespace

int main() {
  try {
    const auto group = dist::MpiAvailable() ? dist::MakeMpiProcessGroup() : dist::MakeLocalProcessGroup();
    const int rank = group->Rank();
    const int ranks = group->WorldSize();

    fsdp::FSDP model(group, {.Strategy = fsdp::ShardingStrategy::FullShard});
    auto& layer1 = model.RegisterUnit("layer1", Layer(kHidden, kIn, 0.1f));
    auto& layer2 = model.RegisterUnit("layer2", Layer(kOut, kHidden, 0.2f));
    // FP16 forward (gathers travel in 16 bits) and dynamic loss scaling from 2^24: the first
    // steps overflow FP16 gradients, every rank skips them together and the scale backs off.
    fsdp::FSDPAmpIntegration amp(
        model, fsdp::FSDPMixedPrecisionConfig{
                   .InitialLossScale = 16777216.0f, .MaxLossScale = 16777216.0f, .LossScaleSteps = 10});
    mlframework::optimizers::Adam adam(model.ShardedParameters(), {.LearningRate = 5e-3f});

    const std::size_t per_rank = kGlobalBatch / static_cast<std::size_t>(ranks);
    if (rank == 0)
      std::printf("fsdp_training: %d rank(s), %s, %zu parameters\n", ranks, std::string(group->BackendName()).c_str(),
                  layer1.NumElements() + layer2.NumElements());
    for (int step = 0; step < 40; ++step) {
      layer1.Gather();
      layer2.Gather();
      amp.ApplyMixedPrecision(layer1);  // already FP16: the integration set the gather dtype
      amp.ApplyMixedPrecision(layer2);
      const float scale = amp.Manager().CurrentLossScale();
      Result result;
      {
        // Rank-local user code: if it throws on one rank, end the job instead of leaving the
        // other ranks waiting in the next collective.
        dist::AbortGuard guard(*group, "forward/backward of step " + std::to_string(step));
        result = ForwardBackward(layer1.Parameters(), layer2.Parameters(), per_rank * static_cast<std::size_t>(rank),
                                 per_rank, step, scale);
      }
      layer1.ReduceGradients(result.layer1);
      layer2.ReduceGradients(result.layer2);
      layer1.Release();
      layer2.Release();
      const double loss = group->AllReduceHost(result.loss, dist::ReduceOp::Sum) / ranks;

      const bool skipped = amp.Manager().UnscaleAndCheckOverflow(model.LocalGradients());
      double norm = 0.0;
      if (skipped) {
        model.ZeroGrad();
      } else {
        norm = model.ClipGradNorm(1.0f);
        model.Step(adam);
      }
      if (rank == 0) {
        std::printf("step %2d  loss %.6f  scale %10.0f  %s", step, loss, static_cast<double>(scale),
                    skipped ? "overflow: skipped on every rank" : "");
        if (!skipped) std::printf("grad norm %.4f", norm);
        std::printf("  -> next scale %.0f\n", static_cast<double>(amp.Manager().CurrentLossScale()));
      }
    }
    return 0;
  } catch (const mlframework::Error& error) {
    std::fprintf(stderr, "fsdp_training: %s\n", error.what());
    return 1;
  }
}
