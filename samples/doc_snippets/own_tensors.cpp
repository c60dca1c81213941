// README.md and docs/own-tensors.md: your framework's host memory and DLPack tensors.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include <dlpack/dlpack.h>  // Debian's libdlpack-dev

#include <mlframework/mlframework.hpp>

using namespace mlframework;

// grad: your FP16 gradient; keep_alive: whatever owns its memory (nullptr if it outlives the tensor)
TensorPtr WrapHost(std::vector<Float16>& grad, std::size_t rows, std::size_t cols, std::shared_ptr<void> keep_alive) {
  return backends::cpu::Wrap(grad.data(), {rows, cols}, DataType::Float16, std::move(keep_alive));
}

// managed: what your framework exports (libtorch: at::toDLPack(param.grad()))
TensorPtr Import(DLManagedTensor* managed) {
  return FromDLPack(managed);  // the same memory; managed->deleter is called when the tensor goes
}

// and the other way (libtorch: at::fromDLPack(Export(unscaled)))
DLManagedTensor* Export(const TensorPtr& unscaled) { return ToDLPack(unscaled); }
