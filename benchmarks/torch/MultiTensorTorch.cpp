// What a libtorch user writes for the same jobs, on the same memory (from_blob
// over the benchmark's CPU tensors), registered into bench_multi_tensor so the
// ratios come from one run. Built only when CMake finds Torch.
//   unscale + check: torch::_foreach_mul_ then torch::isfinite(t).all() per tensor
//   sum of squares:  torch::_foreach_norm, then torch::norm of the stacked norms
//   casts:           t.to(kHalf) / t.to(kBFloat16) / t.to(kFloat) per tensor (allocates, as users do)
#include <omp.h>

#include <functional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>

#include "../bench_multi_tensor.hpp"

namespace mlfw_bench {

namespace {

using mlframework::DataType;

torch::ScalarType TorchType(DataType dtype) {
  switch (dtype) {
    case DataType::Float16:
      return torch::kHalf;
    case DataType::BFloat16:
      return torch::kBFloat16;
    case DataType::Float8E4M3FN:
      return torch::kFloat8_e4m3fn;
    case DataType::Float8E5M2:
      return torch::kFloat8_e5m2;
    case DataType::Float32:
      break;
  }
  return torch::kFloat;
}

std::vector<torch::Tensor> Wrap(const std::vector<mlframework::TensorPtr>& list) {
  std::vector<torch::Tensor> out;
  out.reserve(list.size());
  for (const auto& t : list) {
    out.push_back(torch::from_blob(mlframework::backends::cpu::MutableData(*t), {static_cast<std::int64_t>(t->Size())},
                                   torch::TensorOptions().dtype(TorchType(t->GetDataType()))));
  }
  return out;
}

// Runs `body` under the benchmark loop, then `settle` untimed; a libtorch error (an op without a
// CPU kernel for this dtype in this libtorch version) is reported as the case's error, not a crash.
template <typename Body>
void Guarded(benchmark::State& state, Body&& body, const std::function<void()>& settle = {}) {
  try {
    for (auto _ : state) {
      body();
    }
    if (settle) {
      settle();
    }
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

}  // namespace

void RegisterTorchPeers(Layout layout, std::size_t total) {
  at::set_num_threads(omp_get_max_threads());
  const std::string tail = std::string("/") + LayoutName(layout) + "/" + SizeName(total);
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const std::string d = DtypeName(dtype);
    benchmark::RegisterBenchmark(("torch/unscale_check/" + d + tail).c_str(), [=](benchmark::State& state) {
      const auto& list = List(layout, total, dtype);
      auto tensors = Wrap(list);
      double factor = 0.5;
      Guarded(
          state,
          [&] {
            torch::_foreach_mul_(tensors, factor);
            bool found = false;
            for (const auto& t : tensors) {
              found = found || !torch::isfinite(t).all().item<bool>();
            }
            benchmark::DoNotOptimize(found);
            factor = 1.0 / factor;
          },
          [&] {
            // An odd number of calls leaves the shared list halved (see BoundCall in
            // bench_multi_tensor.cpp): one more call restores it.
            if (factor != 0.5) {
              torch::_foreach_mul_(tensors, factor);
            }
          });
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * Bytes(list)));
    })->Apply(ApplyTiming);
    benchmark::RegisterBenchmark(("torch/sum_squares/" + d + tail).c_str(), [=](benchmark::State& state) {
      const auto& list = List(layout, total, dtype);
      const auto tensors = Wrap(list);
      Guarded(state, [&] {
        const auto norms = torch::_foreach_norm(tensors, 2);
        benchmark::DoNotOptimize(torch::norm(torch::stack(norms), 2).item<double>());
      });
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * Bytes(list)));
    })->Apply(ApplyTiming);
  }
  const std::pair<DataType, DataType> casts[] = {{DataType::Float32, DataType::Float16},
                                                 {DataType::Float32, DataType::BFloat16},
                                                 {DataType::Float16, DataType::Float32},
                                                 {DataType::BFloat16, DataType::Float32}};
  for (const auto& [from, to] : casts) {
    const std::string name = std::string("torch/cast/") + DtypeName(from) + "_to_" + DtypeName(to) + tail;
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
      const auto& list = List(layout, total, from);
      const auto tensors = Wrap(list);
      const torch::ScalarType target = TorchType(to);
      Guarded(state, [&] {
        for (const auto& t : tensors) {
          benchmark::DoNotOptimize(t.to(target));
        }
      });
      const std::size_t elements = Bytes(list) / mlframework::ElementSize(from);
      state.SetBytesProcessed(static_cast<std::int64_t>(
          state.iterations() * elements * (mlframework::ElementSize(from) + mlframework::ElementSize(to))));
    })->Apply(ApplyTiming);
  }
}

}  // namespace mlfw_bench
