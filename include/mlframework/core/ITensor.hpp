#pragma once
/// @file ITensor.hpp
/// @brief The tensor interface every backend (and a framework's own tensors) implements.

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

class ITensor;
class TensorBackend;

/// Extents of a tensor, outermost first. An empty shape is a scalar (one element).
using Shape = std::vector<std::size_t>;
/// Shared ownership of a tensor (the specs' `Tensor` / `ITensor`).
using TensorPtr = std::shared_ptr<ITensor>;
/// Parameter name to gradient (the specs' `Dictionary<string, Tensor>`); ordered, so iteration is deterministic.
using GradientMap = std::map<std::string, TensorPtr>;

/// Number of elements of @p shape (1 for a scalar).
MLFRAMEWORK_EXPORT std::size_t ElementCount(const Shape& shape);
/// "[2, 3]" for error messages.
MLFRAMEWORK_EXPORT std::string ToString(const Shape& shape);

/// A dense tensor: a description of its memory.
///
/// This is the seam a framework plugs its own tensors into: describe the memory (dtype, device,
/// shape, element count, and the bytes when the host can address them) and every scaler, the
/// gradient pipeline and FSDP accept your tensors. The arithmetic is not the tensor's: the spec's
/// tensor operations below (Multiply(), HasInf(), ...) are plain members that run the fused kernels
/// of a backend on a one-element list, exactly as the list operations of MultiTensor.hpp run them on
/// whole lists.
///
/// ### Which backend runs a tensor's operations
///
/// | the tensor                                             | runs through                                          |
/// |--------------------------------------------------------|-------------------------------------------------------|
/// | Backend() is not null (the library's CPU and CUDA tensors) | that backend's Read() / Write() / Allocate()      |
/// | no backend, HostStorage() are its elements             | the CPU backend's kernels, in place on those bytes    |
/// | no backend, no host bytes                              | the host floats: CopyToFloats() [ToFloatVector()] and
/// CopyFromFloats() |
///
/// "Its elements" means: dense, row-major, `Size() * ElementSize(GetDataType())` bytes, aligned to
/// the element size. So implement HostStorage() if your elements lie in host memory: then the fused
/// list operations run your tensors with the rest of a list (one pass, all threads, no copy) and the
/// virtuals below besides the description are never called. A tensor of the last kind is read and
/// written one tensor after another in list order, through its floats; a new result of one of the
/// members below (Multiply(), Divide(), Clone(), CastTo()) is allocated where the tensor's device is
/// (Zeros() of Tensor.hpp: InvalidOperationError for a device no backend serves).
///
/// | member (and MultiTensor.hpp list operation)      | virtuals a floats-fallback tensor has called   |
/// |---------------------------------------------------|------------------------------------------------|
/// | HasInf, HasNaN, HasNonFinite, SumOfSquares; the list read passes | CopyToFloats() [ToFloatVector()]    |
/// | MultiplyInPlace, UnscaleAndCheck; ScaleInPlace, UnscaleAndCheck | CopyToFloats(), then CopyFromFloats() |
/// | Multiply, Divide, Clone, CastTo; CastInto, CopyInto, Cast | source CopyToFloats(); destination CopyFromFloats() |
/// | AddInto                                           | ToFloatVector() of both, CopyFromFloats() of the destination |
///
/// A cast's source widens straight into the destination's memory when that is host FP32 (else into
/// one buffer, narrowed into the destination's host memory or through CopyFromFloats()); a checked
/// cast into any other destination then reads the destination back, since narrowing can overflow.
///
/// Why not in parallel: a tensor without host bytes usually lives in another framework's device
/// memory or runtime (its stream, its allocator, an interpreter lock), where calling in from
/// several threads at once is unsafe or serialised anyway. A pair whose source and destination
/// share a backend (host-addressable tensors count as the CPU backend's) takes that backend's fused
/// kernel.
class MLFRAMEWORK_EXPORT ITensor {
 public:
  virtual ~ITensor();

  /// Element type.
  virtual DataType GetDataType() const = 0;
  /// Where the elements live.
  virtual Device GetDevice() const = 0;
  /// Extents, outermost first.
  virtual const Shape& GetShape() const = 0;
  /// Number of elements.
  virtual std::size_t Size() const = 0;

  /// Backend with fused multi-tensor kernels for this tensor, or null (see the class comment).
  virtual const TensorBackend* Backend() const noexcept;

  /// The elements widened to float, in row-major order (copied to the host).
  virtual std::vector<float> ToFloatVector() const = 0;
  /// Overwrites the elements with @p values rounded into the dtype; `values.size()` must equal Size().
  virtual void CopyFromFloats(std::span<const float> values) = 0;
  /// Writes the elements widened to float, in row-major order, into @p out: ToFloatVector()
  /// without a vector by value, so a cast writes straight into the buffer the library holds.
  /// ArgumentError naming `out` when `out.size()` differs from Size().
  /// The default widens HostBytes() with the vectorised host conversion when they are the
  /// elements (see the class comment), else copies ToFloatVector() (InvalidOperationError when
  /// that returns a size other than Size()). Override it to widen into @p out in one pass.
  virtual void CopyToFloats(std::span<float> out) const;

  /// @name The spec's tensor operations
  /// Each runs the backend's fused kernel on this one tensor (see the class comment for which
  /// backend, and for the floats fallback of a tensor the library cannot see).
  ///@{
  /// New tensor of the same dtype holding `this * factor` (rounded into the dtype).
  TensorPtr Multiply(float factor) const;
  /// New tensor of the same dtype holding `this / divisor` (rounded into the dtype): `this` times
  /// the inverse computed in double, which is true division for the power-of-two scales of
  /// practice. ArgumentError naming `divisor` when it is zero, Inf or NaN.
  TensorPtr Divide(float divisor) const;
  /// Multiplies every element by @p factor in place (rounded into the dtype).
  void MultiplyInPlace(float factor);
  /// Deep copy (bit for bit: NaN payloads kept).
  TensorPtr Clone() const;
  /// New tensor converted to @p dtype (round to nearest even; FP8 saturates); a copy when the
  /// dtype is the same. ArgumentError naming `dtype` when it is not a DataType.
  TensorPtr CastTo(DataType dtype) const;

  /// True when any element is +Inf or -Inf.
  bool HasInf() const;
  /// True when any element is NaN.
  bool HasNaN() const;
  /// True when any element is Inf or NaN.
  bool HasNonFinite() const;
  /// Sum of the squares of the elements, accumulated in double.
  double SumOfSquares() const;
  /// Multiplies every element by @p factor in place (rounded into the dtype) and returns true
  /// when any result is Inf or NaN: the unscale and overflow check of one gradient in one pass.
  bool UnscaleAndCheck(float factor);
  ///@}

  /// The elements' memory when the host can address it directly: `Size() * ElementSize(GetDataType())`
  /// bytes, dense, in row-major order, valid while the tensor lives. Empty when the tensor has no
  /// elements or the host cannot address them (device memory, elements kept in another form):
  /// callers then go through ToFloatVector() and CopyFromFloats().
  ///
  /// Why: code that moves raw buffers (the process groups' collectives, checkpoints, optimizers
  /// working on FP32 spans) reads and writes host tensors in place, with no copy, whatever
  /// backend made them. Implement HostStorage() to give yours that path.
  std::span<const std::byte> HostBytes() const noexcept { return HostStorage(); }
  /// HostBytes() for writing: bytes written are the tensor's new elements.
  std::span<std::byte> MutableHostBytes() noexcept { return HostStorage(); }

 protected:
  /// What HostBytes() and MutableHostBytes() return. The default returns an empty span (the
  /// host cannot address the elements); a tensor whose elements lie in host memory returns them.
  virtual std::span<std::byte> HostStorage() const noexcept;

  /// Only implementations construct the interface.
  ITensor() = default;
  /// Implementations may be copyable.
  ITensor(const ITensor&) = default;
  /// Implementations may be copy-assignable.
  ITensor& operator=(const ITensor&) = default;
};

}  // namespace mlframework
