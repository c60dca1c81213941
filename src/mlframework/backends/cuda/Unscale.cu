#include "mlframework/backends/cuda/Unscale.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerMultiprocessor)
    UnscaleKernel(const __grid_constant__ LaunchTable table, FactorSource factor_source, std::int32_t* flag) {
  const TableView list = table.View();
  const float factor = ResolveFactor(factor_source);
  bool found = false;
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      auto* data = static_cast<StoredType<D>*>(list.data[0][s]);
      ForEachStored<true>(data, lo, hi, [&](StoredType<D> x) {
        const StoredType<D> out = ScaleConvert<D, D>(x, factor);
        found |= !IsFiniteStored<D>(out);
        return out;
      });
    });
  });
  BlockRaiseFlag(found, flag);
}

}  // namespace

void LaunchUnscale(const Launch& launch, FactorSource factor, std::int32_t* flag, cudaStream_t stream) {
  UnscaleKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor, flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
