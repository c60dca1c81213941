#pragma once
// DLTensor descriptors the caller lends to the C API, as the library's tensors (through
// FromDLPack: one conversion for the C++ and the C API), and the CUDA stream of a call.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::c_api {

/// @p error (an ArgumentError or ArgumentNullError) thrown again naming @p parameter, with the
/// same message.
[[noreturn]] void ThrowRenamed(const ArgumentError& error, const std::string& parameter);

/// "name[index]", the name of an array element in errors.
std::string Indexed(const char* name, std::size_t index);

/// A tensor over the memory @p tensor describes, which the caller keeps alive (nothing is
/// released when the tensor goes). Errors are FromDLPack's, with the field named after @p name
/// (`gradients[1]->dtype`); ArgumentNullError(@p name) for null.
TensorPtr Borrow(const DLTensor* tensor, const std::string& name);

/// The @p count tensors of @p tensors, borrowed as Borrow() does, named `<name>[i]`.
/// ArgumentNullError(@p name) for a null array with a non-zero count.
std::vector<TensorPtr> BorrowList(const DLTensor* const* tensors, std::size_t count, const char* name);

/// Borrow() of the bytes of FP8 values (a uint8 descriptor) as a tensor of @p float8
/// (FromDLPackAsFloat8).
TensorPtr BorrowFloat8(const DLTensor* tensor, DataType float8, const std::string& name);

/// BorrowList() of FP8 bytes, as BorrowFloat8() does.
std::vector<TensorPtr> BorrowFloat8List(const DLTensor* const* tensors, std::size_t count, DataType float8,
                                        const char* name);

/// The device of the first of @p tensors (the CPU for an empty list).
Device DeviceOf(std::span<const TensorPtr> tensors);

/// Named tensors lent by the caller (`names[i]`, `tensors[i]`), as a GradientMap. Keeps the views
/// of the previous call and reuses them when the caller lends the same descriptors again (a
/// framework's gradient buffers, every iteration), so a steady loop converts nothing.
class NamedTensors {
 public:
  /// The map of @p count tensors (the kept one when nothing changed). ArgumentNullError for a
  /// null array or element, ArgumentError for a repeated name and for what Borrow() refuses.
  /// Nothing is kept until Commit().
  const GradientMap& Read(const char* const* names, const DLTensor* const* tensors, std::size_t count,
                          const char* tensors_name);
  /// Keeps what the last Read() built (call it once the library accepted the map).
  void Commit();
  /// The map kept by the last Commit().
  const GradientMap& Kept() const noexcept { return kept_; }

 private:
  // What identifies a descriptor: a view is reused only when every field is the same.
  struct Key {
    std::string name;
    void* data = nullptr;
    std::uint64_t byte_offset = 0;
    DLDevice device{};
    DLDataType dtype{};
    std::int32_t ndim = 0;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;  // empty for null strides
    bool operator==(const Key& other) const;
  };
  static Key KeyOf(const char* name, const DLTensor& tensor);

  std::vector<Key> kept_keys_;
  GradientMap kept_;
  std::vector<Key> pending_keys_;
  GradientMap pending_;
  bool pending_is_kept_ = false;
};

/// The calling thread's CUDA stream for one call (a StreamGuard) when @p stream is not null;
/// @p device is that of the call's tensors. ArgumentError naming `stream` when it is not null
/// and @p device is not a CUDA device.
class StreamScope {
 public:
  StreamScope(void* stream, const Device& device);
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;
  StreamScope(StreamScope&&) = delete;
  StreamScope& operator=(StreamScope&&) = delete;
  ~StreamScope() = default;

 private:
  std::optional<backends::cuda::StreamGuard> guard_;
};

/// The scaled-loss entry points: @p scale_loss (a ScaleLoss or Scale) of the lent @p loss,
/// ordered on @p stream, exported into *@p scaled for the caller to delete. Returns the loss's
/// device. ArgumentNullError naming `scaled` or `loss` for null.
template <class ScaleLoss>
Device ScaleLossInto(const DLTensor* loss, void* stream, DLManagedTensor** scaled, ScaleLoss&& scale_loss) {
  if (scaled == nullptr) {
    throw ArgumentNullError("scaled");
  }
  const TensorPtr tensor = Borrow(loss, "loss");
  const StreamScope scope(stream, tensor->GetDevice());
  TensorPtr result = scale_loss(tensor);
  // A disabled scaler hands the loss back as it is. The caller owns what it receives and may
  // free or overwrite the loss it lent for this call only, so it gets a copy, never a view of it.
  if (result == tensor) {
    result = tensor->Clone();
  }
  // The scaled loss is the library's own FP32/FP16/BF16 tensor, which ToDLPack() always exports
  // (short of memory).
  *scaled = ToDLPack(result);
  return tensor->GetDevice();
}

/// The device of the first tensor of @p tensors (the CPU for an empty map).
Device DeviceOf(const GradientMap& tensors);

}  // namespace mlframework::c_api

// For the entry points, extern "C" functions at global scope.
using mlframework::c_api::Borrow;
using mlframework::c_api::BorrowFloat8List;
using mlframework::c_api::BorrowList;
using mlframework::c_api::DeviceOf;
using mlframework::c_api::StreamScope;
