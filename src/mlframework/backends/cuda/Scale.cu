#include "mlframework/backends/cuda/Scale.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads)
    ScaleKernel(const __grid_constant__ TensorListMeta list, FactorSource factor_source) {
  const float factor = ResolveFactor(factor_source);
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      auto* data = static_cast<StoredType<D>*>(list.data[0][s]);
      ForEachElement(
          lo, hi, [&](std::uint64_t i) { return data[i]; },
          [&](std::uint64_t i, StoredType<D> x) { data[i] = ScaleConvert<D, D>(x, factor); });
    });
  });
}

}  // namespace

void LaunchScale(const Launch& launch, FactorSource factor, cudaStream_t stream) {
  ScaleKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.meta, factor);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
