// Tensor factories, per-tensor operations and argument errors.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>

using namespace mlframework;

BOOST_AUTO_TEST_SUITE(TensorBasics)

BOOST_AUTO_TEST_CASE(FactoriesRoundIntoTheDtype) {
  const auto t = FromVector({1.0f, 1.0009765625f, 1.00048828125f, 70000.0f}, {2, 2}, DataType::Float16);
  BOOST_TEST((t->GetShape() == Shape{2, 2}));
  BOOST_TEST(t->Size() == 4u);
  BOOST_TEST(t->GetDevice() == Device::CPU());
  const auto v = t->ToFloatVector();
  BOOST_TEST(v[1] == 1.0009765625f);
  BOOST_TEST(v[2] == 1.0f);  // tie rounds to even
  BOOST_TEST(std::isinf(v[3]));
  BOOST_TEST(t->HasInf());
  BOOST_TEST(!t->HasNaN());
  const auto z = Zeros({3}, DataType::BFloat16);
  BOOST_TEST(z->SumOfSquares() == 0.0);
  BOOST_TEST(Scalar(2.0f)->Size() == 1u);
}

BOOST_AUTO_TEST_CASE(OperationsMakeNewTensorsOrWorkInPlace) {
  const auto t = FromVector({1.0f, -2.0f, 3.0f}, {3}, DataType::BFloat16);
  const auto doubled = t->Multiply(2.0f);
  BOOST_TEST(doubled->ToFloatVector()[1] == -4.0f);
  BOOST_TEST(t->ToFloatVector()[1] == -2.0f);
  const auto halved = t->Divide(2.0f);
  BOOST_TEST(halved->ToFloatVector()[2] == 1.5f);
  t->MultiplyInPlace(4.0f);
  BOOST_TEST(t->ToFloatVector()[0] == 4.0f);
  const auto f32 = t->CastTo(DataType::Float32);
  BOOST_TEST((f32->GetDataType() == DataType::Float32));
  BOOST_TEST(f32->SumOfSquares() == 16.0 + 64.0 + 144.0);
  BOOST_TEST(t->Clone()->ToFloatVector() == t->ToFloatVector());
}

BOOST_AUTO_TEST_CASE(BadArgumentsNameTheParameter) {
  try {
    (void)FromVector({1.0f, 2.0f}, {3});
    BOOST_FAIL("expected ArgumentError");
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == "values");
    BOOST_TEST(std::string(error.what()).find("[3]") != std::string::npos);
  }
  BOOST_CHECK_THROW((void)FromVector({1.0f}, {1})->Divide(0.0f), ArgumentError);
  BOOST_CHECK_THROW((void)Zeros({1}, static_cast<DataType>(9)), ArgumentError);
  const TensorPtr list[] = {nullptr};
  BOOST_CHECK_THROW(HasNonFinite(list), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(StorageIsZeroedAndCacheLineAligned) {
  // The SIMD kernels count on 64-byte aligned tensors (full-register loads and
  // non-temporal stores within one cache line); sizes that are not multiples of 64 bytes too.
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{3} << 18}) {
      const auto t = backends::cpu::Empty({n}, dtype);
      BOOST_TEST(reinterpret_cast<std::uintptr_t>(backends::cpu::Data(*t)) % 64 == 0u);
      const auto values = t->ToFloatVector();
      BOOST_TEST(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
    }
  }
}

BOOST_AUTO_TEST_CASE(ViewsShareMemoryAndCheckBounds) {
  const auto flat = FromVector({1, 2, 3, 4, 5, 6}, {6}, DataType::Float16);
  const auto view = backends::cpu::View(flat, 2, {2, 2});
  BOOST_TEST(view->ToFloatVector() == (std::vector<float>{3, 4, 5, 6}));
  view->MultiplyInPlace(2.0f);
  BOOST_TEST(flat->ToFloatVector() == (std::vector<float>{1, 2, 6, 8, 10, 12}));
  BOOST_CHECK_THROW((void)backends::cpu::View(flat, 3, {4}), ArgumentError);
  BOOST_CHECK_THROW((void)backends::cpu::View(nullptr, 0, {1}), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(ContiguousTensorsArePackedAndIndependent) {
  const std::vector<Shape> shapes{{3}, {}, {0}, {2, 5}, {1000}, {1}};
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const std::size_t element = ElementSize(dtype);
    auto tensors = ZerosContiguous(shapes, dtype);
    BOOST_TEST_REQUIRE(tensors.size() == shapes.size());
    const auto* previous_end = static_cast<const std::byte*>(backends::cpu::Data(*tensors[0]));
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(previous_end) % 64 == 0u);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      BOOST_TEST((tensors[i]->GetShape() == shapes[i]));
      BOOST_TEST((tensors[i]->GetDataType() == dtype));
      BOOST_TEST(tensors[i]->GetDevice() == Device::CPU());
      // Back to back, no padding: each tensor starts where the previous one ends.
      const auto* start = static_cast<const std::byte*>(backends::cpu::Data(*tensors[i]));
      BOOST_TEST(start == previous_end);
      previous_end = start + tensors[i]->Size() * element;
      const auto values = tensors[i]->ToFloatVector();
      BOOST_TEST(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
    }
    // Writes stay inside their own tensor.
    tensors[3]->CopyFromFloats(std::vector<float>(10, 1.0f));
    BOOST_TEST(tensors[0]->SumOfSquares() == 0.0);
    BOOST_TEST(tensors[4]->SumOfSquares() == 0.0);
    BOOST_TEST(tensors[3]->SumOfSquares() == 10.0);
    // The buffer lives while any one of its tensors does.
    const TensorPtr last = tensors.back();
    tensors.clear();
    last->CopyFromFloats(std::vector<float>{2.0f});
    BOOST_TEST(last->ToFloatVector() == (std::vector<float>{2.0f}));
  }
  BOOST_TEST(ZerosContiguous({}, DataType::Float16).empty());
}

BOOST_AUTO_TEST_CASE(ContiguousTensorsRunTheFusedKernelsLikeSeparateOnes) {
  std::vector<Shape> shapes;
  std::vector<TensorPtr> separate;
  for (std::size_t i = 0; i < 300; ++i) {
    const std::size_t n = 1 + (i * 37) % 301;
    shapes.push_back({n});
    std::vector<float> values(n);
    for (std::size_t k = 0; k < n; ++k) {
      values[k] = static_cast<float>((i + k) % 17) - 8.0f;
    }
    separate.push_back(FromVector(values, {n}, DataType::BFloat16));
  }
  const auto packed = ZerosContiguous(shapes, DataType::BFloat16);
  CastInto(separate, packed);
  BOOST_TEST(SumOfSquares(packed) == SumOfSquares(separate));
  BOOST_TEST(!UnscaleAndCheck(packed, 0.5f));
  BOOST_TEST(!UnscaleAndCheck(separate, 0.5f));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    BOOST_TEST(packed[i]->ToFloatVector() == separate[i]->ToFloatVector());
  }
  separate.back()->CopyFromFloats(std::vector<float>(separate.back()->Size(), INFINITY));
  CastInto(separate, packed);
  BOOST_TEST(HasNonFinite(packed));
  BOOST_TEST(!HasNonFinite(std::span<const TensorPtr>(packed).first(packed.size() - 1)));
}

BOOST_AUTO_TEST_CASE(ContiguousLikeFollowsShapesAndRejectsBadInput) {
  const std::vector<TensorPtr> like{Zeros({4, 2}, DataType::Float16), Scalar(1.0f), Zeros({7}, DataType::BFloat16)};
  const auto tensors = ZerosContiguousLike(like, DataType::Float32);
  BOOST_TEST_REQUIRE(tensors.size() == like.size());
  for (std::size_t i = 0; i < like.size(); ++i) {
    BOOST_TEST((tensors[i]->GetShape() == like[i]->GetShape()));
    BOOST_TEST((tensors[i]->GetDataType() == DataType::Float32));
  }
  BOOST_TEST(static_cast<const float*>(backends::cpu::Data(*tensors[1])) ==
             static_cast<const float*>(backends::cpu::Data(*tensors[0])) + 8);
  try {
    const std::vector<TensorPtr> with_null{like[0], nullptr};
    (void)ZerosContiguousLike(with_null, DataType::Float32);
    BOOST_FAIL("expected ArgumentNullError");
  } catch (const ArgumentNullError& error) {
    BOOST_TEST(error.Parameter() == "like[1]");
  }
  try {
    (void)ZerosContiguous({{4}}, static_cast<DataType>(9));
    BOOST_FAIL("expected ArgumentError");
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == "dtype");
  }
  try {
    const std::size_t half = std::numeric_limits<std::size_t>::max() / 2;
    (void)ZerosContiguous({{half}, {half}, {2}}, DataType::Float32);
    BOOST_FAIL("expected ArgumentError");
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == "shapes");
  }
}

BOOST_AUTO_TEST_CASE(HostBytesAreTheElementsOfHostTensors) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const auto flat = FromVector({1, 2, 3, 4, 5, 6}, {2, 3}, dtype);
    const std::span<const std::byte> bytes = std::as_const(*flat).HostBytes();
    BOOST_TEST(static_cast<const void*>(bytes.data()) == backends::cpu::Data(*flat));
    BOOST_TEST(bytes.size() == 6 * ElementSize(dtype));
    // A view's bytes are its part of the base's memory; writes through them are the elements.
    const auto view = backends::cpu::View(flat, 2, {3});
    const std::span<std::byte> part = view->MutableHostBytes();
    BOOST_TEST(part.data() == flat->MutableHostBytes().data() + 2 * ElementSize(dtype));
    BOOST_TEST(part.size() == 3 * ElementSize(dtype));
    const auto seven = FromVector({7}, {1}, dtype);
    std::memcpy(part.data(), seven->HostBytes().data(), ElementSize(dtype));
    BOOST_TEST(flat->ToFloatVector() == (std::vector<float>{1, 2, 7, 4, 5, 6}));
    BOOST_TEST(Zeros({0}, dtype)->HostBytes().empty());
  }
}

BOOST_AUTO_TEST_CASE(CudaTensorsWithoutTheBackendRaiseBackendError) {
  if (MLFW_HAS_CUDA) {
    return;  // covered by the CUDA conformance suite
  }
  BOOST_CHECK_THROW((void)Zeros({4}, DataType::Float16, Device::CUDA(0)), BackendError);
}

BOOST_AUTO_TEST_SUITE_END()
