// Zero copy: backends::cpu::Wrap over memory the caller owns, and DLPack import and export.
// The fused kernels run on the caller's memory itself, and the owner (or the DLPack deleter)
// lives exactly as long as the tensors over it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float16.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "NonFinite.hpp"

using namespace mlframework;
using mlfw_test::kInf;

namespace {

// A DLPack managed tensor over a vector the test owns, counting its deleter's calls.
struct Managed {
  std::vector<float> values;
  std::vector<std::int64_t> shape;
  DLManagedTensor managed{};
  int deleted = 0;

  explicit Managed(std::vector<float> v, std::vector<std::int64_t> s) : values(std::move(v)), shape(std::move(s)) {
    managed.dl_tensor.data = values.data();
    managed.dl_tensor.device = DLDevice{kDLCPU, 0};
    managed.dl_tensor.ndim = static_cast<std::int32_t>(shape.size());
    managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
    managed.dl_tensor.shape = shape.data();
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* self) { ++static_cast<Managed*>(self->manager_ctx)->deleted; };
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(ZeroCopyWrap)

BOOST_AUTO_TEST_CASE(FusedKernelsRunOnTheCallersMemory) {
  std::vector<float> grads = {2.0f, -4.0f, 8.0f, 16.0f};
  const TensorPtr wrapped = backends::cpu::Wrap(grads.data(), {2, 2}, DataType::Float32, nullptr);
  BOOST_TEST(wrapped->Backend() == &backends::cpu::Backend());
  BOOST_TEST(backends::cpu::Data(*wrapped) == grads.data());
  const TensorPtr list[] = {wrapped};
  BOOST_TEST(!UnscaleAndCheck(list, 0.5f));
  BOOST_TEST(grads == (std::vector<float>{1.0f, -2.0f, 4.0f, 8.0f}), boost::test_tools::per_element());
  grads[3] = kInf;
  BOOST_TEST(HasNonFinite(list));

  // 16-bit memory: a cast into the library's FP32 buffer reads the caller's words.
  std::vector<std::uint16_t> half = {Float16(1.5f).bits, Float16(-0.25f).bits};
  const TensorPtr h = backends::cpu::Wrap(half.data(), {2}, DataType::Float16, nullptr);
  const std::vector<TensorPtr> wide = Cast(std::vector<TensorPtr>{h}, DataType::Float32, 2.0f);
  BOOST_TEST(wide[0]->ToFloatVector() == (std::vector<float>{3.0f, -0.5f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(OwnerLivesAsLongAsTheTensorsOverIt) {
  auto owner = std::make_shared<std::vector<float>>(8, 1.0f);
  std::weak_ptr<std::vector<float>> watch = owner;
  TensorPtr view;
  {
    const TensorPtr wrapped = backends::cpu::Wrap(owner->data(), {8}, DataType::Float32, owner);
    owner.reset();
    BOOST_TEST(!watch.expired());
    view = backends::cpu::View(wrapped, 2, {3});
  }
  BOOST_TEST(!watch.expired());  // the view still reads the memory
  BOOST_TEST(view->ToFloatVector() == (std::vector<float>{1.0f, 1.0f, 1.0f}), boost::test_tools::per_element());
  view.reset();
  BOOST_TEST(watch.expired());
}

BOOST_AUTO_TEST_CASE(ElementAlignmentIsEnough) {
  // Memory one element past a cache line: the kernels take any element-aligned address.
  std::vector<float> storage(67, 3.0f);
  const TensorPtr wrapped = backends::cpu::Wrap(storage.data() + 1, {65}, DataType::Float32, nullptr);
  const TensorPtr list[] = {wrapped};
  BOOST_TEST(SumOfSquares(list) == 65.0 * 9.0);
  const TensorPtr empty = backends::cpu::Wrap(nullptr, {0, 3}, DataType::BFloat16, nullptr);
  BOOST_TEST(empty->Size() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(DLPackExchange)

BOOST_AUTO_TEST_CASE(ImportIsZeroCopyAndDeletesOnce) {
  Managed m({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  TensorPtr view;
  {
    const TensorPtr tensor = FromDLPack(&m.managed);
    BOOST_TEST(tensor->GetShape() == (Shape{2, 3}), boost::test_tools::per_element());
    BOOST_TEST((tensor->GetDataType() == DataType::Float32));
    BOOST_TEST(tensor->GetDevice().IsCPU());
    BOOST_TEST(backends::cpu::Data(*tensor) == m.values.data());
    const TensorPtr list[] = {tensor};
    ScaleInPlace(list, 2.0f);
    BOOST_TEST(m.values[5] == 12.0f);
    view = backends::cpu::View(tensor, 3, {3});
    BOOST_TEST(m.deleted == 0);
  }
  BOOST_TEST(m.deleted == 0);  // the view holds the memory
  view.reset();
  BOOST_TEST(m.deleted == 1);
}

// FP8 values cross as their uint8 bytes: the import views them as the FP8 dtype asked for, over
// the same memory, with the same ownership; other dtypes and a non-FP8 target are refused.
BOOST_AUTO_TEST_CASE(Float8BytesImportAsFloat8) {
  Managed m({0.0f, 0.0f}, {8});  // 8 bytes of the test's memory
  m.managed.dl_tensor.dtype = DLDataType{kDLUInt, 8, 1};
  auto* bytes = reinterpret_cast<std::uint8_t*>(m.values.data());
  bytes[0] = 0x38;  // 1.0 in E4M3
  bytes[1] = 0x40;  // 2.0 in E4M3 and in E5M2
  {
    const TensorPtr tensor = FromDLPackAsFloat8(&m.managed, DataType::Float8E4M3FN);
    BOOST_TEST((tensor->GetDataType() == DataType::Float8E4M3FN));
    BOOST_TEST(tensor->GetShape() == (Shape{8}), boost::test_tools::per_element());
    BOOST_TEST(backends::cpu::Data(*tensor) == static_cast<const void*>(bytes));
    const std::vector<float> values = tensor->ToFloatVector();
    BOOST_TEST(values[0] == 1.0f);
    BOOST_TEST(values[1] == 2.0f);
  }
  BOOST_TEST(m.deleted == 1);
  m.deleted = 0;
  BOOST_TEST(FromDLPackAsFloat8(&m.managed, DataType::Float8E5M2)->ToFloatVector()[1] == 2.0f);
  BOOST_TEST(m.deleted == 1);
  m.deleted = 0;
  BOOST_CHECK_EXCEPTION(FromDLPackAsFloat8(&m.managed, DataType::Float16), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "float8"; });
  m.managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  BOOST_CHECK_EXCEPTION(FromDLPackAsFloat8(&m.managed, DataType::Float8E4M3FN), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "managed->dl_tensor.dtype"; });
  BOOST_CHECK_THROW(FromDLPackAsFloat8(nullptr, DataType::Float8E4M3FN), ArgumentNullError);
  BOOST_TEST(m.deleted == 0);  // a refused import leaves the managed tensor to its owner
}

BOOST_AUTO_TEST_CASE(ByteOffsetAndStridesAsPyTorchWritesThem) {
  Managed m({9.0f, 1.0f, 2.0f, 3.0f}, {3, 1});
  m.managed.dl_tensor.byte_offset = sizeof(float);
  std::vector<std::int64_t> strides = {1, 7};  // compact; the extent-1 dimension's stride is free
  m.managed.dl_tensor.strides = strides.data();
  const TensorPtr tensor = FromDLPack(&m.managed);
  BOOST_TEST(tensor->ToFloatVector() == (std::vector<float>{1.0f, 2.0f, 3.0f}), boost::test_tools::per_element());
}

// A byte_offset that carries data past the end of the address space (or past PTRDIFF_MAX, where
// pointer arithmetic ends) addresses nothing: refused before the pointer is formed.
BOOST_AUTO_TEST_CASE(AByteOffsetBeyondTheAddressSpaceIsRefused) {
  Managed m({1.0f, 2.0f}, {2});
  const auto refused_with = [&m](std::uint64_t offset) {
    m.managed.dl_tensor.byte_offset = offset;
    BOOST_TEST_CONTEXT("byte_offset " << offset) {
      BOOST_CHECK_EXCEPTION(FromDLPack(&m.managed), ArgumentError, [offset](const ArgumentError& e) {
        BOOST_TEST_MESSAGE(e.what());
        return e.Parameter() == "managed->dl_tensor.byte_offset" &&
               std::string(e.what()).find(std::to_string(offset)) != std::string::npos;
      });
    }
  };
  // Wraps round to the float just before data.
  refused_with(std::numeric_limits<std::uint64_t>::max() - sizeof(float) + 1);
  refused_with(static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) + 1);
  BOOST_TEST(m.deleted == 0);  // a refused import leaves the managed tensor to its owner
}

BOOST_AUTO_TEST_CASE(ExportRoundTripsThroughDLPack) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const TensorPtr original = FromVector({1.0f, -2.0f, 0.5f, 4.0f, 8.0f, 16.0f}, {3, 2}, dtype);
    DLManagedTensor* exported = ToDLPack(original);
    BOOST_TEST(exported->dl_tensor.ndim == 2);
    BOOST_TEST(exported->dl_tensor.shape[0] == 3);
    BOOST_TEST(exported->dl_tensor.strides[0] == 2);
    BOOST_TEST(exported->dl_tensor.strides[1] == 1);
    BOOST_TEST(exported->dl_tensor.device.device_type == kDLCPU);
    BOOST_TEST(exported->dl_tensor.dtype.bits == (dtype == DataType::Float32 ? 32 : 16));
    BOOST_TEST(exported->dl_tensor.data == backends::cpu::Data(*original));
    const TensorPtr back = FromDLPack(exported);  // takes ownership of the export
    BOOST_TEST((back->GetDataType() == dtype));
    BOOST_TEST(back->ToFloatVector() == original->ToFloatVector(), boost::test_tools::per_element());
    BOOST_TEST(backends::cpu::Data(*back) == backends::cpu::Data(*original));
  }
}

// An empty tensor addresses no element: its strides describe nothing, and whatever its producer
// wrote (the library's own export writes 0 before a zero extent) is accepted.
BOOST_AUTO_TEST_CASE(EmptyTensorsImportWithAnyStrides) {
  const TensorPtr original = Zeros({2, 0, 3}, DataType::Float32);
  DLManagedTensor* exported = ToDLPack(original);
  const TensorPtr back = FromDLPack(exported);  // takes ownership of the export
  BOOST_TEST(back->GetShape() == (Shape{2, 0, 3}), boost::test_tools::per_element());
  BOOST_TEST(back->Size() == 0u);

  Managed m({}, {4, 0});
  std::vector<std::int64_t> strides = {5, 9};
  m.managed.dl_tensor.strides = strides.data();
  BOOST_TEST(FromDLPack(&m.managed)->GetShape() == (Shape{4, 0}), boost::test_tools::per_element());
  BOOST_TEST(m.deleted == 1);
  // Non-empty memory keeps the compact rule.
  Managed dense({1.0f, 2.0f}, {2});
  strides = {2};
  dense.managed.dl_tensor.strides = strides.data();
  BOOST_CHECK_EXCEPTION(FromDLPack(&dense.managed), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "managed->dl_tensor.strides[0]"; });
  BOOST_TEST(dense.deleted == 0);
}

BOOST_AUTO_TEST_CASE(UserTensorsOverHostMemoryExport) {
  // A user's ITensor without a backend that gives its memory through HostBytes().
  struct HostVector final : ITensor {
    std::vector<float> values{1.0f, 2.0f, 3.0f};
    Shape shape{3};
    DataType GetDataType() const override { return DataType::Float32; }
    Device GetDevice() const override { return Device::CPU(); }
    const Shape& GetShape() const override { return shape; }
    std::size_t Size() const override { return values.size(); }
    std::vector<float> ToFloatVector() const override { return values; }
    void CopyFromFloats(std::span<const float>) override {}

   protected:
    std::span<std::byte> HostStorage() const noexcept override {
      return {reinterpret_cast<std::byte*>(const_cast<float*>(values.data())), values.size() * sizeof(float)};
    }
  };
  const auto user = std::make_shared<HostVector>();
  DLManagedTensor* exported = ToDLPack(user);
  BOOST_TEST(exported->dl_tensor.data == user->values.data());
  const TensorPtr back = FromDLPack(exported);
  BOOST_TEST(back->ToFloatVector() == user->values, boost::test_tools::per_element());
}

// A user's tensor whose host bytes are not exactly its elements (fewer bytes than Size() of
// them, or a shape of another element count) is refused: the receiver would read the shape's
// elements past the bytes.
BOOST_AUTO_TEST_CASE(UserTensorsWhoseBytesAreNotTheirElementsDoNotExport) {
  struct ShortBytes final : ITensor {
    std::vector<float> values{1.0f, 2.0f, 3.0f, 4.0f};
    Shape shape{4};
    std::size_t bytes = 2 * sizeof(float);
    DataType GetDataType() const override { return DataType::Float32; }
    Device GetDevice() const override { return Device::CPU(); }
    const Shape& GetShape() const override { return shape; }
    std::size_t Size() const override { return 4; }
    std::vector<float> ToFloatVector() const override { return values; }
    void CopyFromFloats(std::span<const float>) override {}

   protected:
    std::span<std::byte> HostStorage() const noexcept override {
      return {reinterpret_cast<std::byte*>(const_cast<float*>(values.data())), bytes};
    }
  };
  const auto user = std::make_shared<ShortBytes>();
  BOOST_CHECK_EXCEPTION(ToDLPack(user), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensor"; });
  user->bytes = 4 * sizeof(float);
  user->shape = {2, 3};  // 6 elements over 4
  BOOST_CHECK_EXCEPTION(ToDLPack(user), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensor"; });
  user->shape = {2, 2};
  DLManagedTensor* exported = ToDLPack(user);
  BOOST_TEST(exported->dl_tensor.data == user->values.data());
  exported->deleter(exported);
}

BOOST_AUTO_TEST_CASE(ExportKeepsTheTensorAlive) {
  std::weak_ptr<ITensor> watch;
  DLManagedTensor* exported = nullptr;
  {
    const TensorPtr tensor = Zeros({4}, DataType::Float32);
    watch = tensor;
    exported = ToDLPack(tensor);
  }
  BOOST_TEST(!watch.expired());
  exported->deleter(exported);
  BOOST_TEST(watch.expired());
}

BOOST_AUTO_TEST_SUITE_END()
