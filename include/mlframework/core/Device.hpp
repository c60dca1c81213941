#pragma once
/// @file Device.hpp
/// @brief Where a tensor's memory lives.

#include <ostream>
#include <string>

#include <mlframework/export.hpp>

namespace mlframework {

/// Kind of device.
enum class DeviceType : unsigned char {
  CPU,   ///< Host memory.
  CUDA,  ///< Memory of one CUDA GPU.
};

/// A device: its kind and, for CUDA, its ordinal.
struct MLFRAMEWORK_EXPORT Device {
  DeviceType Type = DeviceType::CPU;  ///< Kind of device.
  int Index = 0;                      ///< GPU ordinal (0 for the CPU).

  /// The host.
  static constexpr Device CPU() noexcept { return Device{}; }
  /// CUDA GPU number @p index.
  static constexpr Device CUDA(int index = 0) noexcept { return Device{DeviceType::CUDA, index}; }
  /// True for the host.
  constexpr bool IsCPU() const noexcept { return Type == DeviceType::CPU; }
  /// True for a CUDA GPU.
  constexpr bool IsCUDA() const noexcept { return Type == DeviceType::CUDA; }
  /// "cpu" or "cuda:N".
  std::string ToString() const;
  /// Same kind and index.
  friend constexpr bool operator==(const Device&, const Device&) = default;
  /// Writes ToString().
  friend std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.ToString(); }
};

}  // namespace mlframework
