// FSDP collectives and memory, run under MPI:
//   mpiexec -n 2 build/benchmarks/bench_fsdp_collectives --benchmark_format=json
//
// 1. Bandwidth: the library's all-gather and reduce-scatter of 16M-element units (through
//    IProcessGroup and through FSDPShardingUnit) against the raw MPI collective moving the
//    same bytes, in the same run. Every iteration is timed between barriers and the slowest
//    rank's time is reported (manual time), so all ranks run identical iteration counts.
//    FP8 units: the all-gather of a unit whose FP8 shard is current against raw MPI_Allgather
//    of the same bytes, and, as its own case, the once-per-step quantization (amax, all-reduce
//    MAX, cast) that precedes the first gather after a step.
//    Gradient wires: BF16 against the FP8 block wire (BM_GradientWire16M), bytes and time.
// 2. Memory: peak resident memory per rank while training with FSDP FullShard + Adam, against
//    the ZeRO-3 figure 16 bytes x parameters / ranks + the largest gathered unit; and the bytes
//    of masters and optimizer state per parameter with FP32 masters and moments against BF16
//    master shards and 8-bit moments (BM_FsdpLowBitMemory, 12 units of 4M parameters).
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <mpi.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "mpi_benchmark_main.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
namespace cpu = mlframework::backends::cpu;
using mlframework::DataType;

namespace {

constexpr std::size_t kUnitElements = std::size_t{1} << 24;  // 16M elements per unit
constexpr int kIterations = 8;

// The default group (the default HalfReduction) and one per method, for the 16-bit comparisons.
std::shared_ptr<dist::IProcessGroup>& Group(std::optional<dist::HalfReduction> method = std::nullopt) {
  static std::shared_ptr<dist::IProcessGroup> standard = dist::MakeMpiProcessGroup();
  static std::shared_ptr<dist::IProcessGroup> all_to_all =
      dist::MakeMpiProcessGroup({.HalfSum = dist::HalfReduction::AllToAll});
  static std::shared_ptr<dist::IProcessGroup> user_op =
      dist::MakeMpiProcessGroup({.HalfSum = dist::HalfReduction::UserOp});
  static std::shared_ptr<dist::IProcessGroup> convert =
      dist::MakeMpiProcessGroup({.HalfSum = dist::HalfReduction::ConvertToFloat32});
  if (!method) return standard;
  switch (*method) {
    case dist::HalfReduction::AllToAll:
      return all_to_all;
    case dist::HalfReduction::UserOp:
      return user_op;
    case dist::HalfReduction::ConvertToFloat32:
      break;
  }
  return convert;
}

// FP32 sums through MPI's own MPI_Reduce_scatter_block / MPI_Allreduce.
std::shared_ptr<dist::IProcessGroup>& BuiltinFloat32Group() {
  static std::shared_ptr<dist::IProcessGroup> builtin =
      dist::MakeMpiProcessGroup({.Float32Sum = dist::Float32Reduction::Builtin});
  return builtin;
}

int Ranks() { return Group()->WorldSize(); }

// Seconds @p op takes on the slowest rank, timed between barriers.
template <class Op>
double SlowestRankSeconds(Op&& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  op();
  double elapsed = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return elapsed;
}

// Runs the raw MPI collective and each library variant alternately in every iteration, so
// load changes on a shared machine hit all of them alike. The iteration time is the first
// library variant's; counters give every variant's best time and its bandwidth relative to
// raw MPI (raw best time / variant best time: 1.0 means as fast as raw MPI).
struct Variant {
  std::string name;
  std::function<void()> op;
};

void Compare(benchmark::State& state, std::size_t bytes, const std::function<void()>& raw,
             const std::vector<Variant>& variants) {
  double raw_best = 1e30;
  std::vector<double> best(variants.size(), 1e30);
  bool raw_first = true;
  for (auto _ : state) {
    // Alternate the order, so neither side always runs right after the other's cache effects.
    if (raw_first) raw_best = std::min(raw_best, SlowestRankSeconds(raw));
    double first = 0.0;
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const double seconds = SlowestRankSeconds(variants[v].op);
      best[v] = std::min(best[v], seconds);
      if (v == 0) first = seconds;
    }
    if (!raw_first) raw_best = std::min(raw_best, SlowestRankSeconds(raw));
    raw_first = !raw_first;
    state.SetIterationTime(first);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["ranks"] = Ranks();
  state.counters["raw_mpi_best_ms"] = raw_best * 1e3;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    state.counters[variants[v].name + "_best_ms"] = best[v] * 1e3;
    state.counters[variants[v].name + "_vs_raw"] = raw_best / best[v];
  }
}

DataType DTypeArg(const benchmark::State& state) { return static_cast<DataType>(state.range(0)); }

// All-gather of one 16M-element unit: raw MPI_Allgather vs IProcessGroup::AllGather vs
// FSDPShardingUnit::Gather + Release (cast of the FP32 shard, allocation, all-gather, views).
void BM_AllGather16M(benchmark::State& state) {
  const DataType dtype = DTypeArg(state);
  const std::size_t shard = kUnitElements / static_cast<std::size_t>(Ranks());
  auto input = cpu::Empty({shard}, dtype);
  auto output = cpu::Empty({kUnitElements}, dtype);
  const MPI_Datatype type = dtype == DataType::Float32 ? MPI_FLOAT : MPI_UINT16_T;
  fsdp::FSDP model(Group(), {.ParamDType = dtype});
  auto& unit = model.RegisterUnit("unit", {{"weight", cpu::Empty({kUnitElements}, DataType::Float32)}});
  Compare(state, kUnitElements * mlframework::ElementSize(dtype),
          [&] {
            MPI_Allgather(cpu::Data(*input), static_cast<int>(shard), type, cpu::MutableData(*output),
                          static_cast<int>(shard), type, MPI_COMM_WORLD);
          },
          {{"library", [&] { Group()->AllGather(*input, *output); }}, {"fsdp_unit", [&] {
                                                                         unit.Gather();
                                                                         unit.Release();
                                                                       }}});
}

// All-gather of one 16M-element FP8 unit whose FP8 shard is current (the forward and backward
// gathers of a step): raw MPI_Allgather of the shard's bytes vs IProcessGroup::AllGather of the
// FP8 tensors vs FSDPShardingUnit::Gather + Release (the kept FP8 shard sent as it is).
void BM_AllGatherFloat816M(benchmark::State& state) {
  const DataType dtype = DTypeArg(state);
  const std::size_t shard = kUnitElements / static_cast<std::size_t>(Ranks());
  auto input = cpu::Empty({shard}, dtype);
  auto output = cpu::Empty({kUnitElements}, dtype);
  fsdp::FSDP model(Group(), {.ParamDType = dtype});
  auto& unit = model.RegisterUnit(
      "unit", {{"weight", mlframework::FromVector(std::vector<float>(kUnitElements, 0.5f), {kUnitElements})}});
  unit.Gather();  // quantizes the shard once; the gathers below send it as it is
  unit.Release();
  Compare(state, kUnitElements,
          [&] {
            MPI_Allgather(cpu::Data(*input), static_cast<int>(shard), MPI_UINT8_T, cpu::MutableData(*output),
                          static_cast<int>(shard), MPI_UINT8_T, MPI_COMM_WORLD);
          },
          {{"fsdp_unit",
            [&] {
              unit.Gather();
              unit.Release();
            }},
           {"library", [&] { Group()->AllGather(*input, *output); }}});
}

// The once-per-step quantization of a 16M-element FP8 unit's shard, the chain the first gather
// after a step runs before its all-gather: the amax of each parameter's part of the FP32 master
// shard, one all-reduce MAX of the unit's amax vector, the scale update, the scaled cast into the
// FP8 shard. Timed as its own case (slowest rank, between barriers); the traffic is two reads of
// the FP32 shard and one write of the FP8 shard. "first_gather" is a whole first gather after a
// change of the FP8 dtype (state and FP8 shard made again, quantization, all-gather).
void BM_Float8Quantize16M(benchmark::State& state) {
  const DataType dtype = DTypeArg(state);
  const std::size_t shard = kUnitElements / static_cast<std::size_t>(Ranks());
  std::vector<float> values(shard);
  for (std::size_t i = 0; i < shard; ++i) values[i] = static_cast<float>(i % 1000) * 0.001f - 0.5f;
  const mlframework::TensorPtr master = mlframework::FromVector(values, {shard});
  const mlframework::TensorPtr fp8_shard = cpu::Empty({shard}, dtype);
  // The unit's state rows with a history of one row: amax, scale, scale_inv, fp8_max, scratch.
  const mlframework::TensorPtr scales =
      mlframework::FromVector({0.0f, 1.0f, 1.0f, dtype == DataType::Float8E4M3FN ? 448.0f : 57344.0f, 0.0f}, {5});
  const mlframework::TensorPtr amax = cpu::View(scales, 0, {1});
  const mlframework::TensorPtr scale = cpu::View(scales, 1, {1});
  const mlframework::Float8ScaleUpdate update{
      .Count = 1, .Length = 1, .MostRecent = true, .KeepScaleOnBadAmax = false, .RollHistory = false};
  fsdp::FSDP model(Group(), {.ParamDType = dtype});
  auto& unit = model.RegisterUnit("unit", {{"weight", mlframework::Zeros({kUnitElements})}});
  const DataType other = dtype == DataType::Float8E4M3FN ? DataType::Float8E5M2 : DataType::Float8E4M3FN;
  double best = 1e30;
  double first_gather_best = 1e30;
  bool flip = false;
  for (auto _ : state) {
    const double seconds = SlowestRankSeconds([&] {
      mlframework::Amax(std::span<const mlframework::TensorPtr>(&master, 1), amax);
      Group()->AllReduce(*amax, dist::ReduceOp::Max);
      scales->Backend()->UpdateFloat8Scales(*scales, update);
      mlframework::ScaledCastToFloat8(std::span<const mlframework::TensorPtr>(&master, 1),
                                      std::span<const mlframework::TensorPtr>(&fp8_shard, 1), scale, nullptr);
    });
    best = std::min(best, seconds);
    state.SetIterationTime(seconds);
    model.SetParamDType((flip = !flip) ? other : dtype);  // the next gather quantizes again
    first_gather_best = std::min(first_gather_best, SlowestRankSeconds([&] {
                                   unit.Gather();
                                   unit.Release();
                                 }));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * shard * (2 * sizeof(float) + 1)));
  state.counters["ranks"] = Ranks();
  state.counters["quantize_best_ms"] = best * 1e3;
  state.counters["first_gather_best_ms"] = first_gather_best * 1e3;
}

// Reduce-scatter of one 16M-element unit. FP32: raw MPI_FLOAT sum. FP16/BF16: raw MPI_SHORT
// integer sum of the same bytes (MPI's cheapest built-in 16-bit reduction, the limit for any
// FP16/BF16 method) vs the user-op and the convert-to-FP32 methods; FSDPShardingUnit's
// ReduceGradients (fused flatten + average into the reduce dtype, reduce-scatter, FP32 shard).
void BM_ReduceScatter16M(benchmark::State& state) {
  const DataType dtype = DTypeArg(state);
  const std::size_t shard = kUnitElements / static_cast<std::size_t>(Ranks());
  auto input = cpu::Empty({kUnitElements}, dtype);
  auto output = cpu::Empty({shard}, dtype);
  const MPI_Datatype type = dtype == DataType::Float32 ? MPI_FLOAT : MPI_SHORT;
  fsdp::FSDP model(Group(), {.ReduceDType = dtype});
  auto& unit = model.RegisterUnit("unit", {{"weight", cpu::Empty({kUnitElements}, DataType::Float32)}});
  const mlframework::GradientMap gradients{{"weight", cpu::Empty({kUnitElements}, DataType::Float32)}};
  unit.Gather();
  std::vector<Variant> variants{{"library", [&] { Group()->ReduceScatter(*input, *output); }}};
  if (dtype == DataType::Float32) {
    variants.push_back({"library_builtin", [&] { BuiltinFloat32Group()->ReduceScatter(*input, *output); }});
  } else {
    variants.push_back(
        {"library_alltoall", [&] { Group(dist::HalfReduction::AllToAll)->ReduceScatter(*input, *output); }});
    variants.push_back({"library_userop", [&] { Group(dist::HalfReduction::UserOp)->ReduceScatter(*input, *output); }});
    variants.push_back(
        {"library_convert", [&] { Group(dist::HalfReduction::ConvertToFloat32)->ReduceScatter(*input, *output); }});
  }
  variants.push_back({"fsdp_unit", [&] {
                        unit.ReduceGradients(gradients);
                        unit.ZeroGrad();
                      }});
  Compare(
      state, kUnitElements * mlframework::ElementSize(dtype),
      [&] {
        MPI_Reduce_scatter_block(cpu::Data(*input), cpu::MutableData(*output), static_cast<int>(shard), type, MPI_SUM,
                                 MPI_COMM_WORLD);
      },
      variants);
  unit.Release();
}

// All-reduce of one 16M-element tensor (NoShard's gradient reduction, the found-inf and norm
// agreements at scale): raw MPI_Allreduce (MPI_FLOAT; MPI_SHORT integer sum for 16-bit) vs
// the library with its default methods and with the alternatives.
void BM_AllReduce16M(benchmark::State& state) {
  const DataType dtype = DTypeArg(state);
  auto tensor = cpu::Empty({kUnitElements}, dtype);
  const MPI_Datatype type = dtype == DataType::Float32 ? MPI_FLOAT : MPI_SHORT;
  std::vector<Variant> variants{{"library", [&] { Group()->AllReduce(*tensor); }}};
  if (dtype == DataType::Float32) {
    variants.push_back({"library_builtin", [&] { BuiltinFloat32Group()->AllReduce(*tensor); }});
  } else {
    variants.push_back({"library_userop", [&] { Group(dist::HalfReduction::UserOp)->AllReduce(*tensor); }});
  }
  Compare(
      state, kUnitElements * mlframework::ElementSize(dtype),
      [&] {
        MPI_Allreduce(MPI_IN_PLACE, cpu::MutableData(*tensor), static_cast<int>(kUnitElements), type, MPI_SUM,
                      MPI_COMM_WORLD);
      },
      variants);
}

// The gradient wires on one 16M-element unit, each from FP32 gradients to an FP32 shard: BF16
// (ReduceDType BFloat16: cast, 16-bit reduce-scatter, widen) against the FP8 block wire
// (GradientWire::Float8Blocks: encode, all-to-all of codes and scales, decode and sum), as the
// library's collectives (BF16 input for the 16-bit one, FP32 for Float8BlockReduceScatter, which
// encodes inside) and as FSDPShardingUnit::ReduceGradients. Raw: MPI_Reduce_scatter_block of the
// BF16 bytes (MPI_SHORT sum). Counters: bytes each rank sends per element, and the FP8 wire's
// best time over the BF16 wire's (target <= 1.1).
void BM_GradientWire16M(benchmark::State& state) {
  const std::size_t shard = kUnitElements / static_cast<std::size_t>(Ranks());
  std::vector<float> values(kUnitElements);
  for (std::size_t i = 0; i < kUnitElements; ++i) values[i] = std::sin(0.001f * static_cast<float>(i % 100000)) * 1e-3f;
  const auto fp32_input = mlframework::FromVector(values, {kUnitElements});
  const auto bf16_input = fp32_input->CastTo(DataType::BFloat16);
  auto bf16_output = cpu::Empty({shard}, DataType::BFloat16);
  auto fp32_output = cpu::Empty({shard}, DataType::Float32);
  fsdp::FSDP bf16_model(Group(), {.ReduceDType = DataType::BFloat16});
  fsdp::FSDP fp8_model(Group(), {.Wire = fsdp::GradientWire::Float8Blocks});
  auto& bf16_unit = bf16_model.RegisterUnit("unit", {{"weight", cpu::Empty({kUnitElements}, DataType::Float32)}});
  auto& fp8_unit = fp8_model.RegisterUnit("unit", {{"weight", cpu::Empty({kUnitElements}, DataType::Float32)}});
  const mlframework::GradientMap gradients{{"weight", fp32_input}};
  bf16_unit.Gather();
  fp8_unit.Gather();
  const auto reduce = [&gradients](fsdp::FSDPShardingUnit& unit) {
    unit.ReduceGradients(gradients);
    unit.ZeroGrad();
  };
  Compare(state, kUnitElements * sizeof(std::uint16_t),
          [&] {
            MPI_Reduce_scatter_block(cpu::Data(*bf16_input), cpu::MutableData(*bf16_output), static_cast<int>(shard),
                                     MPI_SHORT, MPI_SUM, MPI_COMM_WORLD);
          },
          {{"bf16_library", [&] { Group()->ReduceScatter(*bf16_input, *bf16_output); }},
           {"fp8_library", [&] { dist::Float8BlockReduceScatter(*Group(), *fp32_input, *fp32_output); }},
           {"bf16_fsdp_unit", [&] { reduce(bf16_unit); }},
           {"fp8_fsdp_unit", [&] { reduce(fp8_unit); }}});
  bf16_unit.Release();
  fp8_unit.Release();
  // What each rank sends per element of the unit: the other ranks' chunks, (P - 1) / P of it.
  const double others = static_cast<double>(Ranks() - 1) / static_cast<double>(Ranks());
  const double fp8_bytes = dist::Float8WireBytesPerElement(shard);
  state.counters["bf16_wire_bytes_per_element"] = 2.0 * others;
  state.counters["fp8_wire_bytes_per_element"] = fp8_bytes * others;
  state.counters["fp8_vs_bf16_bytes"] = fp8_bytes / 2.0;
  state.counters["fp8_vs_bf16_library_time"] =
      state.counters["fp8_library_best_ms"].value / state.counters["bf16_library_best_ms"].value;
  state.counters["fp8_vs_bf16_fsdp_unit_time"] =
      state.counters["fp8_fsdp_unit_best_ms"].value / state.counters["bf16_fsdp_unit_best_ms"].value;
}

// ---- peak memory per rank ----

// Bytes the allocator has handed out and not yet taken back (heap + mmapped chunks).
double LiveHeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

using mlfw_bench::ProcStatusBytes;

// Resets the peak resident set size (VmHWM) to the current one (Linux >= 4.0), so the peak of
// each measurement is its own; false when the kernel refuses.
bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good() && ProcStatusBytes("VmHWM") <= ProcStatusBytes("VmRSS") + 64.0 * 1024.0;
}

// The first large messages touch the MPI transport's shared-memory segments and make Open MPI
// allocate its collective scratch buffers: a fixed per-process cost, not parameters, gradients
// or optimizer state. One all-gather and one reduce-scatter of a unit's size, on memory mapped
// and unmapped here (so no freed heap is left for FSDP to refill), pay it before the baseline.
void WarmUpTransport(std::size_t unit_elements) {
  const auto ranks = static_cast<std::size_t>(Ranks());
  const std::size_t shard = unit_elements / ranks;
  const std::size_t bytes = (unit_elements + shard) * sizeof(float);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;
  auto* full = static_cast<float*>(memory);
  float* part = full + unit_elements;
  const int count = static_cast<int>(shard);
  MPI_Reduce_scatter_block(full, part, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allgather(part, count, MPI_FLOAT, full, count, MPI_FLOAT, MPI_COMM_WORLD);
  MPI_Allgather(part, count, MPI_UINT16_T, full, count, MPI_UINT16_T, MPI_COMM_WORLD);
  munmap(memory, bytes);
}

// Trains 3 steps of FullShard + Adam over range(0) units of range(1) elements (FP16 forward,
// FP32 reduce); with range(2), through FSDP's hooks with forward and backward prefetch, against
// the ZeRO-3 figure plus one more gathered unit. The "framework" owns one full FP32 gradient tensor per unit at a time,
// as a backward pass produces it. Peak RSS growth (VmHWM, reset after the transport warm-up) over the start is compared
// with the ZeRO-3 figure.
void BM_FsdpPeakMemory(benchmark::State& state) {
  const auto units = static_cast<std::size_t>(state.range(0));
  const auto unit_elements = static_cast<std::size_t>(state.range(1));
  const bool prefetch = state.range(2) != 0;
  const auto params = static_cast<double>(units * unit_elements);
  const int ranks = Ranks();
  double peak_growth = 0.0;
  double live_peak = 0.0;
  bool peak_reset = true;
  for (auto _ : state) {
    WarmUpTransport(unit_elements);
    malloc_trim(0);  // freed heap of earlier runs goes back to the system: no resident spare
    MPI_Barrier(MPI_COMM_WORLD);
    peak_reset = ResetPeakRss();
    const double baseline = ProcStatusBytes("VmHWM");
    const double live_baseline = LiveHeapBytes();
    {
      fsdp::FSDP model(Group(), {.Strategy = fsdp::ShardingStrategy::FullShard, .ParamDType = DataType::Float16});
      for (std::size_t u = 0; u < units; ++u) {
        model.RegisterUnit("unit" + std::to_string(u),
                           {{"weight", mlframework::Zeros({unit_elements}, DataType::Float32)}});
      }
      mlframework::optimizers::Adam adam(model.ShardedParameters());
      auto sample = [&] { live_peak = std::max(live_peak, LiveHeapBytes() - live_baseline); };
      for (int step = 0; prefetch && step < 3; ++step) {
        // The overlapped schedule through the hooks: forward, then backward in reverse.
        model.SetPrefetch({.Forward = true, .Backward = true});
        for (std::size_t u = 0; u < units; ++u) {
          model.PreForward(u);
          sample();
          model.PostForward(u);
        }
        for (std::size_t u = units; u-- > 0;) {
          model.PreBackward(u);
          // Kept by the reduction in flight until the next unit's PostBackward.
          const mlframework::GradientMap gradients{{"weight", mlframework::Zeros({unit_elements})}};
          sample();
          model.PostBackward(u, gradients);
          sample();
        }
        model.FinishBackward();
        model.Step(adam);
        sample();
      }
      for (int step = 0; !prefetch && step < 3; ++step) {
        for (std::size_t u = 0; u < units; ++u) {
          auto& unit = model.Unit(u);
          unit.Gather();
          sample();
          {
            // The framework's backward output for this unit (owned by the framework).
            const mlframework::GradientMap gradients{{"weight", mlframework::Zeros({unit_elements})}};
            sample();
            unit.ReduceGradients(gradients);
          }
          sample();
          unit.Release();
        }
        model.Step(adam);
        sample();
      }
      peak_growth = ProcStatusBytes("VmHWM") - baseline;
    }
    MPI_Allreduce(MPI_IN_PLACE, &peak_growth, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &live_peak, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  // With prefetch the target adds one more gathered unit (FP16) to the ZeRO-3 figure.
  const double zero3 = 16.0 * params / ranks + (prefetch ? 4.0 : 2.0) * static_cast<double>(unit_elements);
  if (!peak_reset) state.SkipWithError("cannot reset the peak RSS (/proc/self/clear_refs)");
  state.counters["ranks"] = ranks;
  state.counters["params_M"] = params / 1e6;
  state.counters["rss_peak_MiB_max_rank"] = peak_growth / (1024.0 * 1024.0);
  state.counters["zero3_MiB"] = zero3 / (1024.0 * 1024.0);
  state.counters["rss_over_zero3"] = peak_growth / zero3;
  state.counters["live_peak_MiB_max_rank"] = live_peak / (1024.0 * 1024.0);
  state.counters["live_over_zero3"] = live_peak / zero3;
}

// How BM_FsdpLowBitMemory keeps masters and moments.
enum class LowBitMode : std::int64_t {
  Float32,         // FP32 master shards, FP32 moments (12 B a parameter)
  RoundedEight,    // BF16 master shards with stochastic rounding, 8-bit block-scaled moments
  RemainderEight,  // BF16 master shards with 16-bit remainders (exact FP32 masters), 8-bit moments
};

// Trains 3 steps of FullShard + AdamW over range(1) units of range(2) elements (BF16 gathers, FP32
// reduce) with the masters and moments of LowBitMode range(0). Counters, per rank (the largest
// over the ranks) and per parameter of the whole model (summed over the ranks, before dividing
// by them):
// - state_masters_B_per_param: the bytes the optimizer and the shards hold for masters and
//   moments, counted from their stored sizes (shard dtype, remainders, codes and block scales);
// - live_state_masters_B_per_param: the same measured on the heap (mallinfo2): live bytes after
//   the steps, with the cache of gather buffers released, over the start, less the FP32 gradient
//   shards (4 B x shard, kept between steps);
// - rss_peak_MiB_max_rank: peak RSS growth (VmHWM) over the start, as BM_FsdpPeakMemory.
void BM_FsdpLowBitMemory(benchmark::State& state) {
  const auto mode = static_cast<LowBitMode>(state.range(0));
  const auto units = static_cast<std::size_t>(state.range(1));
  const auto unit_elements = static_cast<std::size_t>(state.range(2));
  const auto params = static_cast<double>(units * unit_elements);
  mlframework::optimizers::AdamOptions options = mlframework::optimizers::AdamOptions::AdamW(1e-3, 1e-2);
  if (mode != LowBitMode::Float32) {
    options.Masters = mode == LowBitMode::RoundedEight ? mlframework::MasterFormat::BFloat16StochasticRounding
                                                       : mlframework::MasterFormat::BFloat16Remainder;
    options.FirstMomentFormat = mlframework::StateFormat::Int8Block;
    options.SecondMomentFormat = mlframework::StateFormat::UInt8Block;
  }
  const DataType master_dtype = mode == LowBitMode::Float32 ? DataType::Float32 : DataType::BFloat16;
  std::array<double, 3> measured{};  // counted bytes, live bytes, peak RSS growth
  bool peak_reset = true;
  for (auto _ : state) {
    WarmUpTransport(unit_elements);
    malloc_trim(0);
    MPI_Barrier(MPI_COMM_WORLD);
    peak_reset = ResetPeakRss();
    const double baseline = ProcStatusBytes("VmHWM");
    const double live_baseline = LiveHeapBytes();
    {
      fsdp::FSDP model(Group(), {.Strategy = fsdp::ShardingStrategy::FullShard,
                                 .ParamDType = DataType::BFloat16,
                                 .MasterDType = master_dtype});
      for (std::size_t u = 0; u < units; ++u) {
        model.RegisterUnit("unit" + std::to_string(u),
                           {{"weight", mlframework::Zeros({unit_elements}, DataType::Float32)}});
      }
      mlframework::optimizers::Adam adam(model.ShardedParameters(), options);
      for (int step = 0; step < 3; ++step) {
        for (std::size_t u = 0; u < units; ++u) {
          auto& unit = model.Unit(u);
          unit.Gather();
          {
            const mlframework::GradientMap gradients{{"weight", mlframework::Zeros({unit_elements})}};
            unit.ReduceGradients(gradients);
          }
          unit.Release();
        }
        model.Step(adam);
      }
      model.ReleaseCachedBuffers();
      double counted = 0.0;
      double gradient_shards = 0.0;
      for (std::size_t u = 0; u < units; ++u) {
        const auto& unit = model.Unit(u);
        const auto shard = static_cast<double>(unit.ShardSize());
        counted += shard * static_cast<double>(ElementSize(unit.MasterDType()));
        if (options.Masters == mlframework::MasterFormat::BFloat16Remainder) counted += 2.0 * shard;
        for (std::size_t v = 0; v < 2; ++v) {
          const mlframework::amp::StoredStateVector stored = adam.StoredState(unit.Name(), v);
          counted += static_cast<double>(stored.Codes.size() + stored.Scales.size() * sizeof(float));
        }
        gradient_shards += 4.0 * shard;
      }
      measured = {counted, LiveHeapBytes() - live_baseline - gradient_shards, ProcStatusBytes("VmHWM") - baseline};
    }
    std::array<double, 3> sums = measured;
    MPI_Allreduce(MPI_IN_PLACE, sums.data(), 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &measured[2], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    measured[0] = sums[0];
    measured[1] = sums[1];
  }
  if (!peak_reset) state.SkipWithError("cannot reset the peak RSS (/proc/self/clear_refs)");
  state.counters["ranks"] = Ranks();
  state.counters["params_M"] = params / 1e6;
  state.counters["state_masters_B_per_param"] = measured[0] / params;
  state.counters["live_state_masters_B_per_param"] = measured[1] / params;
  state.counters["rss_peak_MiB_max_rank"] = measured[2] / (1024.0 * 1024.0);
}

constexpr auto kF32 = static_cast<std::int64_t>(DataType::Float32);
constexpr auto kF16 = static_cast<std::int64_t>(DataType::Float16);
constexpr auto kBF16 = static_cast<std::int64_t>(DataType::BFloat16);
constexpr auto kE4M3 = static_cast<std::int64_t>(DataType::Float8E4M3FN);

// Memory first, while the process is small (the peak is reset per run, but a heap grown by the
// 16M-element buffers would hand FSDP memory that is already resident).
BENCHMARK(BM_FsdpPeakMemory)
    ->Args({32, 1 << 19, 0})
    ->Args({64, 1 << 18, 0})
    ->Args({64, 1 << 20, 0})
    ->Args({64, 1 << 20, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FsdpLowBitMemory)
    ->Args({static_cast<std::int64_t>(LowBitMode::Float32), 12, 1 << 22})
    ->Args({static_cast<std::int64_t>(LowBitMode::RoundedEight), 12, 1 << 22})
    ->Args({static_cast<std::int64_t>(LowBitMode::RemainderEight), 12, 1 << 22})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllGather16M)
    ->Arg(kF32)
    ->Arg(kF16)
    ->Iterations(benchmark::IterationCount{2} * kIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllGatherFloat816M)
    ->Arg(kE4M3)
    ->Iterations(benchmark::IterationCount{2} * kIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Float8Quantize16M)->Arg(kE4M3)->Iterations(kIterations)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReduceScatter16M)
    ->Arg(kF32)
    ->Arg(kF16)
    ->Arg(kBF16)
    ->Iterations(kIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GradientWire16M)->Iterations(kIterations)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllReduce16M)
    ->Arg(kF32)
    ->Arg(kF16)
    ->Arg(kBF16)
    ->Iterations(kIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  Group();  // initializes MPI (the library finalizes it at exit)
  return mlfw_bench::RunOnEveryRank(argc, argv, Group()->Rank());
}
