#pragma once
/// @file MXFP8BlockScaling.hpp
/// @brief MXFP8 block scaling (OCP Microscaling Formats (MX) v1.0): 32 values share an E8M0 scale.

#include <cstddef>
#include <cstdint>
#include <span>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::fp8 {

/// MXFP8 quantization (the OCP MX v1.0 formats MXFP8 E4M3 and MXFP8 E5M2; Transformer Engine's
/// `MXFP8BlockScaling` recipe).
///
/// A tensor is cut into blocks of kBlockSize consecutive values along its last dimension (the
/// last block of a row may be shorter); each block shares one scale X = 2^e stored as an E8M0
/// byte (e + 127; 0xFF is NaN), and each value is stored as the FP8 element `P = V / X`. The
/// shared exponent follows the spec's rule (OCP MX v1.0, section 6.3):
///
///     e = floor(log2(max_i |V_i|)) - emax_elem      (emax_elem: 8 for E4M3, 15 for E5M2)
///
/// clamped to E8M0's range [-127, 127]; elements are rounded to nearest even and saturate to the
/// element format's largest normal (448, 57344): with the floor rule the largest values of a
/// block can exceed it (up to 2^(emax_elem+1) - ulp), and the spec clamps them. Transformer
/// Engine instead rounds the scale up (`2^ceil(log2(amax / fp8_max))`, no element saturates)
/// and torchao offers both (its default FLOOR is this rule, RCEIL is Transformer Engine's); this
/// class follows the spec. A block of zeros gets e = -127; a block holding a NaN or an infinity
/// gets the NaN scale 0xFF (no power of two makes it finite) and NaN elements, and decodes to NaN.
///
/// Runs on the host: a tensor the host cannot address is read with ToFloatVector() and written
/// with CopyFromFloats() (the FP8 values are exact in FP32, so that round trip loses nothing).
class MLFRAMEWORK_EXPORT MXFP8BlockScaling {
 public:
  /// Values per shared scale.
  static constexpr std::size_t kBlockSize = 32;
  /// The E8M0 code of NaN.
  static constexpr std::uint8_t kScaleNaN = 0xFF;

  /// @p element_type: Float8E4M3FN (the default, Transformer Engine's) or Float8E5M2;
  /// ArgumentError naming `element_type` otherwise.
  explicit MXFP8BlockScaling(DataType element_type = DataType::Float8E4M3FN);

  /// The FP8 element type.
  DataType ElementType() const noexcept { return element_type_; }
  /// Number of E8M0 scales of a tensor of @p shape: one per block of each row of its last
  /// dimension (a scalar is one row of one value).
  static std::size_t ScaleCount(const Shape& shape);

  /// Quantizes @p src (FP32, FP16 or BF16) into @p dst (ElementType(), the same shape) and the
  /// block scales into @p scales (ScaleCount() bytes). ArgumentError naming the parameter when a
  /// dtype, shape or size does not fit; nothing is written then. @p scales is written after
  /// @p dst, so a write into @p dst that throws leaves it as it was.
  void Quantize(const ITensor& src, ITensor& dst, std::span<std::uint8_t> scales) const;
  /// `dst = P * 2^(scale - 127)` (NaN for the NaN scale) into @p dst (FP32, FP16 or BF16, the
  /// shape of @p src), @p src holding ElementType() values; ArgumentError as Quantize().
  void Dequantize(const ITensor& src, std::span<const std::uint8_t> scales, ITensor& dst) const;

  /// The kernel on host memory: @p values in rows of @p row_length, @p elements the FP8 bytes
  /// (same count), @p scales one E8M0 byte per block. Sizes as Quantize() requires.
  void QuantizeBlocks(std::span<const float> values, std::size_t row_length, std::span<std::uint8_t> elements,
                      std::span<std::uint8_t> scales) const;
  /// The decode on host memory: @p values are the widened FP8 elements, overwritten with the
  /// dequantized values.
  void DequantizeBlocks(std::span<float> values, std::size_t row_length, std::span<const std::uint8_t> scales) const;

 private:
  DataType element_type_;
};

}  // namespace mlframework::fp8
