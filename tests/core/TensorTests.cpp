// Tensor factories, per-tensor operations and argument errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

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

BOOST_AUTO_TEST_CASE(CudaTensorsWithoutTheBackendRaiseBackendError) {
  if (MLFW_HAS_CUDA) {
    return;  // covered by the CUDA conformance suite
  }
  BOOST_CHECK_THROW((void)Zeros({4}, DataType::Float16, Device::CUDA(0)), BackendError);
}

BOOST_AUTO_TEST_SUITE_END()
