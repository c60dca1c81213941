#include "mlframework/core/HostNonFiniteScan.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <mlframework/core/DataType.hpp>

namespace mlframework::detail {

namespace {

// Exponent and mantissa masks of a format stored in the unsigned type Bits.
template <typename Bits>
struct Format {
  Bits exponent;
  Bits mantissa;
  Bits sign;
};

constexpr Format<std::uint32_t> kFloat32{0x7f800000u, 0x007fffffu, 0x80000000u};
constexpr Format<std::uint16_t> kFloat16{0x7c00u, 0x03ffu, 0x8000u};
constexpr Format<std::uint16_t> kBFloat16{0x7f80u, 0x007fu, 0x8000u};

// Elements per block: the branch-free count of a block stays in registers and vectorises; only a
// block that holds a non-finite value is walked again, while it is still in the L1 cache, so the
// tensor is read from memory once.
constexpr std::size_t kBlock = 2048;

template <typename Bits>
void ScanBits(std::span<const Bits> bits, Format<Bits> format, NonFiniteScan& scan) {
  for (std::size_t begin = 0; begin < bits.size(); begin += kBlock) {
    const std::size_t end = std::min(bits.size(), begin + kBlock);
    std::uint32_t in_block = 0;
    for (std::size_t i = begin; i < end; ++i) {
      in_block += static_cast<std::uint32_t>((bits[i] & format.exponent) == format.exponent);
    }
    if (in_block == 0) {
      continue;
    }
    for (std::size_t i = begin; i < end; ++i) {
      const Bits value = bits[i];
      if ((value & format.exponent) != format.exponent) {
        continue;
      }
      if (scan.Count == 0) {
        scan.FirstIndex = i;
      }
      ++scan.Count;
      if ((value & format.mantissa) != 0) {
        scan.HasNaN = true;
        ++scan.NaNCount;
      } else if ((value & format.sign) != 0) {
        scan.HasNegInf = true;
        ++scan.NegInfCount;
      } else {
        scan.HasPosInf = true;
        ++scan.PosInfCount;
      }
    }
  }
}

template <typename Bits>
void ScanBytes(std::span<const std::byte> bytes, Format<Bits> format, NonFiniteScan& scan) {
  // Checked by the caller: the bytes are aligned to the element size, so they can be read as Bits.
  const std::span<const Bits> bits(reinterpret_cast<const Bits*>(bytes.data()), bytes.size() / sizeof(Bits));
  ScanBits(bits, format, scan);
}

}  // namespace

NonFiniteScan HostScanNonFinite(const ITensor& tensor) {
  NonFiniteScan scan;
  const DataType dtype = tensor.GetDataType();
  const std::span<const std::byte> bytes = tensor.HostBytes();
  // Only bytes that are exactly the elements, aligned to the element size (a tensor's HostBytes()
  // may be neither: ITensor's contract asks it, the scan does not trust it).
  const bool host = !bytes.empty() && bytes.size() == tensor.Size() * ElementSize(dtype) &&
                    reinterpret_cast<std::uintptr_t>(bytes.data()) % ElementSize(dtype) == 0;
  if (host && dtype == DataType::Float32) {
    ScanBytes(bytes, kFloat32, scan);
  } else if (host && dtype == DataType::Float16) {
    ScanBytes(bytes, kFloat16, scan);
  } else if (host && dtype == DataType::BFloat16) {
    ScanBytes(bytes, kBFloat16, scan);
  } else {
    // Any other tensor: widened to FP32, which keeps NaN and the sign of an infinity.
    std::vector<float> values(tensor.Size());
    tensor.CopyToFloats(values);
    std::vector<std::uint32_t> bits(values.size());
    std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
    ScanBits(std::span<const std::uint32_t>(bits), kFloat32, scan);
  }
  return scan;
}

}  // namespace mlframework::detail
