// Issue 30's CPU targets: the fused calls on gradients in memory the caller owns, wrapped anew
// every step, against the same calls on the library's own tensors, in the same run.
//
// Gradients: GPT-2 small's 12 transformer blocks and final layer norm, 146 tensors, 85,056,000
// elements (FP32: 340 MB), in 64-byte aligned buffers the benchmark owns (bench_zero_copy.hpp).
// Each benchmark times, in every iteration and in a rotating order, the same call on:
//   native: library tensors (Zeros) holding the same values, made once;
//   wrap:   backends::cpu::Wrap over the external buffers, made anew in the timed call;
//   dlpack: FromDLPack of hand-made DLManagedTensors over them, made anew in the timed call;
//   wrap_native: (the control) backends::cpu::Wrap over the native tensors' own memory, made anew
//           in the timed call: the wrapped path on the same pages as native;
//   torch:  (unscale, with libtorch) at::_amp_foreach_non_finite_check_and_unscale_ on
//           at::from_blob tensors over the same external memory (benchmarks/torch/ZeroCopyTorch.cpp).
// Cases:
//   unscale/f32: GradScalerContext(Static(1)) + Step on an optimizer handing out the list:
//                one fused in-place unscale + overflow check (the kernel multiplies all the same);
//   unscale/f16: the same with FP16 gradients and scale 65536 (unscaled into FP32 buffers);
//   convert/f16: GradientConversionLayer::ProcessGradients, FP16 -> FP32 with clipping.
// Counters: <c>_ms (median per call), <c>_ratio (median over iterations of <c>'s time over
// native's in the same iteration; target <= 1/0.95), torch_over_wrap (target > 1),
// <c>_alloc_bytes (per call, allocations of 64 KiB and more) and bytes_copied (the target is 0):
//   - every tensor the library is handed must lie at its external address (Wrap and FromDLPack
//     copy nothing), and FP32 results must be those tensors (unscaled in place): checked after
//     every call; before timing, a Static(4) step's results are checked element by element in the
//     external buffers;
//   - a copy of a gradient of 64 KiB or more into library memory must allocate it (steady state:
//     native allocates nothing of that size), so a library call allocating more than native's in
//     the same iteration counts the difference as copied (the FP16 inputs' check beyond pointers).
// A non-zero bytes_copied, a wrong result or a deleter not called exactly once is the case's error.
// The results of wrap and dlpack are also checked bit for bit against native's before timing.
//
// Run: bench_zero_copy --benchmark_format=json > zc.json; python3 benchmarks/zero_copy_ratios.py zc.json
#include "bench_zero_copy.hpp"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/mlframework.hpp>

namespace mlfw_zc {

using namespace mlframework;
namespace cpu = mlframework::backends::cpu;

namespace {

// ---- The three ways the library sees the same values ----

// Library tensors (Zeros) with the external values, made once per process and dtype.
const GradientMap& Native(DataType dtype) {
  static std::map<DataType, GradientMap> maps;
  GradientMap& map = maps[dtype];
  if (map.empty()) {
    for (const ExternalGradient& g : External(dtype)) {
      TensorPtr t = Zeros(g.shape, dtype);
      std::memcpy(cpu::MutableData(*t), g.data, g.bytes);
      map.emplace(g.name, std::move(t));
    }
  }
  return map;
}

GradientMap Wrapped(DataType dtype) {
  GradientMap map;
  for (const ExternalGradient& g : External(dtype)) {
    map.emplace(g.name, cpu::Wrap(g.data, g.shape, dtype, nullptr));
  }
  return map;
}

// The control: Wrap over the native tensors' own memory, made anew in the timed call. Against
// native it measures the wrapped path alone (same memory, same pages); against wrap, what the
// external buffers' placement costs.
GradientMap WrappedNative(DataType dtype) {
  GradientMap map;
  for (const auto& [name, tensor] : Native(dtype)) {
    map.emplace(name, cpu::Wrap(tensor->MutableHostBytes().data(), tensor->GetShape(), dtype, nullptr));
  }
  return map;
}

std::atomic<std::int64_t> g_dlpack_live{0};  // hand-made managed tensors whose deleter has not run

struct HandMade {
  DLManagedTensor managed{};
  std::int64_t shape[2] = {0, 0};
};

GradientMap FromHandMadeDLPack(DataType dtype) {
  GradientMap map;
  for (const ExternalGradient& g : External(dtype)) {
    auto* h = new HandMade();
    for (std::size_t d = 0; d < g.shape.size(); ++d) {
      h->shape[d] = static_cast<std::int64_t>(g.shape[d]);
    }
    DLTensor& t = h->managed.dl_tensor;
    t.data = g.data;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = static_cast<std::int32_t>(g.shape.size());
    t.dtype = DLDataType{kDLFloat, static_cast<std::uint8_t>(8 * ElementSize(dtype)), 1};
    t.shape = h->shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    h->managed.manager_ctx = h;
    h->managed.deleter = [](DLManagedTensor* self) {
      delete static_cast<HandMade*>(self->manager_ctx);
      g_dlpack_live.fetch_sub(1);
    };
    g_dlpack_live.fetch_add(1);
    map.emplace(g.name, FromDLPack(&h->managed));
  }
  return map;
}

using MakeList = GradientMap (*)(DataType);
GradientMap NativeCopy(DataType dtype) { return Native(dtype); }

struct Source {
  const char* name;
  MakeList make;
  bool external;  // over External()'s buffers, else over Native()'s tensors
};
constexpr Source kSources[] = {{"native", NativeCopy, false},
                               {"wrap", Wrapped, true},
                               {"dlpack", FromHandMadeDLPack, true},
                               {"wrap_native", WrappedNative, false}};

// Hands out the gradients of this step and keeps what its step would apply: those, or what the
// scaler hands back with SetGradients (FP16 -> FP32; FP32 gradients unscaled in place are not
// handed back). Its step is free.
class HandOutOptimizer final : public amp::IOptimizer {
 public:
  GradientMap GetGradients() override {
    applied = next;
    return next;
  }
  void SetGradients(const GradientMap& g) override { applied = g; }
  void Step() override { benchmark::DoNotOptimize(applied); }
  GradientMap next;
  GradientMap applied;
};

// Bytes of the gradients in @p list that do not lie where @p source keeps them (the external
// buffers, or the native tensors' memory): a tensor handed to the library that is not the memory
// it was made over, or an FP32 result that was not unscaled in place, is a copy.
std::size_t NotInPlace(const Source& source, DataType dtype, const GradientMap& list) {
  std::size_t bytes = 0;
  for (const ExternalGradient& g : External(dtype)) {
    const void* home = source.external ? g.data : Native(dtype).at(g.name)->HostBytes().data();
    auto it = list.find(g.name);
    if (it == list.end() || it->second->HostBytes().data() != home) {
      bytes += g.bytes;
    }
  }
  return bytes;
}

// ---- Checks before timing ----

void Expect(bool ok, const std::string& what) {
  if (!ok) {
    throw std::runtime_error(what);
  }
}

// A Static(4) step on each source must leave Value/4 in its memory (FP32: in place, so for wrap
// and dlpack in the external buffers); an Inf written into the external memory must be found.
// Once per process (repetitions skip it; a failure repeats).
void CheckFp32InPlace() {
  static bool passed = false;
  if (passed) {
    return;
  }
  for (const Source& source : kSources) {
    if (!source.external) {
      continue;
    }
    amp::GradScaler scaler = amp::GradScaler::Static(4.0f);
    HandOutOptimizer optimizer;
    optimizer.next = source.make(DataType::Float32);
    {
      amp::GradScalerContext ctx(scaler, Scalar(1.0f));
      Expect(ctx.Step(optimizer), std::string(source.name) + ": finite gradients reported as overflow");
    }
    Expect(NotInPlace(source, DataType::Float32, optimizer.applied) == 0,
           std::string(source.name) + ": FP32 gradients not unscaled in place");
    const auto& ext = External(DataType::Float32);
    for (std::size_t k = 0; k < ext.size(); ++k) {
      auto* v = static_cast<float*>(ext[k].data);
      for (std::size_t i = 0; i < ext[k].bytes / sizeof(float); ++i) {
        Expect(v[i] == Value(k, i) / 4.0f, std::string(source.name) + ": " + ext[k].name + " not unscaled in place");
        v[i] = Value(k, i);
      }
    }
    auto* poisoned = static_cast<float*>(ext[70].data);
    poisoned[5] = std::numeric_limits<float>::infinity();
    optimizer.next = source.make(DataType::Float32);
    bool stepped = true;
    {
      amp::GradScalerContext ctx(scaler, Scalar(1.0f));
      stepped = ctx.Step(optimizer);
    }
    poisoned[5] = Value(70, 5);
    Expect(!stepped, std::string(source.name) + ": Inf in the external memory not found");
    // The Inf step skipped, so nothing was unscaled; restore all the same (a skipped step may scale).
    for (std::size_t k = 0; k < ext.size(); ++k) {
      auto* v = static_cast<float*>(ext[k].data);
      for (std::size_t i = 0; i < ext[k].bytes / sizeof(float); ++i) {
        v[i] = Value(k, i);
      }
    }
  }
  passed = true;
}

void ExpectSameBits(const GradientMap& a, const GradientMap& b, const std::string& what) {
  Expect(a.size() == b.size(), what + ": different gradient count");
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    const auto x = ia->second->HostBytes();
    const auto y = ib->second->HostBytes();
    Expect(ia->first == ib->first && x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size()) == 0,
           what + ": " + ia->first + " differs from native");
  }
}

// ---- The paired timing ----

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Times every contender once per iteration, rotating which goes first: calls milliseconds apart
// share the machine's load, so their ratio holds on a busy host where separate cases drift.
void RunPaired(benchmark::State& state, std::vector<Contender>& contenders, std::size_t elements) {
  const std::size_t count = contenders.size();
  std::vector<std::vector<double>> seconds(count);
  std::vector<std::size_t> allocated(count, 0);
  std::vector<std::size_t> copied(count, 0);
  std::size_t first = 0;
  try {
    // The copy check relies on seeing the library's allocations through this program's operator new.
    const std::size_t probe_before = LargeAllocatedBytes();
    benchmark::DoNotOptimize(Zeros({std::size_t{1} << 20}, DataType::Float32).get());
    Expect(LargeAllocatedBytes() - probe_before >= (std::size_t{4} << 20),
           "allocation counting does not see the library's allocations: bytes_copied cannot be measured");
    for (Contender& c : contenders) {
      c.run();  // steady state: buffers and plans of the first step exist, as in training
    }
    for (auto _ : state) {
      double total = 0.0;
      for (std::size_t j = 0; j < count; ++j) {
        const std::size_t c = (first + j) % count;
        const std::size_t before = LargeAllocatedBytes();
        const auto t0 = Clock::now();
        contenders[c].run();
        const auto t1 = Clock::now();
        allocated[c] += LargeAllocatedBytes() - before;
        const double s = std::chrono::duration<double>(t1 - t0).count();
        seconds[c].push_back(s);
        total += s;
        if (contenders[c].copied) {
          copied[c] = std::max(copied[c], contenders[c].copied());
        }
      }
      first = (first + 1) % count;
      state.SetIterationTime(total);
    }
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
  const auto iterations = static_cast<double>(state.iterations());
  std::size_t native = 0;
  for (std::size_t c = 0; c < count; ++c) {
    if (contenders[c].name == "native") {
      native = c;
    }
  }
  double bytes_copied = 0.0;
  std::string error;
  for (std::size_t c = 0; c < count; ++c) {
    const std::string& name = contenders[c].name;
    state.counters[name + "_ms"] = 1e3 * Median(seconds[c]);
    if (c != native) {
      std::vector<double> ratios;
      for (std::size_t i = 0; i < seconds[c].size(); ++i) {
        ratios.push_back(seconds[c][i] / seconds[native][i]);
      }
      state.counters[name + "_ratio"] = Median(ratios);
    }
    if (!contenders[c].library) {
      continue;
    }
    const double per_call = static_cast<double>(allocated[c]) / iterations;
    state.counters[name + "_alloc_bytes"] = per_call;
    auto extra = static_cast<double>(copied[c]);
    if (c != native) {
      // The same copy may show twice (a tensor not at home, and its allocation): count it once.
      extra = std::max(extra, per_call - static_cast<double>(allocated[native]) / iterations);
    }
    bytes_copied = std::max(bytes_copied, extra);
    if (extra > 0.0 && error.empty()) {
      error = name + ": " + std::to_string(static_cast<std::uint64_t>(extra)) + " gradient bytes copied per call";
    }
  }
  for (std::size_t c = 0; c < count; ++c) {
    if (contenders[c].name == "torch") {
      for (std::size_t w = 0; w < count; ++w) {
        if (contenders[w].name == "wrap") {
          std::vector<double> ratios;
          for (std::size_t i = 0; i < seconds[c].size(); ++i) {
            ratios.push_back(seconds[c][i] / seconds[w][i]);
          }
          state.counters["torch_over_wrap"] = Median(ratios);
        }
      }
    }
  }
  state.counters["bytes_copied"] = bytes_copied;
  state.counters["elements"] = static_cast<double>(elements);
  state.counters["tensors"] = static_cast<double>(External(DataType::Float32).size());
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
  }
}

std::size_t Elements() {
  std::size_t n = 0;
  for (const ExternalGradient& g : External(DataType::Float32)) {
    n += ElementCount(g.shape);
  }
  return n;
}

// One GradScalerContext step per call on the gradients `source` hands out for this step.
struct ScalerStep {
  ScalerStep(const Source& source, DataType list_dtype, float scale)
      : make(source.make), dtype(list_dtype), scaler(amp::GradScaler::Static(scale)), loss(Scalar(1.0f)) {}
  void operator()() {
    optimizer.next = make(dtype);
    amp::GradScalerContext ctx(scaler, loss);
    if (!ctx.Step(optimizer)) {
      throw std::runtime_error("finite gradients reported as overflow");
    }
  }
  MakeList make;
  DataType dtype;
  amp::GradScaler scaler;
  TensorPtr loss;
  HandOutOptimizer optimizer;
};

void BM_Unscale(benchmark::State& state, DataType dtype) {
  std::vector<Contender> contenders;
  std::vector<std::shared_ptr<ScalerStep>> steps;
  std::string note;
  try {
    if (dtype == DataType::Float32) {
      CheckFp32InPlace();
    }
    const float scale = dtype == DataType::Float32 ? 1.0f : 65536.0f;
    for (const Source& source : kSources) {
      auto step = std::make_shared<ScalerStep>(source, dtype, scale);
      steps.push_back(step);
      // The list handed out must be the memory; FP32 results must be that memory too.
      auto copied = [step, &source, dtype] {
        return NotInPlace(source, dtype, step->optimizer.next) +
               (dtype == DataType::Float32 ? NotInPlace(source, dtype, step->optimizer.applied) : 0);
      };
      contenders.push_back({source.name, [step] { (*step)(); }, true, copied});
    }
    // Same values in, so the FP32 results handed to the optimizer must match bit for bit.
    for (const auto& step : steps) {
      (*step)();
    }
    for (std::size_t s = 1; s < steps.size(); ++s) {
      ExpectSameBits(steps[0]->optimizer.applied, steps[s]->optimizer.applied, contenders[s].name);
    }
#if defined(MLFW_BENCH_WITH_TORCH)
    if (dtype == DataType::Float32) {
      contenders.push_back(TorchUnscaleCheck(note));
    }
#endif
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
  RunPaired(state, contenders, Elements());
  contenders.clear();
  steps.clear();  // the last lists go: every hand-made DLPack deleter must have run once
  if (g_dlpack_live.load() != 0 && !state.error_occurred()) {
    state.SkipWithError("a DLPack deleter was not called exactly once");
  }
  state.SetLabel(note);
}

struct Conversion {
  explicit Conversion(const Source& source)
      : make(source.make),
        layer(optimizers::mixed_precision::MixedPrecisionOptions{
            .InitialLossScale = 65536.0f, .EnableGradientClipping = true, .MaxGradNorm = 1.0f}) {}
  // Returns the FP32 gradients; the caller drops them, so the layer reuses its buffers.
  GradientMap operator()() {
    input = make(DataType::Float16);
    auto result = layer.ProcessGradients(input);
    if (result.ShouldSkip || result.Gradients.size() != External(DataType::Float16).size()) {
      throw std::runtime_error("finite gradients skipped");
    }
    return std::move(result.Gradients);
  }
  MakeList make;
  optimizers::mixed_precision::GradientConversionLayer layer;
  GradientMap input;  // the last call's FP16 gradients, for the copy check
};

// An Inf written into the external FP16 memory must be found (layers of their own: they back off).
// Once per process, like CheckFp32InPlace().
void CheckFp16InfFound() {
  static bool passed = false;
  if (passed) {
    return;
  }
  auto* poisoned = static_cast<Float16*>(External(DataType::Float16)[70].data);
  poisoned[5] = Float16(std::numeric_limits<float>::infinity());
  for (std::size_t s = 1; s < std::size(kSources); ++s) {
    if (!kSources[s].external) {
      continue;  // the control is over the native tensors' memory, not the poisoned buffer
    }
    Conversion probe(kSources[s]);
    const bool skipped = probe.layer.ProcessGradients(kSources[s].make(DataType::Float16)).ShouldSkip;
    if (!skipped) {
      poisoned[5] = Float16(Value(70, 5));
      throw std::runtime_error(std::string(kSources[s].name) + ": Inf in the external memory not found");
    }
  }
  poisoned[5] = Float16(Value(70, 5));
  passed = true;
}

void BM_ConvertFp16(benchmark::State& state) {
  std::vector<Contender> contenders;
  std::vector<std::shared_ptr<Conversion>> layers;
  try {
    std::vector<GradientMap> results;
    for (const Source& source : kSources) {
      auto layer = std::make_shared<Conversion>(source);
      layers.push_back(layer);
      results.push_back((*layer)());
      contenders.push_back({source.name, [layer] { benchmark::DoNotOptimize((*layer)()); }, true,
                            [layer, &source] { return NotInPlace(source, DataType::Float16, layer->input); }});
    }
    for (std::size_t s = 1; s < results.size(); ++s) {
      ExpectSameBits(results[0], results[s], contenders[s].name);
    }
    CheckFp16InfFound();
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
  RunPaired(state, contenders, Elements());
  state.counters["clips"] = static_cast<double>(layers[0]->layer.ClipCount());
  contenders.clear();
  layers.clear();  // the last lists go: every hand-made DLPack deleter must have run once
  if (g_dlpack_live.load() != 0 && !state.error_occurred()) {
    state.SkipWithError("a DLPack deleter was not called exactly once");
  }
}

}  // namespace

BENCHMARK_CAPTURE(BM_Unscale, f32, DataType::Float32)
    ->Name("zero_copy/unscale/f32")
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK_CAPTURE(BM_Unscale, f16, DataType::Float16)
    ->Name("zero_copy/unscale/f16")
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_ConvertFp16)->Name("zero_copy/convert/f16")->Unit(benchmark::kMillisecond)->UseManualTime();

}  // namespace mlfw_zc

BENCHMARK_MAIN();
