#include "mlframework/backends/cuda/AddInto.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads) AddIntoKernel(const __grid_constant__ LaunchTable table, float alpha) {
  const TableView list = table.View();
  ForEachPair(list, [&](auto src_tag, auto dst_tag, const auto* src, auto* dst, std::uint64_t lo, std::uint64_t hi) {
    constexpr DataType S = decltype(src_tag)::value;
    constexpr DataType T = decltype(dst_tag)::value;
    using Pair = LoadedPair<StoredType<S>, StoredType<T>>;
    ForEachElement(
        lo, hi,
        [&](std::uint64_t i) {
          return Pair{src[i], dst[i]};
        },
        [&](std::uint64_t i, Pair x) {
          // Explicit rounding intrinsics: no contraction into an FMA, so the CPU backend's bits.
          const float product = __fmul_rn(alpha, ToFloat<S>(x.first));
          dst[i] = FromFloat<T>(__fadd_rn(ToFloat<T>(x.second), product));
        });
  });
}

}  // namespace

void LaunchAddInto(const Launch& launch, float alpha, cudaStream_t stream) {
  AddIntoKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, alpha);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
