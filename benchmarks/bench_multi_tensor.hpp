#pragma once
// Shared by bench_multi_tensor.cpp and, when libtorch is found, torch/MultiTensorTorch.cpp:
// the tensor-list layouts every case of the multi-tensor benchmark runs on.

#include <cstddef>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/core/ITensor.hpp>

namespace mlfw_bench {

/// gpt: ~100 mixed-size tensors; small: 1K-4K-element tensors allocated one by one; packed: the
/// same tensors in one contiguous buffer (ZerosContiguous); flat: one tensor.
enum class Layout { Gpt, Small, Packed, Reversed, Flat };

/// Element counts of the tensors of @p layout, summing to @p total.
std::vector<std::size_t> LayoutSizes(Layout layout, std::size_t total);
/// CPU tensors of @p dtype in @p layout (values in [-1, 1) when @p fill), cached while the
/// benchmarks of one layout and size run.
const std::vector<mlframework::TensorPtr>& List(Layout layout, std::size_t total, mlframework::DataType dtype,
                                                bool fill = true);
/// Bytes of all elements of @p list.
std::size_t Bytes(const std::vector<mlframework::TensorPtr>& list);

/// Wall-clock timing (default), or, with --mlfw_timing=cpu, the CPU time of the whole process
/// (all OpenMP threads; run with OMP_WAIT_POLICY=passive so waiting threads sleep): the work a
/// case costs, which a machine shared with other jobs distorts far less than the wall clock.
void ApplyTiming(benchmark::internal::Benchmark* benchmark);

const char* LayoutName(Layout layout);
const char* DtypeName(mlframework::DataType dtype);
/// "1M", "16M", "64M".
std::string SizeName(std::size_t elements);

#if defined(MLFW_BENCH_WITH_TORCH)
/// Registers the libtorch user-code peers of the fused cases for one layout and size.
void RegisterTorchPeers(Layout layout, std::size_t total);
#endif

}  // namespace mlfw_bench
