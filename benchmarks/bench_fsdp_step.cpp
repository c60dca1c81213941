// One FSDP training step, the work of benchmarks/compare_fsdp2.py (PyTorch FSDP2 on the same
// model), run under MPI:
//   OMP_NUM_THREADS=1 mpiexec -n 2 build/benchmarks/bench_fsdp_step --benchmark_format=json
//
// The model: 12 units of one 4M-element FP32 parameter each; FullShard, BF16 parameters, FP32
// gradient reduction, Adam on the FP32 shards. Each unit is gathered once per step (PyTorch's
// reshard_after_forward=False): Gather() before its forward, ReduceGradients() and Release()
// after its backward, in reverse order. The "framework" computes what the peer's autograd does
// for a unit `y = x + sum(w * c)`: the forward reads the gathered BF16 weights against a
// constant FP32 vector c, the backward writes the gradient `c * dy` into the FP32 gradient
// tensor it owns. The step time is the slowest rank's; peak RSS is the process's VmHWM (as the
// peer reads ru_maxrss), absolute and grown over the value before the model was built.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/BFloat16.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "mpi_benchmark_main.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;

namespace {

constexpr std::size_t kUnits = 12;
constexpr std::size_t kUnitElements = std::size_t{1} << 22;  // 4M parameters a unit
constexpr int kSteps = 6;                                    // after one warm-up step

std::shared_ptr<dist::IProcessGroup>& Group() {
  static std::shared_ptr<dist::IProcessGroup> group = dist::MakeMpiProcessGroup();
  return group;
}

using mlfw_bench::ProcStatusBytes;

// The forward of `y = x + sum(w * c)` over the gathered BF16 weights.
float Forward(const mlframework::ITensor& weights, const std::vector<float>& c) {
  const std::span<const std::byte> bytes = weights.HostBytes();
  const std::size_t n = std::min(c.size(), bytes.size() / sizeof(std::uint16_t));
  const auto* bits = reinterpret_cast<const std::uint16_t*>(bytes.data());
  // Eight partial sums: independent chains the compiler can keep in one vector register, as
  // the peer's vectorised sum does.
  constexpr std::size_t kLanes = 8;
  float partial[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      partial[k] += static_cast<float>(mlframework::BFloat16::FromBits(bits[i + k])) * c[i + k];
    }
  }
  for (; i < n; ++i) partial[0] += static_cast<float>(mlframework::BFloat16::FromBits(bits[i])) * c[i];
  float sum = 0.0f;
  for (const float p : partial) sum += p;
  return sum;
}

// The backward: dL/dw = c * dy into the framework's FP32 gradient tensor.
void Backward(mlframework::ITensor& gradient, const std::vector<float>& c, float dy) {
  const std::span<std::byte> bytes = gradient.MutableHostBytes();
  auto* g = reinterpret_cast<float*>(bytes.data());
  for (std::size_t i = 0; i < c.size(); ++i) g[i] = c[i] * dy;
}

void BM_FsdpStep(benchmark::State& state) {
  dist::IProcessGroup& group = *Group();
  const double rss_before = ProcStatusBytes("VmHWM");
  fsdp::FSDP model(Group(), {.Strategy = fsdp::ShardingStrategy::FullShard,
                             .ParamDType = DataType::BFloat16,
                             .ReduceDType = DataType::Float32});
  std::vector<float> c(kUnitElements);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = 1e-3f * static_cast<float>(i % 97);
  for (std::size_t u = 0; u < kUnits; ++u) {
    model.RegisterUnit(
        "unit" + std::to_string(u),
        {{"weight", mlframework::FromVector(std::vector<float>(kUnitElements, 0.01f), {kUnitElements})}});
  }
  mlframework::optimizers::Adam adam(model.ShardedParameters());
  // The framework's gradient buffer: one full FP32 tensor, reused unit after unit.
  const mlframework::TensorPtr gradient = mlframework::Zeros({kUnitElements});
  const mlframework::GradientMap gradients{{"weight", gradient}};
  float loss = 0.0f;
  auto step = [&] {
    float x = 0.0f;
    for (std::size_t u = 0; u < kUnits; ++u) {
      auto& unit = model.Unit(u);
      unit.Gather();
      x += Forward(*unit.Parameters().at("weight"), c);
    }
    loss = x;
    for (std::size_t u = kUnits; u-- > 0;) {
      auto& unit = model.Unit(u);
      Backward(*gradient, c, 1.0f);
      unit.ReduceGradients(gradients);
      unit.Release();
    }
    model.Step(adam);
  };
  step();  // warm-up: buffers, plans and the transport
  double best = 1e30;
  for (auto _ : state) {
    double total = 0.0;
    for (int s = 0; s < kSteps; ++s) {
      group.Barrier();
      const auto start = std::chrono::steady_clock::now();
      step();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      seconds = group.AllReduceHost(seconds, dist::ReduceOp::Max);
      best = std::min(best, seconds);
      total += seconds;
    }
    state.SetIterationTime(total / kSteps);
  }
  const double rss_peak = group.AllReduceHost(ProcStatusBytes("VmHWM"), dist::ReduceOp::Max);
  const double rss_growth = group.AllReduceHost(ProcStatusBytes("VmHWM") - rss_before, dist::ReduceOp::Max);
  state.counters["ranks"] = group.WorldSize();
  state.counters["best_step_ms"] = best * 1e3;
  state.counters["rss_peak_MiB_max_rank"] = rss_peak / (1024.0 * 1024.0);
  state.counters["rss_growth_MiB_max_rank"] = rss_growth / (1024.0 * 1024.0);
  state.counters["loss"] = loss;
}

BENCHMARK(BM_FsdpStep)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  Group();  // initializes MPI (the library finalizes it at exit)
  return mlfw_bench::RunOnEveryRank(argc, argv, Group()->Rank());
}
