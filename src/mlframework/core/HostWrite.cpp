#include "mlframework/core/HostWrite.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include <mlframework/core/HostConversion.hpp>

#include "mlframework/core/HostAdd.hpp"

namespace mlframework::detail {

namespace {

// Multiplies @p values by @p factor (not at all for 1, which keeps NaN payloads as the fused
// kernels do); true when any result is Inf or NaN. Exponent bits, not std::isfinite, so the
// loop vectorises.
bool ScaleAndCheckFloats(std::span<float> values, float factor) {
  constexpr std::uint32_t kExponent = 0x7f800000U;
  std::uint32_t non_finite = 0;
  if (factor == 1.0f) {
    for (const float v : values) {
      non_finite |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & kExponent) == kExponent);
    }
    return non_finite != 0;
  }
  for (float& v : values) {
    v *= factor;
    non_finite |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & kExponent) == kExponent);
  }
  return non_finite != 0;
}

// Multiplies @p values by @p factor (not at all for 1) and returns the non-finite flag and the
// amax of the products.
WritePassResult ScaleFloatsWithAmax(std::span<float> values, float factor) {
  WritePassResult result;
  for (float& v : values) {
    if (factor != 1.0f) {
      v *= factor;
    }
    const float a = std::fabs(v);
    if (std::isfinite(a)) {
      result.Amax = a > result.Amax ? a : result.Amax;
    } else {
      result.FoundNonFinite = true;
    }
  }
  return result;
}

// The elements of a tensor the host addresses (its HostBytes() when they are the elements and
// aligned for the conversion kernels), else an empty span.
std::span<std::byte> HostElements(ITensor& tensor) {
  const DataType dtype = tensor.GetDataType();
  const std::span<std::byte> bytes = tensor.MutableHostBytes();
  if (!IsValid(dtype) || bytes.size() / ElementSize(dtype) != tensor.Size() || bytes.size() % ElementSize(dtype) != 0 ||
      reinterpret_cast<std::uintptr_t>(bytes.data()) % ElementSize(dtype) != 0) {
    return {};
  }
  return bytes;
}

// `dst = round(src * factor)`. The source widens straight into the destination's memory when
// that is host FP32 (in place: already there), else into one buffer that is then narrowed into
// the destination: never a vector by value. Returns the non-finite flag when @p check.
bool HostCast(const ITensor& src, ITensor& dst, float factor, bool check) {
  const std::size_t size = src.Size();
  const std::span<std::byte> dst_bytes = HostElements(dst);
  if (!dst_bytes.empty() && dst.GetDataType() == DataType::Float32) {
    const std::span<float> out(reinterpret_cast<float*>(dst_bytes.data()), size);
    if (&src != &dst) {
      src.CopyToFloats(out);
    }
    if (!check && factor == 1.0f) {
      return false;
    }
    return ScaleAndCheckFloats(out, factor) && check;
  }
  std::vector<float> buffer(size);
  src.CopyToFloats(buffer);
  if (factor != 1.0f) {
    ScaleAndCheckFloats(buffer, factor);
  }
  if (!dst_bytes.empty()) {
    ConvertHostElements(buffer.data(), DataType::Float32, dst_bytes.data(), dst.GetDataType(), size);
  } else {
    dst.CopyFromFloats(buffer);
  }
  // Narrowing can overflow where the FP32 product did not, so the destination is what is checked.
  return check && dst.HasNonFinite();
}

}  // namespace

WritePassResult WritePairThroughFloats(const ITensor& src, ITensor& dst, const WritePassOptions& options) {
  if (options.Op == WriteOp::Add) {
    HostAddInto(src, dst, options.Factor);
    return {};
  }
  if (!options.Amax) {
    return {.FoundNonFinite = HostCast(src, dst, options.Factor, options.Check)};
  }
  std::vector<float> values = src.ToFloatVector();
  WritePassResult result = ScaleFloatsWithAmax(values, options.Factor);
  dst.CopyFromFloats(values);
  if (dst.GetDataType() != DataType::Float32) {
    result.FoundNonFinite = dst.HasNonFinite();
  }
  return result;
}

WritePassResult WriteThroughFloats(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                   const WritePassOptions& options) {
  WritePassResult total;
  for (std::size_t i = 0; i < src.size(); ++i) {
    ITensor& out = options.Op == WriteOp::Scale ? *src[i] : *dst[i];
    Fold(total, WritePairThroughFloats(*src[i], out, options));
  }
  return total;
}

}  // namespace mlframework::detail
