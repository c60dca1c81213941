// Fused multi-tensor Adam and SGD (optimizers/FusedSteps.hpp) against a limit kernel with the
// same memory traffic and against the scalar loops the optimizers ran before, in one run.
//
// Lists (FP32, each list's tensors back to back in one buffer, as FSDP's and the optimizers'
// masters lie):
//   gpt64M     a GPT-like list of 64M elements: transformer layers of hidden size 1024 (QKV,
//              projection, MLP weights and biases, layer norms), the rest one embedding table;
//   shards12x2M FSDP shards: 12 units of 4M parameters on 2 ranks, one rank's 12 shards of 2M;
//   shard2M    one such shard (a per-unit step);
//   small200x1K 200 tensors of 1024 elements (layer norms, biases): the per-call costs of a list.
// Cases per list (bytes/second counts every byte read and written):
//   adam/fused, adam/fused_bf16_copy (plus the BF16 copy of the updated parameters), adam/limit
//   (read p, g, m, v and write p, m, v as plain vectorised loops), adam/reference (the former
//   scalar loop, threaded as it was: OpenMP static over each tensor's elements);
//   sgd/fused (momentum), sgd/limit (read p, g, b, write p, b), sgd/reference;
//   pair/adam and pair/sgd run fused, limit and reference in turn in each iteration and report
//   limit_over_fused (the target: >= 0.8) and reference_over_fused as counters, which a busy
//   machine distorts less than rows timed apart.
// Masters and states below FP32 (core/OptimizerStep.hpp's MasterFormat, StateFormat), each as
// lowbit/<mode>/<list>: the fused step and, in each iteration, a limit loop that reads and writes
// the same bytes of the same arrays (limit_over_fused); modes adam_bf16 (BF16 moments),
// adam_8bit (Int8Block/UInt8Block moments), adam_fp8 (Float8E4M3Block moments), adam_sr_8bit (BF16
// masters with stochastic rounding and 8-bit moments), adam_remainder (BF16 + remainder masters,
// FP32 moments), sgd_8bit (Int8Block momentum). lowbit/adam_8bit_vs_fp32/<list> times the FP32
// step and the 8-bit one in turn: fp32_over_8bit > 1 when the 8-bit moments are faster.
//
// Run: OMP_NUM_THREADS=<cores> bench_optimizers --benchmark_format=json --benchmark_out=opt.json
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/mlframework.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "../tests/optimizers/ReferenceSteps.hpp"

namespace {

using mlframework::DataType;
using mlframework::TensorPtr;

constexpr std::size_t kM = std::size_t{1} << 20;
constexpr std::size_t kChunk = std::size_t{1} << 15;  // the limit loops' OpenMP chunks
constexpr std::int64_t kStep = 10;                    // bias corrections of a step past the first

std::vector<std::size_t> GptSizes(std::size_t total) {
  const std::size_t h = 1024;
  const std::vector<std::size_t> layer = {h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h};
  std::size_t layer_total = 0;
  for (const std::size_t n : layer) {
    layer_total += n;
  }
  std::vector<std::size_t> sizes;
  std::size_t used = 0;
  while (total - used > layer_total + h) {
    sizes.insert(sizes.end(), layer.begin(), layer.end());
    used += layer_total;
  }
  sizes.push_back(total - used);  // the embedding table
  return sizes;
}

struct ListShape {
  const char* name;
  std::vector<std::size_t> sizes;
};

std::vector<ListShape> Shapes() {
  return {{"gpt64M", GptSizes(64 * kM)},
          {"shards12x2M", std::vector<std::size_t>(12, 2 * kM)},
          {"shard2M", {2 * kM}},
          {"small200x1K", std::vector<std::size_t>(200, 1024)}};
}

std::size_t Total(const std::vector<std::size_t>& sizes) {
  std::size_t total = 0;
  for (const std::size_t n : sizes) {
    total += n;
  }
  return total;
}

// One contiguous list of @p sizes in @p dtype, filled with small values that keep every step finite.
std::vector<TensorPtr> MakeList(const std::vector<std::size_t>& sizes, DataType dtype, float base) {
  std::vector<mlframework::Shape> shapes;
  shapes.reserve(sizes.size());
  for (const std::size_t n : sizes) {
    shapes.push_back({n});
  }
  std::vector<TensorPtr> list = mlframework::ZerosContiguous(shapes, dtype, mlframework::Device::CPU());
  if (dtype == DataType::Float32) {
    for (const TensorPtr& t : list) {
      const auto bytes = t->MutableHostBytes();
      auto* p = reinterpret_cast<float*>(bytes.data());
      const std::size_t n = bytes.size() / sizeof(float);
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < n; ++i) {
        p[i] = base * static_cast<float>(static_cast<int>(i % 1013) - 506) / 506.0f;
      }
    }
  }
  return list;
}

float* Floats(const TensorPtr& t) { return reinterpret_cast<float*>(t->MutableHostBytes().data()); }

// The state of one optimizer over one list.
struct State {
  explicit State(const std::vector<std::size_t>& sizes, bool adam, bool copies)
      : p(MakeList(sizes, DataType::Float32, 1.0f)),
        g(MakeList(sizes, DataType::Float32, 1e-2f)),
        s1(MakeList(sizes, DataType::Float32, 0.0f)),
        s2(adam ? MakeList(sizes, DataType::Float32, 1e-4f) : std::vector<TensorPtr>{}),
        low(copies ? MakeList(sizes, DataType::BFloat16, 0.0f) : std::vector<TensorPtr>{}) {}
  std::vector<TensorPtr> p, g, s1, s2, low;
  mlframework::OptimizerStepLists Lists() const {
    return {.Parameters = p, .Gradients = g, .FirstState = s1, .SecondState = s2, .LowPrecisionCopies = low};
  }
};

const mlframework::optimizers::AdamOptions kAdam = mlframework::optimizers::AdamOptions::AdamW(1e-3, 1e-2);
const mlframework::optimizers::SGDOptions kSgd{.LearningRate = 1e-3, .Momentum = 0.9, .WeightDecay = 1e-4};

mlfw_reference::AdamConfig ReferenceAdam() {
  return {.lr = kAdam.LearningRate,
          .beta1 = kAdam.Beta1,
          .beta2 = kAdam.Beta2,
          .eps = kAdam.Epsilon,
          .weight_decay = kAdam.WeightDecay,
          .decoupled = kAdam.DecoupledWeightDecay};
}

// Calls body(tensor, begin, end) over every tensor of @p list in chunks, OpenMP static per tensor
// (as the optimizers' former loops were threaded: `parallel for` over each tensor's elements).
template <class Body>
void ForChunks(const std::vector<TensorPtr>& list, Body&& body) {
  for (std::size_t t = 0; t < list.size(); ++t) {
    const std::size_t n = list[t]->Size();
    const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::ptrdiff_t c = 0; c < chunks; ++c) {
      const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
      body(t, begin, std::min(n, begin + kChunk));
    }
  }
}

// Calls body(tensor, begin, end) over the chunks of the whole list in one OpenMP region, static
// schedule: how the fused kernels are threaded, so the limit loops differ from them in the
// arithmetic only.
template <class Body>
void ForListChunks(const std::vector<TensorPtr>& list, Body&& body) {
  struct Chunk {
    std::size_t tensor, begin, end;
  };
  std::vector<Chunk> chunks;
  for (std::size_t t = 0; t < list.size(); ++t) {
    for (std::size_t b = 0; b < list[t]->Size(); b += kChunk) {
      chunks.push_back({t, b, std::min(list[t]->Size(), b + kChunk)});
    }
  }
  const auto count = static_cast<std::ptrdiff_t>(chunks.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (std::ptrdiff_t c = 0; c < count; ++c) {
    const Chunk& chunk = chunks[static_cast<std::size_t>(c)];
    body(chunk.tensor, chunk.begin, chunk.end);
  }
}

void AdamFused(State& s) {
  const auto scalars = mlframework::optimizers::AdamStepScalarsFor(kAdam, kStep);
  benchmark::DoNotOptimize(mlframework::optimizers::FusedAdamStep(s.Lists(), scalars));
}

void AdamReference(State& s) {
  const mlfw_reference::AdamConfig config = ReferenceAdam();
  ForChunks(s.p, [&](std::size_t t, std::size_t b, std::size_t e) {
    mlfw_reference::AdamStep({Floats(s.p[t]) + b, e - b}, {Floats(s.g[t]) + b, e - b}, {Floats(s.s1[t]) + b, e - b},
                             {Floats(s.s2[t]) + b, e - b}, config, kStep, false);
  });
}

// Same traffic as Adam: read p, g, m, v; write p, m, v (one add each, nothing to compute).
void AdamLimit(State& s) {
  ForListChunks(s.p, [&](std::size_t t, std::size_t b, std::size_t e) {
    float* p = Floats(s.p[t]);
    const float* g = Floats(s.g[t]);
    float* m = Floats(s.s1[t]);
    float* v = Floats(s.s2[t]);
#pragma omp simd
    for (std::size_t i = b; i < e; ++i) {
      const float gi = g[i];
      m[i] += gi;
      v[i] += gi;
      p[i] += gi;
    }
  });
  benchmark::ClobberMemory();
}

void SgdFused(State& s) {
  const auto scalars = mlframework::optimizers::SGDStepScalarsFor(kSgd, false);
  benchmark::DoNotOptimize(mlframework::optimizers::FusedSGDStep(s.Lists(), scalars));
}

void SgdReference(State& s) {
  const mlfw_reference::SGDConfig config{
      .lr = kSgd.LearningRate, .momentum = kSgd.Momentum, .weight_decay = kSgd.WeightDecay, .nesterov = false};
  ForChunks(s.p, [&](std::size_t t, std::size_t b, std::size_t e) {
    mlfw_reference::SGDStep({Floats(s.p[t]) + b, e - b}, {Floats(s.g[t]) + b, e - b}, {Floats(s.s1[t]) + b, e - b},
                            config, false, false);
  });
}

// Same traffic as SGD with momentum: read p, g, b; write p, b.
void SgdLimit(State& s) {
  ForListChunks(s.p, [&](std::size_t t, std::size_t b, std::size_t e) {
    float* p = Floats(s.p[t]);
    const float* g = Floats(s.g[t]);
    float* m = Floats(s.s1[t]);
#pragma omp simd
    for (std::size_t i = b; i < e; ++i) {
      const float gi = g[i];
      m[i] += gi;
      p[i] += gi;
    }
  });
  benchmark::ClobberMemory();
}

// Bytes one step moves per element: Adam reads 4 and writes 3 FP32 values (plus 2 bytes for the
// BF16 copy), SGD with momentum reads 3 and writes 2.
constexpr std::size_t kAdamBytes = 7 * sizeof(float);
constexpr std::size_t kSgdBytes = 5 * sizeof(float);

void Row(const std::string& name, const std::vector<std::size_t>& sizes, bool adam, bool copies,
         std::size_t bytes_per_element, void (*step)(State&)) {
  benchmark::RegisterBenchmark(
      name.c_str(),
      [=](benchmark::State& bench) {
        State s(sizes, adam, copies);
        for (auto _ : bench) {
          step(s);
        }
        bench.SetBytesProcessed(bench.iterations() * static_cast<std::int64_t>(Total(sizes) * bytes_per_element));
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

double Seconds(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// fused, limit and reference in turn each iteration; the iteration time is the fused call's.
void Pair(const std::string& name, const std::vector<std::size_t>& sizes, bool adam, void (*fused)(State&),
          void (*limit)(State&), void (*reference)(State&), std::size_t bytes_per_element) {
  benchmark::RegisterBenchmark(
      name.c_str(),
      [=](benchmark::State& bench) {
        State s(sizes, adam, false);
        double fused_s = 0.0;
        double limit_s = 0.0;
        double reference_s = 0.0;
        for (auto _ : bench) {
          const double f = Seconds([&] { fused(s); });
          limit_s += Seconds([&] { limit(s); });
          reference_s += Seconds([&] { reference(s); });
          fused_s += f;
          bench.SetIterationTime(f);
        }
        bench.counters["limit_over_fused"] = limit_s / fused_s;
        bench.counters["reference_over_fused"] = reference_s / fused_s;
        bench.SetBytesProcessed(bench.iterations() * static_cast<std::int64_t>(Total(sizes) * bytes_per_element));
      })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

// ---- Masters and states below FP32.

struct LowBitMode {
  const char* name;
  bool adam;
  mlframework::MasterFormat masters;
  mlframework::StateFormat first, second;
};

const LowBitMode kLowBitModes[] = {
    {"adam_bf16", true, mlframework::MasterFormat::Float32, mlframework::StateFormat::BFloat16,
     mlframework::StateFormat::BFloat16},
    {"adam_8bit", true, mlframework::MasterFormat::Float32, mlframework::StateFormat::Int8Block,
     mlframework::StateFormat::UInt8Block},
    {"adam_fp8", true, mlframework::MasterFormat::Float32, mlframework::StateFormat::Float8E4M3Block,
     mlframework::StateFormat::Float8E4M3Block},
    {"adam_sr_8bit", true, mlframework::MasterFormat::BFloat16StochasticRounding, mlframework::StateFormat::Int8Block,
     mlframework::StateFormat::UInt8Block},
    {"adam_remainder", true, mlframework::MasterFormat::BFloat16Remainder, mlframework::StateFormat::Float32,
     mlframework::StateFormat::Float32},
    {"sgd_8bit", false, mlframework::MasterFormat::Float32, mlframework::StateFormat::Int8Block,
     mlframework::StateFormat::Float32},
};

std::vector<std::size_t> BlockCounts(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> out;
  out.reserve(sizes.size());
  for (const std::size_t n : sizes) {
    out.push_back(mlframework::StateBlockCount(n, mlframework::kDefaultStateBlockSize));
  }
  return out;
}

// The masters, states and scales of one mode over one list.
struct LowBitState {
  LowBitState(const std::vector<std::size_t>& sizes, const LowBitMode& m)
      : mode(m),
        p(MakeList(sizes, m.masters == mlframework::MasterFormat::Float32 ? DataType::Float32 : DataType::BFloat16,
                   1.0f)),
        g(MakeList(sizes, DataType::Float32, 1e-2f)),
        s1(MakeList(sizes, mlframework::StateStorageDType(m.first), 0.0f)),
        s2(m.adam ? MakeList(sizes, mlframework::StateStorageDType(m.second), 0.0f) : std::vector<TensorPtr>{}),
        c1(mlframework::IsBlockScaled(m.first) ? MakeList(BlockCounts(sizes), DataType::Float32, 0.0f)
                                               : std::vector<TensorPtr>{}),
        c2(m.adam && mlframework::IsBlockScaled(m.second) ? MakeList(BlockCounts(sizes), DataType::Float32, 0.0f)
                                                          : std::vector<TensorPtr>{}),
        rem(m.masters == mlframework::MasterFormat::BFloat16Remainder ? MakeList(sizes, DataType::BFloat16, 0.0f)
                                                                      : std::vector<TensorPtr>{}) {}
  LowBitMode mode;
  std::vector<TensorPtr> p, g, s1, s2, c1, c2, rem;
  std::uint64_t step = 0;
  mlframework::OptimizerStepLists Lists() {
    return {.Parameters = p,
            .Gradients = g,
            .FirstState = s1,
            .SecondState = s2,
            .FirstStateFormat = mode.first,
            .SecondStateFormat = mode.second,
            .FirstStateScales = c1,
            .SecondStateScales = c2,
            .Masters = mode.masters,
            .ParameterRemainders = rem,
            .RoundingSeed = 1,
            .RoundingStep = ++step};
  }
  // Bytes one step reads and writes per element (the scales, 8 bytes per block of 256, left out).
  std::size_t BytesPerElement() const {
    auto size = [](const std::vector<TensorPtr>& list) {
      return list.empty() ? 0 : ElementSize(list[0]->GetDataType());
    };
    return 2 * size(p) + size(g) + 2 * size(s1) + 2 * size(s2) + 2 * size(rem);
  }
};

void LowBitFused(LowBitState& s) {
  if (s.mode.adam) {
    benchmark::DoNotOptimize(
        mlframework::optimizers::FusedAdamStep(s.Lists(), mlframework::optimizers::AdamStepScalarsFor(kAdam, kStep)));
  } else {
    benchmark::DoNotOptimize(
        mlframework::optimizers::FusedSGDStep(s.Lists(), mlframework::optimizers::SGDStepScalarsFor(kSgd, false)));
  }
}

// Adds one to each element of elements [b, e) of @p t, read as T (a stand-in for reading and
// writing them).
template <class T>
void Touch(const TensorPtr& t, std::size_t b, std::size_t e) {
  T* x = reinterpret_cast<T*>(t->MutableHostBytes().data());
#pragma omp simd
  for (std::size_t i = b; i < e; ++i) {
    x[i] = static_cast<T>(x[i] + 1);
  }
}

void TouchAny(const TensorPtr& t, std::size_t b, std::size_t e) {
  switch (ElementSize(t->GetDataType())) {
    case 4:
      Touch<float>(t, b, e);
      break;
    case 2:
      Touch<std::uint16_t>(t, b, e);
      break;
    default:
      Touch<std::uint8_t>(t, b, e);
      break;
  }
}

// The same bytes as the mode's step: each array read and written (the gradients only read), in
// cache-sized pieces of each chunk so that every array's bytes cross memory once.
void LowBitLimit(LowBitState& s) {
  ForListChunks(s.p, [&](std::size_t t, std::size_t b, std::size_t e) {
    constexpr std::size_t kPiece = 2048;
    for (std::size_t lo = b; lo < e; lo += kPiece) {
      const std::size_t hi = std::min(e, lo + kPiece);
      const float* g = Floats(s.g[t]);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::size_t i = lo; i < hi; ++i) {
        sum += g[i];
      }
      benchmark::DoNotOptimize(sum);
      TouchAny(s.p[t], lo, hi);
      TouchAny(s.s1[t], lo, hi);
      if (!s.s2.empty()) {
        TouchAny(s.s2[t], lo, hi);
      }
      if (!s.rem.empty()) {
        TouchAny(s.rem[t], lo, hi);
      }
    }
  });
  benchmark::ClobberMemory();
}

void LowBitPair(const LowBitMode& mode, const ListShape& shape) {
  benchmark::RegisterBenchmark(
      (std::string("lowbit/") + mode.name + "/" + shape.name).c_str(),
      [=](benchmark::State& bench) {
        LowBitState s(shape.sizes, mode);
        double fused_s = 0.0;
        double limit_s = 0.0;
        for (auto _ : bench) {
          const double f = Seconds([&] { LowBitFused(s); });
          limit_s += Seconds([&] { LowBitLimit(s); });
          fused_s += f;
          bench.SetIterationTime(f);
        }
        bench.counters["limit_over_fused"] = limit_s / fused_s;
        bench.counters["bytes_per_element"] = static_cast<double>(s.BytesPerElement());
        bench.SetBytesProcessed(bench.iterations() *
                                static_cast<std::int64_t>(Total(shape.sizes) * s.BytesPerElement()));
      })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

// The FP32-moment step and the 8-bit-moment step in turn; the iteration time is the 8-bit one's.
void EightBitVersusFP32(const ListShape& shape) {
  benchmark::RegisterBenchmark((std::string("lowbit/adam_8bit_vs_fp32/") + shape.name).c_str(),
                               [=](benchmark::State& bench) {
                                 State fp32(shape.sizes, true, false);
                                 LowBitState eight(shape.sizes, kLowBitModes[1]);
                                 double fp32_s = 0.0;
                                 double eight_s = 0.0;
                                 for (auto _ : bench) {
                                   fp32_s += Seconds([&] { AdamFused(fp32); });
                                   const double e = Seconds([&] { LowBitFused(eight); });
                                   eight_s += e;
                                   bench.SetIterationTime(e);
                                 }
                                 bench.counters["fp32_over_8bit"] = fp32_s / eight_s;
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

void RegisterAll() {
  for (const ListShape& shape : Shapes()) {
    const std::string list = std::string("/") + shape.name;
    Row("adam/fused" + list, shape.sizes, true, false, kAdamBytes, AdamFused);
    Row("adam/fused_bf16_copy" + list, shape.sizes, true, true, kAdamBytes + 2, AdamFused);
    Row("adam/limit" + list, shape.sizes, true, false, kAdamBytes, AdamLimit);
    Row("adam/reference" + list, shape.sizes, true, false, kAdamBytes, AdamReference);
    Row("sgd/fused" + list, shape.sizes, false, false, kSgdBytes, SgdFused);
    Row("sgd/limit" + list, shape.sizes, false, false, kSgdBytes, SgdLimit);
    Row("sgd/reference" + list, shape.sizes, false, false, kSgdBytes, SgdReference);
    Pair("pair/adam" + list, shape.sizes, true, AdamFused, AdamLimit, AdamReference, kAdamBytes);
    Pair("pair/sgd" + list, shape.sizes, false, SgdFused, SgdLimit, SgdReference, kSgdBytes);
    for (const LowBitMode& mode : kLowBitModes) {
      LowBitPair(mode, shape);
    }
    EightBitVersusFP32(shape);
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
