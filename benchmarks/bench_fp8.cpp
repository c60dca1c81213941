// The CPU FP8 kernels of core/Float8Cast.hpp against limit kernels with the same traffic, in one run.
//
// Cases, on one 64M-element tensor (flat) and a GPT-like list of the same total (gpt: 8
// transformer layers of 12 tensors plus embeddings, about 100 tensors):
//   fp8/cast_amax/<layout>/N   ScaledCastToFloat8 FP32 -> E4M3FN with the per-tensor amax
//                              (reads 4 bytes, writes 1 byte per element);
//   limit/narrow/<layout>/N    the same traffic with nothing else: each FP32 element's low byte
//                              stored (a vectorised narrowing store), over the same memory;
//   fp8/amax/<layout>/N        Amax over the list (reads 4 bytes per element);
//   limit/read_sum/<layout>/N  a read-only FP32 sum over the same memory.
// The limits are threaded like the backend (OpenMP static over 32K-element chunks of each tensor).
// pair/<op>/<layout>/N time the call and its limit alternately in each iteration, from memory, and
// report `ratio` (limit time / call time: the targets are cast+amax >= 0.85, amax >= 0.9).
// Every case reports bytes/second (SetBytesProcessed: bytes read plus bytes written).
//
// Run: OMP_NUM_THREADS=<cores> bench_fp8 --benchmark_format=json --benchmark_out=fp8.json
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Tensor.hpp>

namespace {

using mlframework::DataType;
using mlframework::TensorPtr;

constexpr std::size_t kTotal = std::size_t{64} << 20;
constexpr std::size_t kChunk = 32768;

enum class Layout { Flat, Gpt };

const char* Name(Layout layout) { return layout == Layout::Flat ? "flat" : "gpt"; }

// The GPT-like sizes of bench_multi_tensor (8 layers of 12 tensors, embeddings, final norm).
std::vector<std::size_t> Sizes(Layout layout, std::size_t total) {
  if (layout == Layout::Flat) {
    return {total};
  }
  std::size_t d = 16;
  while (std::size_t{96} * (d + 16) * (d + 16) <= total / 2) {
    d += 16;
  }
  const std::size_t positions = std::min<std::size_t>(1024, total / (8 * d));
  std::vector<std::size_t> body;
  std::size_t layers = 0;
  for (int l = 0; l < 8; ++l) {
    for (const std::size_t s : {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d}) {
      body.push_back(s);
      layers += s;
    }
  }
  std::vector<std::size_t> sizes = {total - layers - positions * d - 2 * d, positions * d};
  sizes.insert(sizes.end(), body.begin(), body.end());
  sizes.push_back(d);
  sizes.push_back(d);
  return sizes;
}

struct Lists {
  std::vector<TensorPtr> src;     // FP32, gradient-like values
  std::vector<TensorPtr> dst;     // E4M3FN
  std::vector<TensorPtr> narrow;  // uint8 storage for the limit (E4M3FN tensors, written raw)
  TensorPtr scale;
  TensorPtr amax;
};

Lists MakeLists(Layout layout) {
  Lists lists;
  std::uint32_t state = 1;
  for (const std::size_t size : Sizes(layout, kTotal)) {
    std::vector<float> values(size);
    for (float& v : values) {
      state = state * 1664525u + 1013904223u;
      v = static_cast<float>(static_cast<std::int32_t>(state)) * 1e-9f;
    }
    lists.src.push_back(mlframework::FromVector(values, {size}));
    lists.dst.push_back(mlframework::Zeros({size}, DataType::Float8E4M3FN));
    lists.narrow.push_back(mlframework::Zeros({size}, DataType::Float8E4M3FN));
  }
  lists.scale = mlframework::FromVector(std::vector<float>(lists.src.size(), 64.0f), {lists.src.size()});
  lists.amax = mlframework::Zeros({lists.src.size()});
  return lists;
}

struct Chunk {
  const float* src;
  std::uint8_t* dst;
  std::size_t count;
};

std::vector<Chunk> Chunks(const Lists& lists) {
  std::vector<Chunk> chunks;
  for (std::size_t t = 0; t < lists.src.size(); ++t) {
    const auto* src = static_cast<const float*>(mlframework::backends::cpu::Data(*lists.src[t]));
    auto* dst = static_cast<std::uint8_t*>(mlframework::backends::cpu::MutableData(*lists.narrow[t]));
    const std::size_t size = lists.src[t]->Size();
    for (std::size_t begin = 0; begin < size; begin += kChunk) {
      chunks.push_back(Chunk{src + begin, dst + begin, std::min(kChunk, size - begin)});
    }
  }
  return chunks;
}

void LimitNarrow(const std::vector<Chunk>& chunks) {
  const auto n = static_cast<std::ptrdiff_t>(chunks.size());
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t c = 0; c < n; ++c) {
    const Chunk& chunk = chunks[static_cast<std::size_t>(c)];
    for (std::size_t i = 0; i < chunk.count; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, chunk.src + i, 4);
      chunk.dst[i] = static_cast<std::uint8_t>(bits);
    }
  }
}

float LimitReadSum(const std::vector<Chunk>& chunks) {
  const auto n = static_cast<std::ptrdiff_t>(chunks.size());
  float total = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (std::ptrdiff_t c = 0; c < n; ++c) {
    const Chunk& chunk = chunks[static_cast<std::size_t>(c)];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::size_t i = 0; i < chunk.count; ++i) {
      sum += chunk.src[i];
    }
    total += sum;
  }
  return total;
}

void CastAmax(const Lists& lists) { mlframework::ScaledCastToFloat8(lists.src, lists.dst, lists.scale, lists.amax); }
void AmaxOnly(const Lists& lists) { mlframework::Amax(lists.src, lists.amax); }

void Register(Layout layout) {
  const std::string suffix = std::string("/") + Name(layout) + "/" + std::to_string(kTotal);
  const auto lists = std::make_shared<Lists>();
  const auto chunks = std::make_shared<std::vector<Chunk>>();
  const auto ready = [lists, chunks, layout] {
    if (lists->src.empty()) {
      *lists = MakeLists(layout);
      *chunks = Chunks(*lists);
    }
  };
  const auto bytes = [](benchmark::State& state, std::size_t per_element) {
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kTotal * per_element));
  };
  benchmark::RegisterBenchmark(("fp8/cast_amax" + suffix).c_str(), [=](benchmark::State& state) {
    ready();
    for (auto _ : state) {
      CastAmax(*lists);
    }
    bytes(state, 5);
  })->UseRealTime();
  benchmark::RegisterBenchmark(("limit/narrow" + suffix).c_str(), [=](benchmark::State& state) {
    ready();
    for (auto _ : state) {
      LimitNarrow(*chunks);
      benchmark::ClobberMemory();
    }
    bytes(state, 5);
  })->UseRealTime();
  benchmark::RegisterBenchmark(("fp8/amax" + suffix).c_str(), [=](benchmark::State& state) {
    ready();
    for (auto _ : state) {
      AmaxOnly(*lists);
    }
    bytes(state, 4);
  })->UseRealTime();
  benchmark::RegisterBenchmark(("limit/read_sum" + suffix).c_str(), [=](benchmark::State& state) {
    ready();
    for (auto _ : state) {
      benchmark::DoNotOptimize(LimitReadSum(*chunks));
    }
    bytes(state, 4);
  })->UseRealTime();
  // The paired cases: call and limit alternately, so both see the same machine state.
  const auto paired = [=](const char* op, std::size_t per_element, auto call, auto limit) {
    benchmark::RegisterBenchmark((std::string("pair/") + op + suffix).c_str(), [=](benchmark::State& state) {
      ready();
      double call_seconds = 0.0;
      double limit_seconds = 0.0;
      for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        call();
        const auto t1 = std::chrono::steady_clock::now();
        limit();
        const auto t2 = std::chrono::steady_clock::now();
        call_seconds += std::chrono::duration<double>(t1 - t0).count();
        limit_seconds += std::chrono::duration<double>(t2 - t1).count();
      }
      bytes(state, 2 * per_element);
      state.counters["ratio"] = call_seconds > 0.0 ? limit_seconds / call_seconds : 0.0;
      state.counters["call_GBps"] =
          call_seconds > 0.0 ? static_cast<double>(state.iterations() * kTotal * per_element) / call_seconds / 1e9
                             : 0.0;
      state.counters["limit_GBps"] =
          limit_seconds > 0.0 ? static_cast<double>(state.iterations() * kTotal * per_element) / limit_seconds / 1e9
                              : 0.0;
    })->UseRealTime();
  };
  paired(
      "cast_amax", 5, [=] { CastAmax(*lists); }, [=] { LimitNarrow(*chunks); });
  paired(
      "amax", 4, [=] { AmaxOnly(*lists); }, [=] { benchmark::DoNotOptimize(LimitReadSum(*chunks)); });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("mlfw_fp8_isa", std::string(mlframework::backends::cpu::InstructionSet()));
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  Register(Layout::Flat);
  Register(Layout::Gpt);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
