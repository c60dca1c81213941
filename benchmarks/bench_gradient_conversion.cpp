// GradientConversionLayer::ProcessGradients against its limits, all in one run:
//
// - BM_CopyFP32Loop / BM_CopyFP32Memcpy: copy kernels over as many threads as the
//   kernels use (an element loop; memcpy of 32K-element chunks); the faster one's
//   bytes_per_second (read + write) is the copy bandwidth of the minimal-traffic time.
// - BM_ProcessGradients: the layer with clipping on a GPT-style FP16 gradient
//   list of 2^26 (64M) elements: pass 1 reads 2 bytes per element, pass 2 reads
//   2 and writes 4. Minimal-traffic time = elements * 8 bytes / copy bandwidth.
// - BM_TwoPassKernels: the same two fused kernels called directly (layer overhead).
// - BM_NaivePipeline: spec 003 done the naive way, one pass per step with
//   intermediate tensors: check, unscale (FP16), norm, clip (FP16), convert (FP32).
//
// Run: bench_gradient_conversion --benchmark_format=json > out.json; the ratios
// are computed from the JSON (see docs/BENCHMARKS.md).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

namespace {

using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::TensorPtr;
namespace cpu = mlframework::backends::cpu;
namespace mp = mlframework::optimizers::mixed_precision;

constexpr std::size_t kModel = 1024;
constexpr std::size_t kLayers = 4;
constexpr std::size_t kVocab = 16330;  // makes the list exactly 2^26 elements

// GPT-2 style parameter shapes: per block two layer norms, fused QKV, attention projection,
// MLP up and down projections (with biases), plus token embedding and final layer norm.
std::vector<std::pair<std::string, mlframework::Shape>> GptShapes() {
  std::vector<std::pair<std::string, mlframework::Shape>> shapes;
  shapes.push_back({"wte", {kVocab, kModel}});
  for (std::size_t l = 0; l < kLayers; ++l) {
    std::string p = "h";  // built by appends: GCC 12's -Wrestrict misfires on "h" + ... + "."
    p += std::to_string(l);
    p += '.';
    shapes.push_back({p + "ln_1.weight", {kModel}});
    shapes.push_back({p + "ln_1.bias", {kModel}});
    shapes.push_back({p + "attn.c_attn.weight", {kModel, 3 * kModel}});
    shapes.push_back({p + "attn.c_attn.bias", {3 * kModel}});
    shapes.push_back({p + "attn.c_proj.weight", {kModel, kModel}});
    shapes.push_back({p + "attn.c_proj.bias", {kModel}});
    shapes.push_back({p + "ln_2.weight", {kModel}});
    shapes.push_back({p + "ln_2.bias", {kModel}});
    shapes.push_back({p + "mlp.c_fc.weight", {kModel, 4 * kModel}});
    shapes.push_back({p + "mlp.c_fc.bias", {4 * kModel}});
    shapes.push_back({p + "mlp.c_proj.weight", {4 * kModel, kModel}});
    shapes.push_back({p + "mlp.c_proj.bias", {kModel}});
  }
  shapes.push_back({"ln_f.weight", {kModel}});
  shapes.push_back({"ln_f.bias", {kModel}});
  return shapes;
}

// Scaled FP16 gradients (loss scale 65536, gradient magnitudes around 1e-3): finite, and with a
// global norm far above MaxGradNorm so every step clips.
const GradientMap& Gradients() {
  static const GradientMap kGradients = [] {
    GradientMap map;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 64.0f);
    std::vector<mlframework::Float16> pool(1 << 16);
    for (auto& v : pool) {
      v = mlframework::Float16(normal(rng));
    }
    for (const auto& [name, shape] : GptShapes()) {
      TensorPtr tensor = cpu::Empty(shape, DataType::Float16);
      auto elements = cpu::Elements<DataType::Float16>(*tensor);
      for (std::size_t i = 0; i < elements.size(); ++i) {
        elements[i] = pool[(i * 7919 + name.size()) & (pool.size() - 1)];
      }
      map.emplace(name, tensor);
    }
    return map;
  }();
  return kGradients;
}

std::size_t ElementTotal() {
  std::size_t total = 0;
  for (const auto& [name, tensor] : Gradients()) {
    total += tensor->Size();
  }
  return total;
}

mp::MixedPrecisionOptions Options() {
  return mp::MixedPrecisionOptions{.InitialLossScale = 65536.0f, .EnableGradientClipping = true, .MaxGradNorm = 1.0f};
}

// GCC would turn the loop below into a memcpy call; clang has no such attribute and keeps the loop.
#if defined(__clang__)
#define MLFW_BENCH_NO_MEMCPY_IDIOM
#else
#define MLFW_BENCH_NO_MEMCPY_IDIOM __attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif

// A plain element-by-element copy, split over hardware_concurrency threads like the kernels'
// OpenMP team. Kept a loop (not memcpy) so stores are ordinary stores, as in the kernels.
MLFW_BENCH_NO_MEMCPY_IDIOM void CopyRange(const float* src, float* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    dst[i] = src[i];
  }
}

// The same copy as memcpy calls of 32K elements (bench_multi_tensor's limit/copy kernel).
void MemcpyRange(const float* src, float* dst, std::size_t count) {
  constexpr std::size_t kChunk = 32768;
  for (std::size_t i = 0; i < count; i += kChunk) {
    std::memcpy(dst + i, src + i, std::min(kChunk, count - i) * sizeof(float));
  }
}

template <void (*Copy)(const float*, float*, std::size_t)>
void ParallelCopy(const float* src, float* dst, std::size_t count) {
  const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> team;
  const std::size_t per = (count + threads - 1) / threads;
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t begin = std::min(count, t * per);
    const std::size_t end = std::min(count, begin + per);
    team.emplace_back([=] { Copy(src + begin, dst + begin, end - begin); });
  }
  for (auto& thread : team) {
    thread.join();
  }
}

// Copy bandwidth (bytes read + written per second); the ratios use the faster of the two copies.
template <void (*Copy)(const float*, float*, std::size_t)>
void BM_CopyFP32(benchmark::State& state) {
  const std::size_t n = ElementTotal();
  std::vector<float> src(n, 1.5f);
  std::vector<float> dst(n, 0.0f);
  for (auto _ : state) {
    ParallelCopy<Copy>(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 2 * sizeof(float)));
  state.counters["elements"] = static_cast<double>(n);
}

void BM_ProcessGradients(benchmark::State& state) {
  const GradientMap& gradients = Gradients();
  mp::GradientConversionLayer layer(Options());
  // Steady state of a training run: the first step allocates the FP32 output buffers, later
  // steps reuse them (the result of each step is released before the next).
  layer.ProcessGradients(gradients);
  for (auto _ : state) {
    auto result = layer.ProcessGradients(gradients);
    if (result.ShouldSkip || result.Gradients.size() != gradients.size()) {
      state.SkipWithError("unexpected skip");
      break;
    }
    benchmark::DoNotOptimize(result.Gradients.begin()->second.get());
  }
  const std::size_t n = ElementTotal();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 8));  // minimal traffic
  state.counters["elements"] = static_cast<double>(n);
  state.counters["clips"] = static_cast<double>(layer.ClipCount());
}

// The cheapest useful observer: it keeps the norm of each step (what a metrics hook does).
class NormObserver final : public mlframework::ITrainingObserver {
 public:
  void OnStep(const mlframework::StepEvent& event) override { last_norm = event.GradientNorm.value_or(-1.0f); }
  float last_norm = 0.0f;
};

// BM_ProcessGradients with an observer registered (the clipping event and OnStep every step).
void BM_ProcessGradients_Observed(benchmark::State& state) {
  const GradientMap& gradients = Gradients();
  mp::GradientConversionLayer layer(Options());
  auto observer = std::make_shared<NormObserver>();
  layer.AddObserver(observer);
  layer.ProcessGradients(gradients);
  for (auto _ : state) {
    auto result = layer.ProcessGradients(gradients);
    if (result.ShouldSkip || result.Gradients.size() != gradients.size()) {
      state.SkipWithError("unexpected skip");
      break;
    }
    benchmark::DoNotOptimize(result.Gradients.begin()->second.get());
  }
  const std::size_t n = ElementTotal();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 8));  // minimal traffic
  state.counters["elements"] = static_cast<double>(n);
  state.counters["norm"] = static_cast<double>(observer->last_norm);
}

void BM_TwoPassKernels(benchmark::State& state) {
  const std::vector<TensorPtr> src = mlframework::TensorList(Gradients());
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& tensor : src) {
    dst.push_back(cpu::Empty(tensor->GetShape(), DataType::Float32));
  }
  const float inverse = 1.0f / 65536.0f;
  for (auto _ : state) {
    const auto measured = mlframework::CheckAndSumSquares(src, inverse);
    const auto norm = static_cast<float>(std::sqrt(measured.SumOfSquares));
    const float coef = norm > 1.0f ? 1.0f / (norm + 1e-6f) : 1.0f;
    benchmark::DoNotOptimize(mlframework::CastInto(src, dst, inverse * coef));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * ElementTotal() * 8));
}

void BM_NaivePipeline(benchmark::State& state) {
  const std::vector<TensorPtr> src = mlframework::TensorList(Gradients());
  const float inverse = 1.0f / 65536.0f;
  for (auto _ : state) {
    const bool overflow = mlframework::HasNonFinite(src);                                  // check
    const auto unscaled = mlframework::Cast(src, DataType::Float16, inverse);              // unscale
    const auto norm = static_cast<float>(std::sqrt(mlframework::SumOfSquares(unscaled)));  // norm
    const float coef = norm > 1.0f ? 1.0f / (norm + 1e-6f) : 1.0f;
    const auto clipped = mlframework::Cast(unscaled, DataType::Float16, coef);  // clip
    const auto fp32 = mlframework::Cast(clipped, DataType::Float32);            // convert
    benchmark::DoNotOptimize(overflow);
    benchmark::DoNotOptimize(fp32.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * ElementTotal() * 8));
}

}  // namespace

BENCHMARK(BM_CopyFP32<CopyRange>)->Name("BM_CopyFP32Loop")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CopyFP32<MemcpyRange>)->Name("BM_CopyFP32Memcpy")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ProcessGradients)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ProcessGradients_Observed)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TwoPassKernels)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NaivePipeline)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
