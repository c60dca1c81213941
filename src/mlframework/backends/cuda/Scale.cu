#include "mlframework/backends/cuda/Scale.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerMultiprocessor)
    ScaleKernel(const __grid_constant__ LaunchTable table, FactorSource factor_source) {
  const TableView list = table.View();
  const float factor = ResolveFactor(factor_source);
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      auto* data = static_cast<StoredType<D>*>(list.data[0][s]);
      ForEachStored<true>(data, lo, hi, [&](StoredType<D> x) { return ScaleConvert<D, D>(x, factor); });
    });
  });
}

}  // namespace

void LaunchScale(const Launch& launch, FactorSource factor, cudaStream_t stream) {
  ScaleKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
