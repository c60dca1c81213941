#include <mlframework/fp8/MXFP8BlockScaling.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/fp8/Format.hpp>

namespace mlframework::fp8 {

namespace {

// The element format's largest exponent (emax_elem of the spec): 448 = 1.75 * 2^8, 57344 = 1.75 * 2^15.
int ElementEmax(DataType element_type) { return element_type == DataType::Float8E4M3FN ? 8 : 15; }

std::size_t RowLength(const Shape& shape) { return shape.empty() ? 1 : shape.back(); }

// 2^k as a float, k in [-126, 127] (a normal float).
float PowerOfTwo(int k) { return mlframework::detail::BitsAsFloat(static_cast<std::uint32_t>(k + 127) << 23); }

// The block's values as floats, whatever the tensor: its host bytes widened, else ToFloatVector().
std::vector<float> ReadFloats(const ITensor& tensor) {
  std::vector<float> values(tensor.Size());
  tensor.CopyToFloats(values);
  return values;
}

void CheckShapes(const ITensor& a, const char* a_name, const ITensor& b) {
  if (a.GetShape() != b.GetShape()) {
    throw ArgumentError(a_name, "has shape " + mlframework::ToString(a.GetShape()) + ", expected " +
                                    mlframework::ToString(b.GetShape()));
  }
}

}  // namespace

MXFP8BlockScaling::MXFP8BlockScaling(DataType element_type) : element_type_(element_type) {
  if (!IsFloat8(element_type)) {
    throw ArgumentError("element_type", "is " + std::string(ToString(element_type)) +
                                            "; MXFP8 elements are Float8E4M3FN or Float8E5M2");
  }
}

std::size_t MXFP8BlockScaling::ScaleCount(const Shape& shape) {
  const std::size_t row = RowLength(shape);
  if (row == 0) return 0;
  return (ElementCount(shape) / row) * ((row + kBlockSize - 1) / kBlockSize);
}

void MXFP8BlockScaling::QuantizeBlocks(std::span<const float> values, std::size_t row_length,
                                       std::span<std::uint8_t> elements, std::span<std::uint8_t> scales) const {
  const bool e4m3 = element_type_ == DataType::Float8E4M3FN;
  const float max_normal = Float8Max(element_type_);
  const int emax = ElementEmax(element_type_);
  const std::uint8_t nan_bits = 0x7f;
  std::size_t block = 0;
  for (std::size_t row = 0; row < values.size(); row += row_length) {
    for (std::size_t begin = row; begin < row + row_length; begin += kBlockSize, ++block) {
      const std::size_t end = std::min(begin + kBlockSize, row + row_length);
      float amax = 0.0f;
      bool finite = true;
      for (std::size_t i = begin; i < end; ++i) {
        const float a = std::fabs(values[i]);
        finite = finite && std::isfinite(a);
        amax = std::max(amax, a);
      }
      if (!finite) {
        scales[block] = kScaleNaN;
        std::fill(elements.begin() + static_cast<std::ptrdiff_t>(begin),
                  elements.begin() + static_cast<std::ptrdiff_t>(end), nan_bits);
        continue;
      }
      // floor(log2(amax)) is the unbiased exponent (ilogb also handles subnormals); a zero block
      // takes the smallest scale.
      const int shared = amax > 0.0f ? std::clamp(std::ilogb(amax) - emax, -127, 127) : -127;
      scales[block] = static_cast<std::uint8_t>(shared + 127);
      // V / 2^shared as a product with 2^-shared, -shared in [-127 + emax, 127]: exact (a product
      // that falls below FP32's normal range is far below FP8's smallest subnormal either way).
      const float inverse = PowerOfTwo(-shared);
      for (std::size_t i = begin; i < end; ++i) {
        const float p = std::clamp(values[i] * inverse, -max_normal, max_normal);
        elements[i] =
            e4m3 ? mlframework::detail::FloatToFloat8E4M3FNBits(p) : mlframework::detail::FloatToFloat8E5M2Bits(p);
      }
    }
  }
}

void MXFP8BlockScaling::DequantizeBlocks(std::span<float> values, std::size_t row_length,
                                         std::span<const std::uint8_t> scales) const {
  std::size_t block = 0;
  for (std::size_t row = 0; row < values.size(); row += row_length) {
    for (std::size_t begin = row; begin < row + row_length; begin += kBlockSize, ++block) {
      const std::size_t end = std::min(begin + kBlockSize, row + row_length);
      const std::uint8_t code = scales[block];
      for (std::size_t i = begin; i < end; ++i) {
        values[i] = code == kScaleNaN ? std::nanf("") : std::ldexp(values[i], static_cast<int>(code) - 127);
      }
    }
  }
}

void MXFP8BlockScaling::Quantize(const ITensor& src, ITensor& dst, std::span<std::uint8_t> scales) const {
  if (IsFloat8(src.GetDataType()) || !IsValid(src.GetDataType())) {
    throw ArgumentError(
        "src", "is " + std::string(ToString(src.GetDataType())) + "; MXFP8 quantizes Float32, Float16 or BFloat16");
  }
  if (dst.GetDataType() != element_type_) {
    throw ArgumentError(
        "dst", "is " + std::string(ToString(dst.GetDataType())) + ", expected " + std::string(ToString(element_type_)));
  }
  CheckShapes(dst, "dst", src);
  const std::size_t count = ScaleCount(src.GetShape());
  if (scales.size() != count) {
    throw ArgumentError("scales", "has " + std::to_string(scales.size()) + " bytes; shape " +
                                      mlframework::ToString(src.GetShape()) + " has " + std::to_string(count) +
                                      " blocks");
  }
  const std::vector<float> values = ReadFloats(src);
  const std::span<std::byte> host = dst.MutableHostBytes();
  if (!host.empty()) {
    QuantizeBlocks(values, RowLength(src.GetShape()),
                   std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(host.data()), host.size()), scales);
    return;
  }
  std::vector<std::uint8_t> elements(values.size());
  QuantizeBlocks(values, RowLength(src.GetShape()), elements, scales);
  std::vector<float> decoded(values.size());
  for (std::size_t i = 0; i < elements.size(); ++i) {
    decoded[i] = element_type_ == DataType::Float8E4M3FN ? mlframework::detail::Float8E4M3FNBitsToFloat(elements[i])
                                                         : mlframework::detail::Float8E5M2BitsToFloat(elements[i]);
  }
  dst.CopyFromFloats(decoded);
}

void MXFP8BlockScaling::Dequantize(const ITensor& src, std::span<const std::uint8_t> scales, ITensor& dst) const {
  if (src.GetDataType() != element_type_) {
    throw ArgumentError(
        "src", "is " + std::string(ToString(src.GetDataType())) + ", expected " + std::string(ToString(element_type_)));
  }
  if (IsFloat8(dst.GetDataType()) || !IsValid(dst.GetDataType())) {
    throw ArgumentError("dst", "is " + std::string(ToString(dst.GetDataType())) +
                                   "; MXFP8 dequantizes into Float32, Float16 or BFloat16");
  }
  CheckShapes(dst, "dst", src);
  const std::size_t count = ScaleCount(src.GetShape());
  if (scales.size() != count) {
    throw ArgumentError("scales", "has " + std::to_string(scales.size()) + " bytes; shape " +
                                      mlframework::ToString(src.GetShape()) + " has " + std::to_string(count) +
                                      " blocks");
  }
  std::vector<float> values = ReadFloats(src);
  DequantizeBlocks(values, RowLength(src.GetShape()), scales);
  dst.CopyFromFloats(values);
}

}  // namespace mlframework::fp8
