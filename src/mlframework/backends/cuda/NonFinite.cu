#include "mlframework/backends/cuda/NonFinite.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerMultiprocessor)
    NonFiniteKernel(const __grid_constant__ LaunchTable table, std::int32_t* flag) {
  const TableView list = table.View();
  bool found = false;
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      const auto* data = static_cast<const StoredType<D>*>(list.data[0][s]);
      bool all_finite = true;
      ForEachStored<false>(data, lo, hi, [&](StoredType<D> x) { all_finite &= IsFiniteStored<D>(x); });
      found = found || !all_finite;
    });
  });
  BlockRaiseFlag(found, flag);
}

// The check that also raises *amax: every element is widened to FP32 for the amax.
__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerMultiprocessor)
    NonFiniteAmaxKernel(const __grid_constant__ LaunchTable table, std::int32_t* flag, float* amax) {
  const TableView list = table.View();
  bool found = false;
  float peak = 0.0f;
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      const auto* data = static_cast<const StoredType<D>*>(list.data[0][s]);
      bool all_finite = true;
      ForEachStored<false>(data, lo, hi, [&](StoredType<D> x) {
        all_finite &= IsFiniteStored<D>(x);
        RaisePeak(peak, ToFloat<D>(x));
      });
      found = found || !all_finite;
    });
  });
  BlockRaiseFlag(found, flag);
  BlockRaiseAmax(peak, amax);
}

}  // namespace

void LaunchNonFiniteAmax(const Launch& launch, std::int32_t* flag, float* amax, cudaStream_t stream) {
  NonFiniteAmaxKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, flag, amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchNonFinite(const Launch& launch, std::int32_t* flag, cudaStream_t stream) {
  NonFiniteKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
