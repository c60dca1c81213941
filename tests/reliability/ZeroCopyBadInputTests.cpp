// Bad input to the zero-copy entry points: backends::cpu::Wrap, backends::cuda::Wrap and
// FromDLPack / ToDLPack. Every case throws the documented error naming the parameter or the
// DLPack field, and a rejected DLPack tensor is left to its caller: its deleter is never called
// (and an accepted one's exactly once, also when it is given back at once).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

#include "reliability/BadInputSupport.hpp"

using namespace mlframework;
using mlframework::testing::ExpectError;

namespace {

// A valid float32 CPU descriptor of shape {2, 3} over @p values; mutate one field per case.
struct Descriptor {
  std::vector<float> values = std::vector<float>(8, 1.0f);
  std::vector<std::int64_t> shape = {2, 3};
  std::vector<std::int64_t> strides = {3, 1};
  DLManagedTensor managed{};
  int deleted = 0;
  Descriptor() {
    managed.dl_tensor.data = values.data();
    managed.dl_tensor.device = DLDevice{kDLCPU, 0};
    managed.dl_tensor.ndim = 2;
    managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
    managed.dl_tensor.shape = shape.data();
    managed.dl_tensor.strides = strides.data();
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* self) { ++static_cast<Descriptor*>(self->manager_ctx)->deleted; };
  }
};

// Expects FromDLPack to reject the descriptor changed by @p mutate with an ArgumentError naming
// @p field, leaving the descriptor untouched and its deleter uncalled.
void ExpectRejected(const std::function<void(DLTensor&)>& mutate, const std::string& field) {
  Descriptor d;
  mutate(d.managed.dl_tensor);
  const DLTensor before = d.managed.dl_tensor;
  ExpectError<ArgumentError>([&] { (void)FromDLPack(&d.managed); }, field);
  BOOST_TEST(d.deleted == 0, field);
  BOOST_TEST(d.managed.dl_tensor.data == before.data);
  BOOST_TEST(d.managed.deleter != nullptr);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ZeroCopyBadInput)

BOOST_AUTO_TEST_CASE(CpuWrap) {
  std::vector<float> memory(4);
  ExpectError<ArgumentError>([&] { (void)backends::cpu::Wrap(nullptr, {4}, DataType::Float32, nullptr); }, "data");
  auto* odd = reinterpret_cast<std::byte*>(memory.data()) + 1;
  ExpectError<ArgumentError>([&] { (void)backends::cpu::Wrap(odd, {2}, DataType::Float32, nullptr); }, "data");
  ExpectError<ArgumentError>([&] { (void)backends::cpu::Wrap(odd, {2}, DataType::BFloat16, nullptr); }, "data");
  ExpectError<ArgumentError>([&] { (void)backends::cpu::Wrap(memory.data(), {4}, static_cast<DataType>(9), nullptr); },
                             "dtype");
  ExpectError<ArgumentError>(
      [&] {
        (void)backends::cpu::Wrap(memory.data(), {SIZE_MAX / 2, 4}, DataType::Float32, nullptr);
      },
      "shape");
  // A failed wrap does not keep (or drop) the caller's owner.
  auto owner = std::make_shared<int>(1);
  ExpectError<ArgumentError>([&] { (void)backends::cpu::Wrap(nullptr, {1}, DataType::Float32, owner); }, "data");
  BOOST_TEST(owner.use_count() == 1);
}

BOOST_AUTO_TEST_CASE(CudaWrap) {
  std::vector<float> memory(4);
  // Argument errors come first, with or without a CUDA build or a GPU.
  ExpectError<ArgumentError>([&] { (void)backends::cuda::Wrap(nullptr, {4}, DataType::Float32, 0, nullptr); }, "data");
  auto* odd = reinterpret_cast<std::byte*>(memory.data()) + 2;
  ExpectError<ArgumentError>([&] { (void)backends::cuda::Wrap(odd, {1}, DataType::Float32, 0, nullptr); }, "data");
  ExpectError<ArgumentError>(
      [&] { (void)backends::cuda::Wrap(memory.data(), {1}, static_cast<DataType>(7), 0, nullptr); }, "dtype");
  if (!backends::cuda::IsBuilt()) {
    ExpectError<BackendError>([&] { (void)backends::cuda::Wrap(memory.data(), {1}, DataType::Float32, 0, nullptr); });
  } else {
    ExpectError<ArgumentError>([&] { (void)backends::cuda::Wrap(memory.data(), {1}, DataType::Float32, -1, nullptr); },
                               "device");
  }
  if (!backends::cuda::IsAvailable()) {
    ExpectError<BackendError>([&] { (void)backends::cuda::Wrap(memory.data(), {1}, DataType::Float32, 0, nullptr); });
  }
}

BOOST_AUTO_TEST_CASE(FromDLPackRejectsEveryBadField) {
  ExpectError<ArgumentNullError>([] { (void)FromDLPack(nullptr); }, "managed");
  ExpectRejected([](DLTensor& t) { t.ndim = -1; }, "managed->dl_tensor.ndim");
  ExpectRejected([](DLTensor& t) { t.ndim = 1000; }, "managed->dl_tensor.ndim");
  ExpectRejected([](DLTensor& t) { t.shape = nullptr; }, "managed->dl_tensor.shape");
  ExpectRejected([](DLTensor& t) { t.shape[1] = -3; }, "managed->dl_tensor.shape[1]");
  ExpectRejected([](DLTensor& t) { t.strides[0] = 4; }, "managed->dl_tensor.strides[0]");  // padded rows
  ExpectRejected([](DLTensor& t) { t.strides[1] = 2; }, "managed->dl_tensor.strides[1]");  // every other element
  ExpectRejected([](DLTensor& t) { std::swap(t.strides[0], t.strides[1]); }, "strides");   // transposed
  ExpectRejected([](DLTensor& t) { t.dtype = DLDataType{kDLInt, 32, 1}; }, "managed->dl_tensor.dtype");
  ExpectRejected([](DLTensor& t) { t.dtype = DLDataType{kDLFloat, 64, 1}; }, "managed->dl_tensor.dtype");
  ExpectRejected([](DLTensor& t) { t.dtype = DLDataType{kDLFloat, 32, 4}; }, "managed->dl_tensor.dtype");
  ExpectRejected([](DLTensor& t) { t.dtype = DLDataType{kDLBfloat, 32, 1}; }, "managed->dl_tensor.dtype");
  ExpectRejected([](DLTensor& t) { t.device = DLDevice{kDLOpenCL, 0}; }, "managed->dl_tensor.device.device_type");
  ExpectRejected([](DLTensor& t) { t.device = DLDevice{kDLCUDAHost, 0}; }, "managed->dl_tensor.device.device_type");
  ExpectRejected([](DLTensor& t) { t.device = DLDevice{kDLCUDA, -1}; }, "managed->dl_tensor.device.device_id");
  ExpectRejected([](DLTensor& t) { t.byte_offset = 2; }, "managed->dl_tensor.byte_offset");  // misaligned
  ExpectRejected([](DLTensor& t) { t.data = nullptr; }, "managed->dl_tensor.data");
  ExpectRejected(
      [](DLTensor& t) {
        t.data = nullptr;
        t.byte_offset = 4;
      },
      "managed->dl_tensor.data");
  ExpectRejected([](DLTensor& t) { t.data = static_cast<std::byte*>(t.data) + 1; }, "managed->dl_tensor.data");
  ExpectRejected(
      [](DLTensor& t) {
        t.shape[0] = INT64_MAX;
        t.shape[1] = 4;
        t.strides = nullptr;
      },
      "managed->dl_tensor.shape");
}

BOOST_AUTO_TEST_CASE(FromDLPackOnAnUnavailableDeviceLeavesTheTensorToItsCaller) {
  if (backends::cuda::IsAvailable()) {
    return;  // a GPU machine imports CUDA memory; the device suites cover it
  }
  Descriptor d;
  d.managed.dl_tensor.device = DLDevice{kDLCUDA, 0};
  ExpectError<BackendError>([&] { (void)FromDLPack(&d.managed); });
  BOOST_TEST(d.deleted == 0);
}

BOOST_AUTO_TEST_CASE(DeleterRunsExactlyOnceOnEveryAcceptedPath) {
  {
    Descriptor d;
    (void)FromDLPack(&d.managed);  // dropped at once
    BOOST_TEST(d.deleted == 1);
  }
  {
    Descriptor d;
    d.managed.dl_tensor.strides = nullptr;
    d.managed.dl_tensor.shape[0] = 0;  // no elements: data may be anything, even null
    d.managed.dl_tensor.data = nullptr;
    TensorPtr t = FromDLPack(&d.managed);
    BOOST_TEST(t->Size() == 0u);
    TensorPtr copy = t;
    t.reset();
    BOOST_TEST(d.deleted == 0);
    copy.reset();
    BOOST_TEST(d.deleted == 1);
  }
  {
    Descriptor d;
    d.managed.deleter = nullptr;  // a producer that needs no callback
    const TensorPtr t = FromDLPack(&d.managed);
    BOOST_TEST(t->Size() == 6u);
  }
}

BOOST_AUTO_TEST_CASE(ToDLPackRejectsWhatItCannotExport) {
  ExpectError<ArgumentNullError>([] { (void)ToDLPack(nullptr); }, "tensor");
  // A user's tensor that keeps its elements elsewhere has no address to export.
  struct Elsewhere final : ITensor {
    Shape shape{2};
    DataType GetDataType() const override { return DataType::Float32; }
    Device GetDevice() const override { return Device::CPU(); }
    const Shape& GetShape() const override { return shape; }
    std::size_t Size() const override { return 2; }
    std::vector<float> ToFloatVector() const override { return {0.0f, 0.0f}; }
    void CopyFromFloats(std::span<const float>) override {}
  };
  ExpectError<ArgumentError>([] { (void)ToDLPack(std::make_shared<Elsewhere>()); }, "tensor");
}

BOOST_AUTO_TEST_SUITE_END()
