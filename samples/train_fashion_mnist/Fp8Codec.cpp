#include "Fp8Codec.hpp"

#include <algorithm>
#include <cstdint>
#include <ctime>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

namespace fashion_mnist {

namespace cpu = mlframework::backends::cpu;

namespace {

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

void Fp8Codec::RoundTrip(const std::string& name, mlframework::fp8::TensorRole role, std::span<const float> src,
                         std::span<float> dst, UnderflowCount* count) {
  if (src.size() != dst.size()) {
    throw mlframework::ArgumentError("dst", "has " + std::to_string(dst.size()) + " values for the " +
                                                std::to_string(src.size()) + " of \"" + name + "\"");
  }
  const double start = CpuSeconds();
  Slot& slot = slots_[name];
  // The evaluation batch differs from the training batch: the buffers follow the size, the
  // recipe's scale state (registered once per name) does not.
  if (!slot.wide || slot.wide->Size() != src.size()) {
    slot.wide = mlframework::Zeros({src.size()}, mlframework::DataType::Float32);
    if (!recipe_.IsRegistered(name)) {
      recipe_.Register(name, role, *slot.wide);
    }
    slot.narrow = mlframework::Zeros({src.size()}, recipe_.Float8TypeOf(name));
  }
  auto* wide = static_cast<float*>(cpu::MutableData(*slot.wide));
  std::copy(src.begin(), src.end(), wide);
  const std::string names[] = {name};
  const mlframework::TensorPtr wides[] = {slot.wide};
  const mlframework::TensorPtr narrows[] = {slot.narrow};
  recipe_.Quantize(names, wides, narrows);
  recipe_.Dequantize(names, narrows, wides);
  if (count != nullptr) {
    std::uint64_t nonzero = 0;
    std::uint64_t flushed = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      nonzero += src[i] != 0.0f ? 1u : 0u;
      flushed += (src[i] != 0.0f && wide[i] == 0.0f) ? 1u : 0u;
    }
    count->nonzero += nonzero;
    count->flushed += flushed;
  }
  std::copy(wide, wide + src.size(), dst.begin());
  seconds_ += CpuSeconds() - start;
}

}  // namespace fashion_mnist
