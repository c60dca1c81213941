// README.md and docs/own-tensors.md: your framework's GPU memory and CUDA stream. Compiled
// only (doc_snippets_gpu): it needs mlframework::cuda and a GPU.
#include <cstddef>
#include <memory>
#include <utility>

#include <mlframework/mlframework.hpp>

using namespace mlframework;

// device_ptr: n FP32 values in your framework's memory on GPU 0
TensorPtr WrapDevice(void* device_ptr, std::size_t n, std::shared_ptr<void> keep_alive) {
  return backends::cuda::Wrap(device_ptr, {n}, DataType::Float32, /*device=*/0, std::move(keep_alive));
}

// your_stream: your framework's cudaStream_t, passed as void*
bool StepOnYourStream(void* your_stream, amp::GradScalerContext& ctx, amp::IOptimizer& optimizer) {
  const backends::cuda::StreamGuard on_yours(your_stream, /*device=*/0);
  return ctx.Step(optimizer);  // sees what your stream wrote; your next kernels see its results
}
