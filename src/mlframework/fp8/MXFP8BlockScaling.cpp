#include <mlframework/fp8/MXFP8BlockScaling.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/Threads.hpp>
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

// ArgumentError naming @p name unless @p tensor holds @p element_type.
void CheckElementType(const ITensor& tensor, const char* name, DataType element_type) {
  if (tensor.GetDataType() != element_type) {
    throw ArgumentError(name, "is " + std::string(ToString(tensor.GetDataType())) + ", expected " +
                                  std::string(ToString(element_type)));
  }
}

// ArgumentError unless @p dst has the shape of @p src and @p scale_bytes is its block count.
void CheckShapes(const ITensor& src, const ITensor& dst, std::size_t scale_bytes) {
  if (dst.GetShape() != src.GetShape()) {
    throw ArgumentError("dst", "has shape " + mlframework::ToString(dst.GetShape()) + ", expected " +
                                   mlframework::ToString(src.GetShape()));
  }
  const std::size_t count = MXFP8BlockScaling::ScaleCount(src.GetShape());
  if (scale_bytes != count) {
    throw ArgumentError("scales", "has " + std::to_string(scale_bytes) + " bytes; shape " +
                                      mlframework::ToString(src.GetShape()) + " has " + std::to_string(count) +
                                      " blocks");
  }
}

// Below this many values a tensor is quantized on the calling thread.
constexpr std::size_t kParallelElements = std::size_t{1} << 16;
// The elements of a block whose scale is NaN (E4M3FN's and E5M2's positive NaN code).
constexpr std::uint8_t kElementNaN = 0x7f;

// Where each block of 32 lies: rows of row_length values, ceil(row_length / 32) blocks per row.
struct BlockLayout {
  std::size_t row_length = 1;
  std::size_t per_row = 0;
  std::size_t blocks = 0;
  std::pair<std::size_t, std::size_t> Range(std::size_t block) const {
    const std::size_t row = block / per_row;
    const std::size_t begin = row * row_length + (block % per_row) * MXFP8BlockScaling::kBlockSize;
    return {begin, std::min(begin + MXFP8BlockScaling::kBlockSize, (row + 1) * row_length)};
  }
};

BlockLayout CheckBlocks(std::size_t values, std::size_t row_length, std::size_t outputs, const char* output_name,
                        std::size_t scales) {
  if (row_length == 0 ? values != 0 : values % row_length != 0) {
    throw ArgumentError("row_length", std::to_string(row_length) + " does not divide the " + std::to_string(values) +
                                          " values into rows");
  }
  if (outputs != values) {
    throw ArgumentError(output_name,
                        "has " + std::to_string(outputs) + " entries for " + std::to_string(values) + " values");
  }
  BlockLayout layout;
  if (row_length > 0) {
    layout.row_length = row_length;
    layout.per_row = (row_length + MXFP8BlockScaling::kBlockSize - 1) / MXFP8BlockScaling::kBlockSize;
    layout.blocks = (values / row_length) * layout.per_row;
  }
  if (scales != layout.blocks) {
    throw ArgumentError("scales",
                        "has " + std::to_string(scales) + " bytes for " + std::to_string(layout.blocks) + " blocks");
  }
  return layout;
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
  const BlockLayout layout = CheckBlocks(values.size(), row_length, elements.size(), "elements", scales.size());
  const bool e4m3 = element_type_ == DataType::Float8E4M3FN;
  const float max_normal = Float8Max(element_type_);
  const int emax = ElementEmax(element_type_);
  const auto blocks = static_cast<std::int64_t>(layout.blocks);
  // Blocks are independent: threads take whole blocks (a large tensor only, where it pays).
#pragma omp parallel for schedule(static) num_threads(NumThreads()) if (values.size() >= kParallelElements)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const auto [begin, end] = layout.Range(static_cast<std::size_t>(block));
    float amax = 0.0f;
    bool finite = true;
    for (std::size_t i = begin; i < end; ++i) {
      const float a = std::fabs(values[i]);
      finite = finite && std::isfinite(a);
      amax = std::max(amax, a);
    }
    if (!finite) {
      scales[static_cast<std::size_t>(block)] = kScaleNaN;
      for (std::size_t i = begin; i < end; ++i) elements[i] = kElementNaN;
      continue;
    }
    // floor(log2(amax)) is the unbiased exponent (ilogb also handles subnormals); a zero block
    // takes the smallest scale.
    const int shared = amax > 0.0f ? std::clamp(std::ilogb(amax) - emax, -127, 127) : -127;
    scales[static_cast<std::size_t>(block)] = static_cast<std::uint8_t>(shared + 127);
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

void MXFP8BlockScaling::DequantizeBlocks(std::span<float> values, std::size_t row_length,
                                         std::span<const std::uint8_t> scales) const {
  const BlockLayout layout = CheckBlocks(values.size(), row_length, values.size(), "values", scales.size());
  const auto blocks = static_cast<std::int64_t>(layout.blocks);
#pragma omp parallel for schedule(static) num_threads(NumThreads()) if (values.size() >= kParallelElements)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const auto [begin, end] = layout.Range(static_cast<std::size_t>(block));
    const std::uint8_t code = scales[static_cast<std::size_t>(block)];
    for (std::size_t i = begin; i < end; ++i) {
      values[i] = code == kScaleNaN ? std::numeric_limits<float>::quiet_NaN()
                                    : std::ldexp(values[i], static_cast<int>(code) - 127);
    }
  }
}

void MXFP8BlockScaling::Quantize(const ITensor& src, ITensor& dst, std::span<std::uint8_t> scales) const {
  if (IsFloat8(src.GetDataType()) || !IsValid(src.GetDataType())) {
    throw ArgumentError(
        "src", "is " + std::string(ToString(src.GetDataType())) + "; MXFP8 quantizes Float32, Float16 or BFloat16");
  }
  CheckElementType(dst, "dst", element_type_);
  CheckShapes(src, dst, scales.size());
  const std::vector<float> values = ReadFloats(src);
  const std::span<std::byte> host = dst.MutableHostBytes();
  if (!host.empty()) {
    QuantizeBlocks(values, RowLength(src.GetShape()),
                   std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(host.data()), host.size()), scales);
    return;
  }
  // The scales are written only once the elements are: a failing write leaves both as they were.
  std::vector<std::uint8_t> elements(values.size());
  std::vector<std::uint8_t> block_scales(scales.size());
  QuantizeBlocks(values, RowLength(src.GetShape()), elements, block_scales);
  std::vector<float> decoded(values.size());
  for (std::size_t i = 0; i < elements.size(); ++i) {
    decoded[i] = element_type_ == DataType::Float8E4M3FN ? mlframework::detail::Float8E4M3FNBitsToFloat(elements[i])
                                                         : mlframework::detail::Float8E5M2BitsToFloat(elements[i]);
  }
  dst.CopyFromFloats(decoded);
  std::copy(block_scales.begin(), block_scales.end(), scales.begin());
}

void MXFP8BlockScaling::Dequantize(const ITensor& src, std::span<const std::uint8_t> scales, ITensor& dst) const {
  CheckElementType(src, "src", element_type_);
  if (IsFloat8(dst.GetDataType()) || !IsValid(dst.GetDataType())) {
    throw ArgumentError("dst", "is " + std::string(ToString(dst.GetDataType())) +
                                   "; MXFP8 dequantizes into Float32, Float16 or BFloat16");
  }
  CheckShapes(src, dst, scales.size());
  std::vector<float> values = ReadFloats(src);
  DequantizeBlocks(values, RowLength(src.GetShape()), scales);
  dst.CopyFromFloats(values);
}

}  // namespace mlframework::fp8
