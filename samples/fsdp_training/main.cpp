// FSDP training of a small MLP with FP16 forward and dynamic loss scaling.
//
//   mpiexec -n 2 build/samples/fsdp_training/fsdp_training      (any number of ranks)
//   build/samples/fsdp_training/fsdp_training                   (one process)
//
// Each layer is one FSDP unit: its FP32 master weights are sharded across ranks and gathered
// in FP16. The training loop drives FSDP the way a framework's module hooks would
// (FSDP::PreForward / PostForward / PreBackward / PostBackward around each layer), with
// prefetching on, so each gather and gradient reduction overlaps the neighbouring layer's
// compute, and two micro-batches per step whose gradients are summed locally and
// reduce-scattered once. Gradients come out of the "framework" in FP16 (scaled by the loss
// scale), land in FP32 shards, are unscaled and checked for overflow (agreed by all ranks),
// clipped by the global norm and applied by Adam on the local shards. Rank 0 prints loss and
// scale per step.
#include <cmath>
#include <cstdio>
#include <string>
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

// The framework's part: relu(x W1^T + b1) W2^T + b2 with MSE loss on a slice of samples, as
// two modules whose forward and backward run separately, so that FSDP's hooks can wrap each
// one (as a framework's module hooks would). Gradients of (loss * scale) come out in FP16, as
// an FP16 backward pass would produce them (large scales overflow to infinity here, which loss
// scaling handles).
struct Activations {
  std::size_t first = 0, count = 0;
  std::vector<float> x, h, pred, dh;  // per sample: kIn, kHidden, kOut, kHidden
  double loss = 0.0;
};

GradientMap Fp16(const std::vector<float>& gw, mlframework::Shape shape, const std::vector<float>& gb) {
  const std::size_t out = shape[0];
  return {{"weight", mlframework::FromVector(gw, std::move(shape), DataType::Float16)},
          {"bias", mlframework::FromVector(gb, {out}, DataType::Float16)}};
}

void Forward1(const GradientMap& l1, Activations& a, int step) {
  const auto w1 = l1.at("weight")->ToFloatVector(), b1 = l1.at("bias")->ToFloatVector();
  a.x.assign(a.count * kIn, 0.0f);
  a.h.assign(a.count * kHidden, 0.0f);
  for (std::size_t s = 0; s < a.count; ++s) {
    const std::size_t b = a.first + s;
    for (std::size_t i = 0; i < kIn; ++i)
      a.x[s * kIn + i] = std::sin(0.3f * static_cast<float>(b * kIn + i + static_cast<std::size_t>(step % 4)));
    for (std::size_t j = 0; j < kHidden; ++j) {
      float acc = b1[j];
      for (std::size_t i = 0; i < kIn; ++i) acc += w1[j * kIn + i] * a.x[s * kIn + i];
      a.h[s * kHidden + j] = acc > 0.0f ? acc : 0.0f;
    }
  }
}

void Forward2(const GradientMap& l2, Activations& a) {
  const auto w2 = l2.at("weight")->ToFloatVector(), b2 = l2.at("bias")->ToFloatVector();
  a.pred.assign(a.count * kOut, 0.0f);
  for (std::size_t s = 0; s < a.count; ++s) {
    for (std::size_t o = 0; o < kOut; ++o) {
      float pred = b2[o];
      for (std::size_t j = 0; j < kHidden; ++j) pred += w2[o * kHidden + j] * a.h[s * kHidden + j];
      a.pred[s * kOut + o] = pred;
    }
  }
}

// Loss and the gradients of layer 2 (and dL/dh for layer 1); @p norm is 1 / (rank samples x kOut).
GradientMap Backward2(const GradientMap& l2, Activations& a, float norm, float scale) {
  const auto w2 = l2.at("weight")->ToFloatVector();
  std::vector<float> gw2(kOut * kHidden), gb2(kOut);
  a.dh.assign(a.count * kHidden, 0.0f);
  a.loss = 0.0;
  for (std::size_t s = 0; s < a.count; ++s) {
    const float* x = &a.x[s * kIn];
    for (std::size_t o = 0; o < kOut; ++o) {
      const float target = 0.5f * x[o] - 0.25f * x[(o + 3) % kIn];
      const float err = a.pred[s * kOut + o] - target;
      a.loss += static_cast<double>(err * err * norm);
      const float dpred = 2.0f * err * norm * scale;
      gb2[o] += dpred;
      for (std::size_t j = 0; j < kHidden; ++j) {
        gw2[o * kHidden + j] += dpred * a.h[s * kHidden + j];
        a.dh[s * kHidden + j] += dpred * w2[o * kHidden + j];
      }
    }
  }
  return Fp16(gw2, {kOut, kHidden}, gb2);
}

GradientMap Backward1(const Activations& a) {
  std::vector<float> gw1(kHidden * kIn), gb1(kHidden);
  for (std::size_t s = 0; s < a.count; ++s) {
    for (std::size_t j = 0; j < kHidden; ++j) {
      if (a.h[s * kHidden + j] <= 0.0f) continue;
      gb1[j] += a.dh[s * kHidden + j];
      for (std::size_t i = 0; i < kIn; ++i) gw1[j * kIn + i] += a.dh[s * kHidden + j] * a.x[s * kIn + i];
    }
  }
  return Fp16(gw1, {kHidden, kIn}, gb1);
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
    // The overlapped schedule: while a layer computes, the next layer's gather (forward) or the
    // previous layer's gather and the last layer's gradient reduction (backward) are in flight.
    model.SetPrefetch({.Forward = true, .Backward = true});
    constexpr int kMicroBatches = 2;  // gradient accumulation: one reduction per step
    const std::size_t per_micro = per_rank / kMicroBatches;
    // The micro-batches' gradients sum to this rank's mean; the reduction averages over ranks.
    const float loss_norm = 1.0f / static_cast<float>(per_rank * kOut);
    for (int step = 0; step < 40; ++step) {
      const float scale = amp.Manager().CurrentScale();
      double local_loss = 0.0;
      for (int micro = 0; micro < kMicroBatches; ++micro) {
        // Only the last micro-batch reduce-scatters (the sum of both): PostBackward of the
        // earlier one adds the gradients locally and communicates nothing.
        model.SetRequiresGradientSync(micro == kMicroBatches - 1);
        Activations a;
        a.first = per_rank * static_cast<std::size_t>(rank) + per_micro * static_cast<std::size_t>(micro);
        a.count = per_micro;
        // What a framework's module hooks call around each layer; the layers' own code runs
        // between them. Rank-local user code sits in an AbortGuard: if it throws on one rank,
        // the job ends instead of leaving the other ranks waiting in the next collective.
        dist::AbortGuard guard(*group, "forward/backward of step " + std::to_string(step));
        model.PreForward(0);              // waits for layer1's gather, starts layer2's
        amp.ApplyMixedPrecision(layer1);  // already FP16: the integration set the gather dtype
        Forward1(layer1.Parameters(), a, step);
        model.PostForward(0);  // releases layer1
        model.PreForward(1);
        amp.ApplyMixedPrecision(layer2);
        Forward2(layer2.Parameters(), a);
        model.PostForward(1);  // keeps layer2 gathered: its backward is next
        model.PreBackward(1);  // starts layer1's gather
        const GradientMap g2 = Backward2(layer2.Parameters(), a, loss_norm, scale);
        model.PostBackward(1, g2);  // starts layer2's reduction, releases it
        model.PreBackward(0);       // layer1's gather arrived meanwhile
        const GradientMap g1 = Backward1(a);
        model.PostBackward(0, g1);  // waits for layer2's reduction, starts layer1's
        model.FinishBackward();     // waits for layer1's reduction
        local_loss += a.loss;
      }
      const double loss = group->AllReduceHost(local_loss, dist::ReduceOp::Sum) / ranks;

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
        std::printf("  -> next scale %.0f\n", static_cast<double>(amp.Manager().CurrentScale()));
      }
    }
    return 0;
  } catch (const mlframework::Error& error) {
    std::fprintf(stderr, "fsdp_training: %s\n", error.what());
    return 1;
  }
}
