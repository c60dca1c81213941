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

/// A dense tensor of FP32, FP16 or BF16 elements.
///
/// This is the seam a framework plugs its own tensors into: implement the
/// per-tensor operations below and every scaler, the gradient pipeline and
/// FSDP accept your tensors. Backends that also provide fused multi-tensor
/// kernels return them from Backend(); a tensor that returns null is handled
/// through these virtual functions instead.
///
/// ### What the fused list operations (MultiTensor.hpp) do with a tensor without a backend
///
/// A tensor whose Backend() is null but whose HostBytes() are its elements (dense, row-major,
/// `Size() * ElementSize(GetDataType())` bytes, aligned to the element size) is run by the CPU
/// backend's fused kernels in place, together with the rest of the list: one pass, all threads,
/// no copy, and none of the virtuals below is called. So implement HostStorage() if your
/// elements lie in host memory: that is the fast path. Every other tensor without a backend goes
/// through its virtuals, one tensor after another in list order:
///
/// | operation (MultiTensor.hpp)      | virtuals it calls per tensor [defaults]                            |
/// |----------------------------------|---------------------------------------------------------------------|
/// | UnscaleAndCheck                  | UnscaleAndCheck(factor) [MultiplyInPlace(factor), HasNonFinite()]   |
/// | HasNonFinite                     | HasNonFinite() [HasInf() or HasNaN()], stops at the first hit       |
/// | CheckAndSumSquares, SumOfSquares | HasNonFinite(), SumOfSquares()                                      |
/// | ScaleInPlace                     | MultiplyInPlace(factor)                                             |
/// | CastInto, CopyInto, Cast         | source CopyToFloats() [ToFloatVector()]; destination CopyFromFloats() |
/// | AddInto                          | ToFloatVector() of both, CopyFromFloats() of the destination        |
///
/// A cast's source widens straight into the destination's memory when that is host FP32 (else
/// into one buffer, narrowed into the destination's host memory or through CopyFromFloats());
/// CastInto then checks a destination that is not FP32 with HasNonFinite(), since narrowing can
/// overflow.
///
/// Why not in parallel: a tensor without host bytes usually lives in another framework's device
/// memory or runtime (its stream, its allocator, an interpreter lock), where calling in from
/// several threads at once is unsafe or serialised anyway; the fused one-pass virtuals remove
/// the second pass over memory instead. A pair whose source and destination share a backend
/// (host-addressable tensors count as the CPU backend's) takes that backend's fused kernel.
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

  /// New tensor of the same dtype holding `this * factor` (rounded into the dtype).
  virtual TensorPtr Multiply(float factor) const = 0;
  /// New tensor of the same dtype holding `this / divisor` (rounded into the dtype).
  virtual TensorPtr Divide(float divisor) const = 0;
  /// Multiplies every element by @p factor in place (rounded into the dtype).
  virtual void MultiplyInPlace(float factor) = 0;
  /// Deep copy.
  virtual TensorPtr Clone() const = 0;
  /// New tensor converted to @p dtype (round to nearest even); a copy when the dtype is the same.
  virtual TensorPtr CastTo(DataType dtype) const = 0;

  /// True when any element is +Inf or -Inf.
  virtual bool HasInf() const = 0;
  /// True when any element is NaN.
  virtual bool HasNaN() const = 0;
  /// True when any element is Inf or NaN.
  virtual bool HasNonFinite() const;
  /// Sum of the squares of the elements, accumulated in double.
  virtual double SumOfSquares() const = 0;

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
  /// Multiplies every element by @p factor in place (rounded into the dtype) and returns true
  /// when any result is Inf or NaN: the unscale and overflow check of one gradient in one pass.
  /// The default runs Backend()'s fused kernel when there is one, the CPU backend's kernel on
  /// HostBytes() when they are the elements, and otherwise MultiplyInPlace(factor) followed by
  /// HasNonFinite() (two passes). Override it to do both in one pass over your memory.
  virtual bool UnscaleAndCheck(float factor);

  /// Backend with fused multi-tensor kernels for this tensor, or null for the per-tensor fallback.
  virtual const TensorBackend* Backend() const noexcept;

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
