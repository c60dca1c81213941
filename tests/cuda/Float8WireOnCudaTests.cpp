// The FP8 block gradient wire's CUDA kernels against the CPU codec, bit for bit: the encoder
// (codes and block scales) and the decoding sum, through the CUDA backend's operations
// (TensorBackend::EncodeFloat8Blocks, DecodeSumFloat8Blocks) on data with zeros, subnormals,
// large values, non-finite blocks and short last blocks; and the whole reduce-scatter and
// all-reduce on device tensors (the device route: kernels and device exchanges) against the
// same calls on host tensors, through a two-rank group that needs no NCCL. Needs a CUDA device
// (the executable skips without one).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>

#include "cuda/CudaTestUtil.hpp"
#include "cuda/Float8WireData.hpp"
#include "mlframework/distributed/Float8BlockCodec.hpp"
#include "mlframework/distributed/Float8BlockReduceDevice.hpp"

using namespace mlframework;
using mlfw_cuda_test::kGpu;
using mlfw_cuda_test::RawBits;
using mlfw_wire_test::kWireBlock;
using mlfw_wire_test::WireBits;
using mlfw_wire_test::WireValues;
namespace dist = mlframework::distributed;

namespace {

std::vector<std::uint32_t> RawBits(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// E4M3FN codes as the floats they encode (exact; the encoder writes no NaN code), so that a
// tensor made from them holds these very bytes.
std::vector<float> WidenCodes(const std::vector<std::uint8_t>& codes) {
  std::vector<float> values(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) values[i] = mlframework::detail::Float8E4M3FNBitsToFloat(codes[i]);
  return values;
}

// A two-rank group of one process whose peer holds exactly what this rank holds: an all-to-all
// receives this rank's chunk 0 from both ranks, an all-gather this rank's input twice. It moves
// the bytes through the host (it is the test's exchange, not the library's), so the wire's
// device route runs whole, kernels included, without NCCL.
class MirrorGroup final : public dist::IProcessGroup {
 public:
  int Rank() const noexcept override { return 0; }
  int WorldSize() const noexcept override { return 2; }
  std::string_view BackendName() const noexcept override { return "mirror"; }
  void AllGather(const ITensor& input, ITensor& output) override {
    std::vector<float> values = input.ToFloatVector();
    values.insert(values.end(), values.begin(), values.end());
    output.CopyFromFloats(values);
  }
  void AllToAll(const ITensor& input, ITensor& output) override {
    const std::vector<float> values = input.ToFloatVector();
    std::vector<float> received(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2));
    received.insert(received.end(), received.begin(), received.end());
    output.CopyFromFloats(received);
  }
  void ReduceScatter(const ITensor& /*input*/, ITensor& /*output*/, dist::ReduceOp /*op*/) override {
    Unused("ReduceScatter");
  }
  void AllReduce(ITensor& /*tensor*/, dist::ReduceOp /*op*/) override { Unused("AllReduce"); }
  void Broadcast(ITensor& /*tensor*/, int /*root*/) override { Unused("Broadcast"); }
  void Barrier() override {}
  void AllReduceHost(std::span<double> /*values*/, dist::ReduceOp /*op*/) override { Unused("AllReduceHost"); }
  void Abort(const std::string& /*message*/) noexcept override {}

 private:
  [[noreturn]] static void Unused(const char* call) {
    throw InvalidOperationError(std::string("MirrorGroup: the wire does not call ") + call);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaFloat8Wire)

// Three runs at a stride from an offset (a reduce-scatter's destinations), each with a short
// last block: the CUDA encoder writes the CPU codec's codes and scales, run by run.
BOOST_AUTO_TEST_CASE(EncodeGivesTheCpuBits) {
  constexpr std::size_t kRuns = 3;
  constexpr std::size_t kLength = (41 * kWireBlock) + 91;
  constexpr std::size_t kStride = kLength + 33;
  constexpr std::size_t kOffset = 5;
  const std::size_t blocks = dist::detail::Float8BlockCount(kLength);
  const std::vector<float> values = WireValues(kOffset + (kRuns * kStride), 21u);
  const Float8BlockRuns runs{.Runs = kRuns, .Length = kLength, .Offset = kOffset, .Stride = kStride};
  std::vector<std::uint8_t> codes(kRuns * kLength);
  std::vector<float> scales(kRuns * blocks);
  for (std::size_t r = 0; r < kRuns; ++r) {
    dist::detail::EncodeFloat8Blocks(values.data() + kOffset + (r * kStride), kLength, codes.data() + (r * kLength),
                                     scales.data() + (r * blocks));
  }
  const TensorPtr device = FromVector(values, {values.size()}, DataType::Float32, kGpu);
  const TensorPtr device_codes = Zeros({kRuns * kLength}, DataType::Float8E4M3FN, kGpu);
  const TensorPtr device_scales = Zeros({kRuns * blocks}, DataType::Float32, kGpu);
  device->Backend()->EncodeFloat8Blocks(*device, runs, *device_codes, *device_scales);
  BOOST_TEST(RawBits(*device_codes) == RawBits(WidenCodes(codes)), boost::test_tools::per_element());
  BOOST_TEST(RawBits(*device_scales) == RawBits(scales), boost::test_tools::per_element());
}

// Four parts encoded by the CPU codec, summed on the GPU into an offset of the output: the CPU's
// rank-order sums (NaN alike: its payload is the hardware's), the rest of the output untouched.
BOOST_AUTO_TEST_CASE(DecodeSumGivesTheCpuBits) {
  constexpr std::size_t kParts = 4;
  constexpr std::size_t kLength = (29 * kWireBlock) + 200;
  constexpr std::size_t kOffset = 17;
  const std::size_t blocks = dist::detail::Float8BlockCount(kLength);
  std::vector<float> values;
  for (std::size_t p = 0; p < kParts; ++p) {
    const std::vector<float> part = WireValues(kLength, 31u + static_cast<std::uint32_t>(p));
    values.insert(values.end(), part.begin(), part.end());
  }
  std::vector<std::uint8_t> codes(kParts * kLength);
  std::vector<float> scales(kParts * blocks);
  for (std::size_t p = 0; p < kParts; ++p) {  // each part on its own: its own short last block
    dist::detail::EncodeFloat8Blocks(values.data() + (p * kLength), kLength, codes.data() + (p * kLength),
                                     scales.data() + (p * blocks));
  }
  const std::vector<float> before(kOffset + kLength + 9, -2.25f);
  std::vector<float> expected(before);
  dist::detail::DecodeSumFloat8Blocks(codes.data(), scales.data(), static_cast<int>(kParts), kLength,
                                      expected.data() + kOffset);
  const TensorPtr device_codes = FromVector(WidenCodes(codes), {codes.size()}, DataType::Float8E4M3FN, kGpu);
  const TensorPtr device_scales = FromVector(scales, {scales.size()}, DataType::Float32, kGpu);
  const TensorPtr device_out = FromVector(before, {before.size()}, DataType::Float32, kGpu);
  device_out->Backend()->DecodeSumFloat8Blocks(*device_codes, *device_scales, kParts, kLength, *device_out, kOffset);
  BOOST_TEST(WireBits(device_out->ToFloatVector()) == WireBits(expected), boost::test_tools::per_element());
}

// The whole reduce-scatter and all-reduce through the public calls on device tensors (the
// device route, one piece) and with pieces of three blocks (several pieces, a short last one),
// against the same calls on host tensors (the host route): the same bits.
BOOST_AUTO_TEST_CASE(ReductionsOnDeviceTensorsGiveTheHostBits) {
  constexpr std::size_t kCount = (23 * kWireBlock) + 45;
  constexpr std::size_t kPiece = 3 * kWireBlock;
  MirrorGroup group;
  const std::vector<float> values = WireValues(2 * kCount, 41u);
  const TensorPtr host_in = FromVector(values, {values.size()});
  const TensorPtr device_in = FromVector(values, {values.size()}, DataType::Float32, kGpu);
  const TensorPtr host_out = Zeros({kCount});
  const TensorPtr device_out = Zeros({kCount}, DataType::Float32, kGpu);
  dist::Float8BlockReduceScatter(group, *host_in, *host_out);
  dist::Float8BlockReduceScatter(group, *device_in, *device_out);
  BOOST_TEST(WireBits(device_out->ToFloatVector()) == WireBits(host_out->ToFloatVector()),
             boost::test_tools::per_element());
  const TensorPtr pieces_out = Zeros({kCount}, DataType::Float32, kGpu);
  dist::detail::Float8BlockReduceScatterOnDevice(group, *device_in, *pieces_out, kPiece);
  BOOST_TEST(WireBits(pieces_out->ToFloatVector()) == WireBits(host_out->ToFloatVector()),
             boost::test_tools::per_element());
  // FSDP's average (the factor) on both routes: the host multiplies in its decoding pass, the
  // device after its sum; one FP32 multiply of the same sums either way.
  const TensorPtr host_averaged = Zeros({kCount});
  const TensorPtr device_averaged = Zeros({kCount}, DataType::Float32, kGpu);
  dist::Float8BlockReduceScatter(group, *host_in, *host_averaged, 0.5f);
  dist::Float8BlockReduceScatter(group, *device_in, *device_averaged, 0.5f);
  BOOST_TEST(WireBits(device_averaged->ToFloatVector()) == WireBits(host_averaged->ToFloatVector()),
             boost::test_tools::per_element());
  BOOST_TEST(WireBits(host_averaged->ToFloatVector()) != WireBits(host_out->ToFloatVector()));

  const std::vector<float> chunk(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(kCount));
  const TensorPtr host_tensor = FromVector(chunk, {kCount});
  const TensorPtr device_tensor = FromVector(chunk, {kCount}, DataType::Float32, kGpu);
  const TensorPtr device_pieces = FromVector(chunk, {kCount}, DataType::Float32, kGpu);
  dist::Float8BlockAllReduce(group, *host_tensor);
  dist::Float8BlockAllReduce(group, *device_tensor);
  dist::detail::Float8BlockAllReduceOnDevice(group, *device_pieces, kPiece);
  BOOST_TEST(WireBits(device_tensor->ToFloatVector()) == WireBits(host_tensor->ToFloatVector()),
             boost::test_tools::per_element());
  BOOST_TEST(WireBits(device_pieces->ToFloatVector()) == WireBits(host_tensor->ToFloatVector()),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
