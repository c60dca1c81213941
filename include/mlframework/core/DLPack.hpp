#pragma once
/// @file DLPack.hpp
/// @brief Zero-copy exchange of tensors with other frameworks through DLPack.
///
/// DLPack (https://dmlc.github.io/dlpack/) is the tensor-exchange struct PyTorch, JAX, CuPy,
/// TensorFlow and most C++ frameworks speak: `at::toDLPack(tensor)` in libtorch hands over a
/// `DLManagedTensor*` that FromDLPack() turns into a TensorPtr over the same memory, on which
/// the fused kernels run at full speed. This is DLPack's legacy (unversioned) struct, the one
/// Debian's libdlpack-dev (0.6) and libtorch 1.13/2.x exchange; include `<dlpack/dlpack.h>`
/// to use these functions (this header only declares the struct).

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

struct DLManagedTensor;  // <dlpack/dlpack.h>

namespace mlframework {

/// A tensor over the memory of @p managed, with no copy, that takes ownership of it: the
/// managed tensor's deleter is called exactly once, when the last TensorPtr (and the last view of
/// it) is gone.
///
/// Accepted: device kDLCPU (the CPU backend) or kDLCUDA (the CUDA backend, which needs
/// mlframework::cuda linked); dtype float32, float16 or bfloat16 with one lane; compact row-major
/// strides or null strides (strides of extent-1 dimensions are ignored, as PyTorch writes them
/// freely, and so are all strides of a tensor with no elements: a zero extent); `byte_offset`
/// (a multiple of the element size, at most PTRDIFF_MAX and not past the end of the address
/// space) added to `data`; the resulting address aligned to the element size.
///
/// Anything else throws, and @p managed is then left untouched (its deleter is not called: the
/// caller still owns it): ArgumentNullError for a null @p managed; ArgumentError naming the field
/// (`managed->dl_tensor.ndim`, `...shape[i]`, `...strides[i]`, `...dtype`, `...device`,
/// `...byte_offset`, `...data`) and its value; BackendError when the device's backend is not
/// available (CUDA not linked or not built).
MLFRAMEWORK_EXPORT TensorPtr FromDLPack(DLManagedTensor* managed);

/// FromDLPack() for FP8 values, which this legacy struct has no type code for: @p managed holds
/// their bytes as uint8 (code kDLUInt, 8 bits, one lane: what frameworks export FP8 storage as,
/// for example torch's `t.view(torch.uint8)`), and the tensor has dtype @p float8
/// (Float8E4M3FN or Float8E5M2). The same ownership, checks and errors as FromDLPack(), the
/// dtype's naming `managed->dl_tensor.dtype` when it is not uint8; ArgumentError naming `float8`
/// for another dtype.
MLFRAMEWORK_EXPORT TensorPtr FromDLPackAsFloat8(DLManagedTensor* managed, DataType float8);

/// Exports @p tensor's memory as a DLPack managed tensor (no copy) for another framework
/// (`at::fromDLPack`): compact row-major strides, the tensor's dtype and device. The managed
/// tensor keeps @p tensor alive until its deleter is called, which the receiver must do once.
/// A CUDA tensor exported under a backends::cuda::StreamGuard is handed back to the library's
/// memory pool only after the work queued on the guard's stream before the deleter's call (the
/// receiver's reads on that stream, still queued when its host code drops the tensor); that
/// stream must still exist when the deleter runs.
/// A user's own ITensor on the CPU exports when it gives its memory through HostBytes():
/// exactly its Size() elements, aligned to the element size, in a shape of Size() elements.
/// ArgumentNullError for a null @p tensor; ArgumentError when its memory cannot be addressed
/// (a user's own ITensor that keeps its elements elsewhere, or whose HostBytes() are not its
/// elements as above) or its dtype is FP8
/// (Float8E4M3FN, Float8E5M2: this legacy struct has no FP8 type code; FromDLPack() likewise
/// accepts no FP8 dtype, FromDLPackAsFloat8() takes their bytes).
MLFRAMEWORK_EXPORT DLManagedTensor* ToDLPack(const TensorPtr& tensor);

}  // namespace mlframework
