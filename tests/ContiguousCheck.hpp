#pragma once
// Test helper: do CPU tensors lie back to back in memory, as ZerosContiguous() places them
// (each one starting exactly at the previous one's end)?
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlfw_test {

inline bool BackToBack(const std::vector<mlframework::TensorPtr>& tensors) {
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    const auto previous = reinterpret_cast<std::uintptr_t>(mlframework::backends::cpu::Data(*tensors[i - 1]));
    const std::size_t bytes = tensors[i - 1]->Size() * mlframework::ElementSize(tensors[i - 1]->GetDataType());
    if (reinterpret_cast<std::uintptr_t>(mlframework::backends::cpu::Data(*tensors[i])) != previous + bytes) {
      return false;
    }
  }
  return true;
}

}  // namespace mlfw_test
