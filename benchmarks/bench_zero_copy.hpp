#pragma once
// Shared by bench_zero_copy.cpp and, when libtorch is found, torch/ZeroCopyTorch.cpp: the
// externally owned GPT-2-small gradients and the contenders the paired benchmarks time.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>

namespace mlfw_zc {

/// One gradient in memory the benchmark owns, as a framework owns its tensors.
struct ExternalGradient {
  std::string name;          ///< GPT-2 parameter name ("h0.attn.c_attn.weight").
  mlframework::Shape shape;  ///< Row-major shape.
  void* data = nullptr;      ///< 64-byte aligned, as libtorch's CPU allocator aligns.
  std::size_t bytes = 0;     ///< Size in bytes.
};

/// The 146 gradients of GPT-2 small's 12 transformer blocks and final layer norm (85,056,000
/// elements) in @p dtype (Float32 or Float16), allocated and filled once per process. Element i of
/// gradient k holds Value(k, i): finite, loss-scaled magnitudes (FP16: as after a 65536 loss scale).
const std::vector<ExternalGradient>& External(mlframework::DataType dtype);
/// The value External() stores at element @p i of gradient @p k (exactly representable in FP16).
float Value(std::size_t k, std::size_t i);

/// Bytes of all allocations of 64 KiB and more made through operator new in this process so
/// far (zero_copy/LargeAllocations.cpp replaces the program's operator new to count them).
std::size_t LargeAllocatedBytes();

/// One way to run the same operation; the paired benchmarks time each in every iteration.
struct Contender {
  std::string name;                     ///< "native", "wrap", "dlpack", "torch": the counters' prefix.
  std::function<void()> run;            ///< One call (timed).
  bool library = true;                  ///< A library call: its allocations are counted against native's.
  std::function<std::size_t()> copied;  ///< Gradient bytes the last call left outside the external memory.
};

#if defined(MLFW_BENCH_WITH_TORCH)
/// torch's at::_amp_foreach_non_finite_check_and_unscale_ (inverse scale 1) on at::Tensors made
/// once with at::from_blob over External(Float32), as a libtorch program's own gradients; when
/// this libtorch has no CPU kernel for it, torch::_foreach_mul_ and isfinite per tensor (the user
/// code of benchmarks/torch/MultiTensorTorch.cpp). @p note gets which one and the thread count.
Contender TorchUnscaleCheck(std::string& note);
#endif

}  // namespace mlfw_zc
