// GradScaler's own cost per step against the fused kernel it is built on, in the same run.
//
// Gradient list: a GPT-style model (d_model 1024, 5 transformer blocks, an embedding)
// with 64M elements (67,113,984) in 66 tensors. Each pair compares:
//   - FP32: GradScaler::Step (static scale 1, so repeated in-place unscaling leaves the
//     values unchanged; the kernel multiplies all the same) vs UnscaleAndCheck alone;
//   - FP16: GradScaler::Step (dynamic scale 65536) vs CastInto(FP16 -> FP32, 1/65536) alone
//     into preallocated buffers.
// The optimizer's own step is a no-op here, so the difference is the scaler's overhead:
// target GradScaler / kernel <= 1.1.
//
// The *_Paired benchmarks time both in the same iteration, alternating which goes first,
// and report the ratio of the summed times: on a shared, loaded machine the separate
// benchmarks drift with the load, paired samples see the same load.
//
// The *_AmaxPaired benchmarks pair the same work with amax tracking off ("kernel_ms") and on
// ("scaler_ms"), so "ratio" is the cost of the amax (target <= 1.03): the fused kernels alone
// (FP32 unscale + check in place, FP16 -> FP32 cast + check) and GradScaler's step.
//
// BM_Context_Iteration/{0,1} is one GradScalerContext iteration on small lists (0: the demo MLP's
// 4 FP32 gradients, 101,770 elements; 1: 1,000 FP32 tensors of 1,000 elements) at a loss scale of
// 65536: the gradients are refilled untimed, then the context scales the loss, steps a no-op
// optimizer (unscale, check, skip decision) and updates the scale. benchmarks/
// compare_torch_grad_scaler.py times torch.amp.GradScaler("cpu") on the same lists the same way.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/mlframework.hpp>

namespace {

using namespace mlframework;

constexpr std::size_t kModel = 1024;
constexpr std::size_t kBlocks = 5;
constexpr std::size_t kVocab = 4031;

GradientMap GptGradients(DataType dtype) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  GradientMap grads;
  auto add = [&](const std::string& name, Shape shape) {
    std::vector<float> values(ElementCount(shape));
    for (float& v : values) {
      v = normal(rng);
    }
    grads.emplace(name, FromVector(values, std::move(shape), dtype));
  };
  add("embedding", {kVocab, kModel});
  for (std::size_t b = 0; b < kBlocks; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    add(p + "ln1.weight", {kModel});
    add(p + "ln1.bias", {kModel});
    add(p + "attn.qkv.weight", {kModel, 3 * kModel});
    add(p + "attn.qkv.bias", {3 * kModel});
    add(p + "attn.proj.weight", {kModel, kModel});
    add(p + "attn.proj.bias", {kModel});
    add(p + "ln2.weight", {kModel});
    add(p + "ln2.bias", {kModel});
    add(p + "mlp.fc1.weight", {kModel, 4 * kModel});
    add(p + "mlp.fc1.bias", {4 * kModel});
    add(p + "mlp.fc2.weight", {4 * kModel, kModel});
    add(p + "mlp.fc2.bias", {kModel});
    add(p + "ln_f.scale", {kModel});
  }
  return grads;
}

// The same 66 names with one element each: what is left is the scaler's fixed cost per step.
GradientMap TinyGradients(DataType dtype) {
  GradientMap grads;
  for (const auto& [name, g] : GptGradients(DataType::BFloat16)) {
    grads.emplace(name, FromVector({0.5f}, {1}, dtype));
  }
  return grads;
}

std::size_t Elements(const GradientMap& grads) {
  std::size_t n = 0;
  for (const auto& [name, g] : grads) {
    n += g->Size();
  }
  return n;
}

// Holds the gradients; its step is free, so only the scaler is timed.
class NullOptimizer final : public amp::IOptimizer {
 public:
  explicit NullOptimizer(GradientMap g) : gradients_(std::move(g)) {}
  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& g) override { applied_ = g; }
  void Step() override { benchmark::DoNotOptimize(applied_); }

 private:
  GradientMap gradients_;
  GradientMap applied_;
};

void Report(benchmark::State& state, std::size_t elements) {
  state.counters["elements"] = static_cast<double>(elements);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(elements));
}

void BM_Fp32_FusedUnscaleAndCheck(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float32);
  const std::vector<TensorPtr> list = TensorList(grads);
  for (auto _ : state) {
    benchmark::DoNotOptimize(UnscaleAndCheck(list, 1.0f));
  }
  Report(state, Elements(grads));
}

void BM_Fp32_GradScalerStep(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float32);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler = amp::GradScaler::Static(1.0f);
  const TensorPtr loss = Scalar(1.0f);
  scaler.Scale(loss);
  scaler.Step(optimizer);  // steady state: the scaler's FP32 buffers exist, as after the first step of training
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.Scale(loss));
    benchmark::DoNotOptimize(scaler.Step(optimizer));
  }
  Report(state, Elements(grads));
}

void BM_Fp16_FusedCastIntoFp32(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float16);
  const std::vector<TensorPtr> src = TensorList(grads);
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& g : src) {
    dst.push_back(Zeros(g->GetShape(), DataType::Float32));
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(CastInto(src, dst, 1.0f / 65536.0f));
  }
  Report(state, Elements(grads));
}

void BM_Fp16_GradScalerStep(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float16);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 65536.0f, .GrowthInterval = 1 << 30});
  const TensorPtr loss = Scalar(1.0f);
  scaler.Scale(loss);
  scaler.Step(optimizer);  // steady state: the scaler's FP32 buffers exist, as after the first step of training
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.Scale(loss));
    benchmark::DoNotOptimize(scaler.Step(optimizer));
  }
  Report(state, Elements(grads));
}

// The cheapest useful observer: it counts steps (what a metrics hook does at the least).
class CountingObserver final : public ITrainingObserver {
 public:
  void OnStep(const StepEvent& event) override { last_step = event.Step; }
  std::int64_t last_step = -1;
};

// BM_Fp16_GradScalerStep with an observer registered: the observed path (events built, the
// scale read before and after the update) against the plain one ("observers off" is the plain
// benchmark itself: registering none costs one empty() test per step).
void BM_Fp16_GradScalerStep_Observed(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float16);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 65536.0f, .GrowthInterval = 1 << 30});
  auto observer = std::make_shared<CountingObserver>();
  scaler.AddObserver(observer);
  const TensorPtr loss = Scalar(1.0f);
  scaler.Scale(loss);
  scaler.Step(optimizer);
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.Scale(loss));
    benchmark::DoNotOptimize(scaler.Step(optimizer));
  }
  benchmark::DoNotOptimize(observer->last_step);
  Report(state, Elements(grads));
}

// An overflow step (static scale, so every step overflows the same way): the fused cast, then
// the report's one extra read of the unscaled FP32 gradients. Against BM_Fp16_GradScalerStep
// this is the cost of an overflow report.
void BM_Fp16_GradScalerStep_OverflowReport(benchmark::State& state) {
  GradientMap grads = GptGradients(DataType::Float16);
  const TensorPtr& last = std::prev(grads.end())->second;
  std::vector<float> values = last->ToFloatVector();
  values.back() = std::numeric_limits<float>::infinity();
  last->CopyFromFloats(values);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler = amp::GradScaler::Static(65536.0f);
  const TensorPtr loss = Scalar(1.0f);
  scaler.Scale(loss);
  scaler.Step(optimizer);
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.Scale(loss));
    if (scaler.Step(optimizer)) {
      state.SkipWithError("the step did not overflow");
      break;
    }
  }
  state.counters["reported"] = static_cast<double>(scaler.LastOverflow()->Tensors.size());
  Report(state, Elements(grads));
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Times kernel() and scaler_step() back to back in each iteration (alternating the order).
template <typename Kernel, typename ScalerStep>
void Paired(benchmark::State& state, std::size_t elements, Kernel&& kernel, ScalerStep&& scaler_step) {
  double kernel_s = 0.0;
  double scaler_s = 0.0;
  bool kernel_first = true;
  for (auto _ : state) {
    double k = 0.0;
    double s = 0.0;
    if (kernel_first) {
      const auto t0 = Clock::now();
      kernel();
      const auto t1 = Clock::now();
      scaler_step();
      const auto t2 = Clock::now();
      k = Seconds(t0, t1);
      s = Seconds(t1, t2);
    } else {
      const auto t0 = Clock::now();
      scaler_step();
      const auto t1 = Clock::now();
      kernel();
      const auto t2 = Clock::now();
      s = Seconds(t0, t1);
      k = Seconds(t1, t2);
    }
    kernel_first = !kernel_first;
    kernel_s += k;
    scaler_s += s;
    state.SetIterationTime(k + s);
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["kernel_ms"] = 1e3 * kernel_s / n;
  state.counters["scaler_ms"] = 1e3 * scaler_s / n;
  state.counters["ratio"] = scaler_s / kernel_s;
  state.counters["elements"] = static_cast<double>(elements);
}

void BM_Fp32_Paired(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float32);
  const std::vector<TensorPtr> list = TensorList(grads);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler = amp::GradScaler::Static(1.0f);
  const TensorPtr loss = Scalar(1.0f);
  Paired(
      state, Elements(grads), [&] { benchmark::DoNotOptimize(UnscaleAndCheck(list, 1.0f)); },
      [&] {
        benchmark::DoNotOptimize(scaler.Scale(loss));
        benchmark::DoNotOptimize(scaler.Step(optimizer));
      });
}

void BM_Fp16_Paired(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float16);
  const std::vector<TensorPtr> src = TensorList(grads);
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& g : src) {
    dst.push_back(Zeros(g->GetShape(), DataType::Float32));
  }
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 65536.0f, .GrowthInterval = 1 << 30});
  const TensorPtr loss = Scalar(1.0f);
  scaler.Scale(loss);
  scaler.Step(optimizer);  // steady state: the scaler's FP32 buffers exist
  Paired(
      state, Elements(grads), [&] { benchmark::DoNotOptimize(CastInto(src, dst, 1.0f / 65536.0f)); },
      [&] {
        benchmark::DoNotOptimize(scaler.Scale(loss));
        benchmark::DoNotOptimize(scaler.Step(optimizer));
      });
}

// 64M-element GPT-like list, unscale + check in place, amax off vs on: the kernels alone.
void BM_Fp32_Kernel_AmaxPaired(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float32);
  const std::vector<TensorPtr> list = TensorList(grads);
  Paired(
      state, Elements(grads), [&] { benchmark::DoNotOptimize(UnscaleAndCheck(list, 1.0f)); },
      [&] { benchmark::DoNotOptimize(UnscaleCheckAndAmax(list, 1.0f)); });
}

// The FP16 list unscaled into FP32 buffers, amax off vs on.
void BM_Fp16_Kernel_AmaxPaired(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float16);
  const std::vector<TensorPtr> src = TensorList(grads);
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& g : src) {
    dst.push_back(Zeros(g->GetShape(), DataType::Float32));
  }
  Paired(
      state, Elements(grads), [&] { benchmark::DoNotOptimize(CastInto(src, dst, 1.0f / 65536.0f)); },
      [&] { benchmark::DoNotOptimize(CastIntoAndAmax(src, dst, 1.0f / 65536.0f)); });
}

// GradScaler::Step over the FP32 list (static scale 1), amax tracking off vs on.
void BM_Fp32_GradScaler_AmaxPaired(benchmark::State& state) {
  const GradientMap grads = GptGradients(DataType::Float32);
  NullOptimizer off_optimizer(grads);
  NullOptimizer on_optimizer(grads);
  amp::GradScaler off = amp::GradScaler::Static(1.0f);
  amp::GradScaler on = amp::GradScaler::Static(1.0f);
  on.SetAmaxTracking(true);
  const TensorPtr loss = Scalar(1.0f);
  const auto step = [&](amp::GradScaler& scaler, NullOptimizer& optimizer) {
    benchmark::DoNotOptimize(scaler.Scale(loss));
    benchmark::DoNotOptimize(scaler.Step(optimizer));
  };
  step(off, off_optimizer);
  step(on, on_optimizer);
  Paired(
      state, Elements(grads), [&] { step(off, off_optimizer); }, [&] { step(on, on_optimizer); });
  state.counters["amax"] = static_cast<double>(on.LastAmax().value_or(-1.0f));
}

void BM_Fp16_Tiny_FusedCastIntoFp32(benchmark::State& state) {
  const GradientMap grads = TinyGradients(DataType::Float16);
  const std::vector<TensorPtr> src = TensorList(grads);
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& g : src) {
    dst.push_back(Zeros(g->GetShape(), DataType::Float32));
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(CastInto(src, dst, 1.0f / 65536.0f));
  }
  Report(state, Elements(grads));
}

void BM_Fp16_Tiny_GradScalerStep(benchmark::State& state) {
  const GradientMap grads = TinyGradients(DataType::Float16);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 65536.0f, .GrowthInterval = 1 << 30});
  const TensorPtr loss = Scalar(1.0f);
  scaler.Scale(loss);
  scaler.Step(optimizer);
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.Scale(loss));
    benchmark::DoNotOptimize(scaler.Step(optimizer));
  }
  Report(state, Elements(grads));
}

// The small lists of BM_Context_Iteration: the demo MLP's gradients (784 -> 128 -> 10), or 1,000
// tensors of 1,000 elements (the same lists as compare_torch_grad_scaler.py).
GradientMap SmallListGradients(std::int64_t which) {
  GradientMap grads;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto add = [&](const std::string& name, Shape shape) {
    std::vector<float> values(ElementCount(shape));
    for (float& v : values) {
      v = 65536.0f * uniform(rng);
    }
    grads.emplace(name, FromVector(values, std::move(shape), DataType::Float32));
  };
  if (which == 0) {
    add("fc1.weight", {128, 784});
    add("fc1.bias", {128});
    add("fc2.weight", {10, 128});
    add("fc2.bias", {10});
  } else {
    for (int i = 0; i < 1000; ++i) {
      // Appended, not "p" + to_string(): GCC 12's -Wrestrict misfires on that concatenation.
      std::string name = "p";
      name += std::to_string(1000 + i);
      add(name, {1000});
    }
  }
  return grads;
}

// Median of the per-iteration times, in microseconds (the mean is what the benchmark reports;
// on a shared host the median is the figure to compare with the torch peer's).
double MedianMicroseconds(std::vector<double> seconds) {
  if (seconds.empty()) {
    return 0.0;
  }
  const auto middle = seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2);
  std::nth_element(seconds.begin(), middle, seconds.end());
  return 1e6 * *middle;
}

void BM_Context_Iteration(benchmark::State& state) {
  const GradientMap grads = SmallListGradients(state.range(0));
  const std::vector<TensorPtr> list = TensorList(grads);
  // Fresh values each iteration (the unscale writes in place), copied in untimed.
  const GradientMap source = SmallListGradients(state.range(0));
  const std::vector<TensorPtr> source_list = TensorList(source);
  NullOptimizer optimizer(grads);
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 65536.0f, .GrowthInterval = 1 << 30});
  const TensorPtr loss = Scalar(1.0f);
  std::vector<double> seconds;
  seconds.reserve(4096);
  for (auto _ : state) {
    CastInto(source_list, list, 1.0f);
    const auto t0 = Clock::now();
    {
      amp::GradScalerContext context(scaler, loss);
      benchmark::DoNotOptimize(context.Step(optimizer));
    }
    const double s = Seconds(t0, Clock::now());
    state.SetIterationTime(s);
    seconds.push_back(s);
  }
  state.counters["median_us"] = MedianMicroseconds(std::move(seconds));
  state.counters["tensors"] = static_cast<double>(list.size());
  state.counters["elements"] = static_cast<double>(Elements(grads));
}

}  // namespace

BENCHMARK(BM_Fp16_Tiny_FusedCastIntoFp32)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Fp16_Tiny_GradScalerStep)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Fp32_Paired)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Fp32_Kernel_AmaxPaired)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Fp16_Kernel_AmaxPaired)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Fp32_GradScaler_AmaxPaired)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Fp16_Paired)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Fp32_FusedUnscaleAndCheck)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp32_GradScalerStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp16_FusedCastIntoFp32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp16_GradScalerStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp16_GradScalerStep_Observed)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp16_GradScalerStep_OverflowReport)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_Context_Iteration)->Arg(0)->Arg(1)->Iterations(2000)->Unit(benchmark::kMicrosecond)->UseManualTime();

BENCHMARK_MAIN();
