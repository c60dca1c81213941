#include "mlframework/backends/cuda/Cast.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads)
    CastKernel(const __grid_constant__ LaunchTable table, FactorSource factor_source, std::int32_t* flag) {
  const TableView list = table.View();
  const float factor = ResolveFactor(factor_source);
  bool found = false;
  ForEachPair(list, [&](auto src_tag, auto dst_tag, const auto* src, auto* dst, std::uint64_t lo, std::uint64_t hi) {
    constexpr DataType S = decltype(src_tag)::value;
    constexpr DataType T = decltype(dst_tag)::value;
    ForEachElement(
        lo, hi, [&](std::uint64_t i) { return src[i]; },
        [&](std::uint64_t i, StoredType<S> x) {
          const StoredType<T> out = ScaleConvert<S, T>(x, factor);
          dst[i] = out;
          found |= !IsFiniteStored<T>(out);
        });
  });
  BlockRaiseFlag(found, flag);
}

}  // namespace

void LaunchCast(const Launch& launch, FactorSource factor, std::int32_t* flag, cudaStream_t stream) {
  CastKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor, flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
