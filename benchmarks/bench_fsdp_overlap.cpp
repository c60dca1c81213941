// Overlapped FSDP steps (issue #31 item 2), run under MPI:
//   mpiexec -n 2 build/benchmarks/bench_fsdp_overlap --benchmark_format=json
//
// 12 units of kUnitElements FP32 parameters, BF16 gathers and FP32 reductions (FullShard). One
// step: forward over the units (gather, compute, release), then backward in reverse (gather,
// compute, reduce, release), driven through FSDP's hooks.
// - Comm: the step without compute (the communication alone, C).
// - Compute: the compute phases alone (P).
// - Serial: the hooks without prefetch, with compute: about C + P.
// - Overlapped: the hooks with PrefetchPolicy{Forward, Backward}: the target is at most
//   1.2 x max(C, P) (the counter `vs_max`).
// The Serial and Overlapped cases also report rank 0's time inside the hooks per step
// (pre_fwd_ms, pre_bwd_ms, post_bwd_ms, finish_ms): the caller-thread work and waits that no
// compute phase hides, which is where an overlapped step loses against max(C, P).
// The compute phase of a unit waits, as a host thread waits for a GPU kernel (sleep_for for
// the unit's share of C): on a machine with as few cores as ranks a busy loop would leave no
// core for the progress thread and measure the scheduler instead of the overlap. Per unit,
// forward waits its share of the forward communication and backward of the backward's, so
// P equals C. Every iteration is timed between barriers and the slowest rank's time is
// reported (manual time), so all ranks run identical iteration counts.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

#include "mpi_benchmark_main.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kUnits = 12;
constexpr std::size_t kUnitElements = std::size_t{1} << 22;  // 4M parameters per unit, as in the issue

struct Model {
  std::shared_ptr<dist::IProcessGroup> group = dist::MakeMpiProcessGroup();
  fsdp::FSDP fsdp{group,
                  {.Strategy = fsdp::ShardingStrategy::FullShard,
                   .ParamDType = DataType::BFloat16,
                   .ReduceDType = DataType::Float32}};
  std::vector<mlframework::GradientMap> gradients;      // the framework's FP32 gradients, per unit
  std::chrono::duration<double> forward_compute{0.0};   // per unit
  std::chrono::duration<double> backward_compute{0.0};  // per unit
  // This rank's time inside each kind of hook during the last step: the caller-thread work
  // and waits that no compute phase hides (PreForward, PreBackward, PostBackward,
  // FinishBackward; PostForward only releases).
  std::array<std::chrono::duration<double>, 4> in_hooks{};

  Model() {
    for (std::size_t i = 0; i < kUnits; ++i) {
      std::string name = "unit";
      name.append(std::to_string(i));
      fsdp.RegisterUnit(name, {{"w", mlframework::Zeros({kUnitElements})}});
      gradients.push_back({{"w", mlframework::FromVector(std::vector<float>(kUnitElements, 1e-3f), {kUnitElements})}});
    }
    // Calibration: the communication of each pass alone, the slowest rank's, per unit.
    Step(false, false);  // warm the buffer cache
    const auto forward = Measure([&] { Forward(false); });
    const auto backward = Measure([&] {
      Backward(false);
      fsdp.ZeroGrad();
    });
    forward_compute = forward / static_cast<double>(kUnits);
    backward_compute = backward / static_cast<double>(kUnits);
  }

  template <class Body>
  std::chrono::duration<double> Measure(Body body) {
    group->Barrier();
    const auto start = Clock::now();
    body();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    seconds = group->AllReduceHost(seconds, dist::ReduceOp::Max);
    return std::chrono::duration<double>(seconds);
  }

  template <class Hook>
  void Timed(std::size_t kind, Hook hook) {
    const auto start = Clock::now();
    hook();
    in_hooks[kind] += Clock::now() - start;
  }
  void Forward(bool compute) {
    for (std::size_t i = 0; i < kUnits; ++i) {
      Timed(0, [&] { fsdp.PreForward(i); });
      if (compute) std::this_thread::sleep_for(forward_compute);
      fsdp.PostForward(i);
    }
  }
  void Backward(bool compute) {
    for (std::size_t i = kUnits; i-- > 0;) {
      Timed(1, [&] { fsdp.PreBackward(i); });
      if (compute) std::this_thread::sleep_for(backward_compute);
      Timed(2, [&] { fsdp.PostBackward(i, gradients[i]); });
    }
    Timed(3, [&] { fsdp.FinishBackward(); });
  }
  void Step(bool compute, bool overlap) {
    in_hooks = {};
    fsdp.SetPrefetch({.Forward = overlap, .Backward = overlap});
    Forward(compute);
    Backward(compute);
    fsdp.ZeroGrad();
  }
};

Model& TheModel() {
  static Model model;
  return model;
}

// One iteration: the step of @p kind, timed; a communication-only step right before it gives the
// C of the same moment (on a shared machine C drifts with the load), so `vs_max` is the median
// over the iterations of step / max(C, P) and `comm_ms` the median C.
enum class Kind { Comm, Compute, Serial, Overlapped };

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

void RunStep(benchmark::State& state, Kind kind) {
  Model& model = TheModel();
  const double compute = static_cast<double>(kUnits) * (model.forward_compute + model.backward_compute).count();
  std::vector<double> ratios;
  std::vector<double> comms;
  std::array<std::vector<double>, 4> hooks;
  for (auto _ : state) {
    const double comm = model.Measure([&] { model.Step(false, false); }).count();
    const auto seconds = model.Measure([&] {
      switch (kind) {
        case Kind::Comm:
          model.Step(false, false);
          break;
        case Kind::Compute:
          for (std::size_t i = 0; i < kUnits; ++i) std::this_thread::sleep_for(model.forward_compute);
          for (std::size_t i = 0; i < kUnits; ++i) std::this_thread::sleep_for(model.backward_compute);
          break;
        case Kind::Serial:
          model.Step(true, false);
          break;
        case Kind::Overlapped:
          model.Step(true, true);
          break;
      }
    });
    for (std::size_t k = 0; k < hooks.size(); ++k) hooks[k].push_back(model.in_hooks[k].count());
    state.SetIterationTime(seconds.count());
    ratios.push_back(seconds.count() / std::max(comm, compute));
    comms.push_back(comm);
  }
  state.counters["compute_ms"] = compute * 1e3;
  state.counters["comm_ms"] = Median(comms) * 1e3;
  state.counters["vs_max"] = Median(ratios);
  if (kind == Kind::Serial || kind == Kind::Overlapped) {
    // Where the time that no compute hides goes (rank 0's, medians): pre-forward, pre-backward,
    // post-backward and finish-backward hooks, all units of one step together.
    static constexpr std::array<const char*, 4> kNames = {"pre_fwd_ms", "pre_bwd_ms", "post_bwd_ms", "finish_ms"};
    for (std::size_t k = 0; k < hooks.size(); ++k) state.counters[kNames[k]] = Median(hooks[k]) * 1e3;
  }
}

void BM_Comm(benchmark::State& state) { RunStep(state, Kind::Comm); }
void BM_Compute(benchmark::State& state) { RunStep(state, Kind::Compute); }
void BM_SerialStep(benchmark::State& state) { RunStep(state, Kind::Serial); }
void BM_OverlappedStep(benchmark::State& state) { RunStep(state, Kind::Overlapped); }

BENCHMARK(BM_Comm)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Compute)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SerialStep)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OverlappedStep)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // Every rank runs every case in lockstep; rank 0 reports (mpi_benchmark_main.hpp).
  return mlfw_bench::RunOnEveryRank(argc, argv, TheModel().group->Rank());
}
