#include <mlframework/core/ITensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostConversion.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

namespace mlframework {

std::size_t ElementCount(const Shape& shape) {
  std::size_t count = 1;
  for (const std::size_t extent : shape) {
    if (extent != 0 && count > SIZE_MAX / extent) {
      throw ArgumentError("shape", ToString(shape) + " has more elements than fit in size_t");
    }
    count *= extent;
  }
  return count;
}

std::string ToString(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + "]";
}

ITensor::~ITensor() = default;

void ITensor::CopyToFloats(std::span<float> out) const {
  const std::size_t size = Size();
  if (out.size() != size) {
    throw ArgumentError("out", "has " + std::to_string(out.size()) + " elements, tensor " + ToString(GetShape()) +
                                   " has " + std::to_string(size));
  }
  if (size == 0) {
    return;
  }
  const DataType dtype = GetDataType();
  const std::span<const std::byte> bytes = HostBytes();
  // Misaligned host bytes go through ToFloatVector(): the conversion kernels read whole elements.
  if (IsValid(dtype) && bytes.size() / ElementSize(dtype) == size && bytes.size() % ElementSize(dtype) == 0 &&
      reinterpret_cast<std::uintptr_t>(bytes.data()) % ElementSize(dtype) == 0) {
    ConvertHostElements(bytes.data(), dtype, out.data(), DataType::Float32, size);
    return;
  }
  const std::vector<float> values = ToFloatVector();
  if (values.size() != size) {
    throw InvalidOperationError("ToFloatVector() returned " + std::to_string(values.size()) +
                                " elements for a tensor of " + std::to_string(size));
  }
  std::copy(values.begin(), values.end(), out.begin());
}

namespace {

// This tensor as a one-element list for core's passes (MultiTensor.hpp), which pick the backend
// (its own, the CPU backend's for host elements, or the floats fallback). Non-owning (the aliasing
// constructor without an owner): the tensor outlives the call.
TensorPtr Borrowed(const ITensor& tensor) {
  return {TensorPtr(), const_cast<ITensor*>(&tensor)};  // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

// One write pass over @p src alone. A tensor with a backend is a one-element group of it, and so
// is a result that backend allocated for it: its grouped pass, without core's walk. Else core's
// route: the CPU kernels on host bytes, or the floats.
WritePassResult WriteOne(const TensorPtr& src, std::span<const TensorPtr> dst, const WritePassOptions& options) {
  if (const TensorBackend* backend = src->Backend()) {
    if (const std::optional<WritePassResult> result = backend->Write({{&src, 1}, true}, {dst, true}, options)) {
      return *result;
    }
  }
  return WritePass({&src, 1}, dst, options);
}

// One read pass over @p tensor alone, as WriteOne() writes.
ReadPassResult ReadOne(const TensorPtr& tensor, const ReadPassOptions& options) {
  if (const TensorBackend* backend = tensor->Backend()) {
    if (const std::optional<ReadPassResult> result = backend->Read({{&tensor, 1}, true}, options)) {
      return *result;
    }
  }
  return ReadPass({&tensor, 1}, options);
}

// A new tensor of @p dtype, where @p tensor lives, holding round(x * factor) for every element x.
TensorPtr Converted(const ITensor& tensor, DataType dtype, float factor) {
  const TensorBackend* backend = tensor.Backend();
  TensorPtr result = backend != nullptr ? backend->Allocate(tensor.GetShape(), dtype, tensor.GetDevice())
                                        : Zeros(tensor.GetShape(), dtype, tensor.GetDevice());
  WriteOne(Borrowed(tensor), {&result, 1}, {.Op = WriteOp::Cast, .Factor = factor});
  return result;
}

}  // namespace

TensorPtr ITensor::CastTo(DataType dtype) const {
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
  return Converted(*this, dtype, 1.0f);
}

TensorPtr ITensor::Multiply(float factor) const { return Converted(*this, GetDataType(), factor); }

TensorPtr ITensor::Divide(float divisor) const {
  if (divisor == 0.0f || !std::isfinite(divisor)) {
    throw ArgumentError("divisor", "must be finite and non-zero, got " + std::to_string(divisor));
  }
  // The inverse in double, as the scalers unscale.
  return Multiply(static_cast<float>(1.0 / static_cast<double>(divisor)));
}

TensorPtr ITensor::Clone() const { return Multiply(1.0f); }

void ITensor::MultiplyInPlace(float factor) { WriteOne(Borrowed(*this), {}, {.Op = WriteOp::Scale, .Factor = factor}); }

bool ITensor::UnscaleAndCheck(float factor) {
  return WriteOne(Borrowed(*this), {}, {.Op = WriteOp::Scale, .Factor = factor, .Check = true}).FoundNonFinite;
}

bool ITensor::HasNonFinite() const { return ReadOne(Borrowed(*this), {}).FoundNonFinite; }

double ITensor::SumOfSquares() const { return ReadOne(Borrowed(*this), {.SumOfSquares = true}).SumOfSquares; }

// A clean tensor (the usual answer) takes the one early-exit read; only a non-finite one is
// scanned for which kinds it holds.
bool ITensor::HasInf() const {
  if (!HasNonFinite()) {
    return false;
  }
  const TensorPtr self = Borrowed(*this);
  const NonFiniteScan scan = ScanNonFinite({&self, 1}).front();
  return scan.HasPosInf || scan.HasNegInf;
}

bool ITensor::HasNaN() const {
  if (!HasNonFinite()) {
    return false;
  }
  const TensorPtr self = Borrowed(*this);
  return ScanNonFinite({&self, 1}).front().HasNaN;
}

const TensorBackend* ITensor::Backend() const noexcept { return nullptr; }

std::span<std::byte> ITensor::HostStorage() const noexcept { return {}; }

}  // namespace mlframework
