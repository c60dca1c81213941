// The FP8 block wire's collectives: encode on the sender, exchange bytes (all-to-all for the
// reduce-scatter, all-gather for the all-reduce), decode and sum on the receiver. The codes and
// the scales travel as two tensors, FP8 codes and FP32 scales, so every engine moves them with
// the dtypes it knows (an engine that stages through floats keeps FP8 codes exact: the encoder
// never writes a NaN code).
#include <mlframework/distributed/Float8BlockReduce.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/distributed/Float8BlockCodec.hpp"
#include "mlframework/distributed/HostStaging.hpp"

namespace mlframework::distributed {

namespace {

void CheckFloat32(const char* parameter, const ITensor& tensor, const char* call) {
  if (tensor.GetDataType() != DataType::Float32) {
    throw ArgumentError(parameter, std::string(call) + ": the FP8 block wire reduces Float32 tensors, got " +
                                       std::string(ToString(tensor.GetDataType())));
  }
}

// The elements of a host tensor made by WireBuffers.
std::uint8_t* Codes(const TensorPtr& tensor) {
  return static_cast<std::uint8_t*>(static_cast<void*>(tensor->MutableHostBytes().data()));
}
float* Floats(const TensorPtr& tensor) {
  return static_cast<float*>(static_cast<void*>(tensor->MutableHostBytes().data()));
}

// Host buffers of the wire: @p count codes and @p blocks scales, left uninitialized (the encoder
// or the collective writes every element).
struct WireBuffers {
  WireBuffers(std::size_t count, std::size_t blocks)
      : codes(backends::cpu::Empty(Shape{count}, DataType::Float8E4M3FN)),
        scales(backends::cpu::Empty(Shape{blocks}, DataType::Float32)) {}
  TensorPtr codes;
  TensorPtr scales;
};

}  // namespace

double Float8WireBytesPerElement(std::size_t count) noexcept {
  if (count == 0) return 0.0;
  const auto scale_bytes = static_cast<double>(detail::Float8BlockCount(count) * sizeof(float));
  return 1.0 + (scale_bytes / static_cast<double>(count));
}

void Float8BlockReduceScatter(IProcessGroup& group, const ITensor& input, ITensor& output) {
  constexpr const char* kCall = "Float8BlockReduceScatter";
  CheckFloat32("input", input, kCall);
  CheckFloat32("output", output, kCall);
  const int world = group.WorldSize();
  detail::CheckScatterSizes(input, output, world);
  const std::size_t count = output.Size();
  if (world == 1) {
    group.ReduceScatter(input, output, ReduceOp::Sum);  // a copy
    return;
  }
  const auto parts = static_cast<std::size_t>(world);
  const std::size_t blocks = detail::Float8BlockCount(count);
  const WireBuffers send(count * parts, blocks * parts);
  const WireBuffers received(count * parts, blocks * parts);
  detail::Float8BlockReduceScatterThrough(group, input, output,
                                          {*send.codes, *send.scales, *received.codes, *received.scales});
}

void detail::Float8BlockReduceScatterThrough(IProcessGroup& group, const ITensor& input, ITensor& output,
                                             const Float8WireTensors& wire) {
  const int world = group.WorldSize();
  const auto parts = static_cast<std::size_t>(world);
  const std::size_t count = output.Size();
  const std::size_t blocks = Float8BlockCount(count);
  {
    const HostRead source(input);
    HostWrite codes(wire.send_codes, false);
    HostWrite scales(wire.send_scales, false);
    const auto* values = static_cast<const float*>(source.Data());
    for (std::size_t p = 0; p < parts; ++p) {
      EncodeFloat8Blocks(values + (p * count), count, static_cast<std::uint8_t*>(codes.Data()) + (p * count),
                         static_cast<float*>(scales.Data()) + (p * blocks));
    }
    codes.Commit();
    scales.Commit();
  }
  group.AllToAll(wire.send_codes, wire.received_codes);
  group.AllToAll(wire.send_scales, wire.received_scales);
  const HostRead codes(wire.received_codes);
  const HostRead scales(wire.received_scales);
  HostWrite target(output, false);
  DecodeSumFloat8Blocks(static_cast<const std::uint8_t*>(codes.Data()), static_cast<const float*>(scales.Data()), world,
                        count, static_cast<float*>(target.Data()));
  target.Commit();
}

void Float8BlockAllReduce(IProcessGroup& group, ITensor& tensor) {
  CheckFloat32("tensor", tensor, "Float8BlockAllReduce");
  const int world = group.WorldSize();
  if (world == 1) return;
  const auto parts = static_cast<std::size_t>(world);
  const std::size_t count = tensor.Size();
  const std::size_t blocks = detail::Float8BlockCount(count);
  WireBuffers mine(count, blocks);
  WireBuffers gathered(count * parts, blocks * parts);
  detail::HostWrite target(tensor, true);
  detail::EncodeFloat8Blocks(static_cast<const float*>(target.Data()), count, Codes(mine.codes), Floats(mine.scales));
  group.AllGather(*mine.codes, *gathered.codes);
  group.AllGather(*mine.scales, *gathered.scales);
  detail::DecodeSumFloat8Blocks(Codes(gathered.codes), Floats(gathered.scales), world, count,
                                static_cast<float*>(target.Data()));
  target.Commit();
}

}  // namespace mlframework::distributed
