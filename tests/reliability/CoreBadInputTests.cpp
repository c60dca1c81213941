// Bad input to the core entry points (tensor factories, multi-tensor
// functions, the CPU backend's queries and views): every case gets the
// documented exception type naming the parameter, and no tensor changes.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "NonFinite.hpp"
#include "reliability/BadInputSupport.hpp"

using namespace mlframework;
using mlframework::testing::ExpectError;
using mlframework::testing::Snapshot;
using mlfw_test::kInf;
using mlfw_test::kNaN;

namespace {

constexpr auto kBadDtype = static_cast<DataType>(7);

// A framework's own tensor: no fused backend, claims whatever device it is given.
class ForeignTensor final : public ITensor {
 public:
  ForeignTensor(std::vector<float> values, Device device) : values_(std::move(values)), device_(device) {
    shape_ = {values_.size()};
  }
  DataType GetDataType() const override { return DataType::Float32; }
  Device GetDevice() const override { return device_; }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return values_.size(); }
  std::vector<float> ToFloatVector() const override { return values_; }
  void CopyFromFloats(std::span<const float> values) override {
    if (values.size() != values_.size()) {
      throw ArgumentError("values", "size mismatch");
    }
    values_.assign(values.begin(), values.end());
  }

 private:
  std::vector<float> values_;
  Shape shape_;
  Device device_;
};

std::vector<TensorPtr> SomeTensors() {
  return {FromVector({1.0f, 2.0f, 3.0f}, {3}, DataType::Float16), FromVector({-4.0f, 5.0f}, {2}),
          FromVector({6.0f, 7.0f, 8.0f, 9.0f}, {2, 2}, DataType::BFloat16)};
}

// Runs a call that must fail on @p tensors and checks every tensor kept its values.
template <typename Expected>
void ExpectUnchanged(const std::vector<TensorPtr>& tensors, const std::function<void()>& call,
                     const std::string& parameter) {
  const auto before = Snapshot(tensors);
  ExpectError<Expected>(call, parameter);
  BOOST_TEST((Snapshot(tensors) == before), "a failed call changed a tensor (parameter " << parameter << ")");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CoreBadInput)

BOOST_AUTO_TEST_CASE(FactoriesRejectBadShapesDtypesAndDevices) {
  ExpectError<ArgumentError>([] { (void)FromVector({1.0f, 2.0f}, {3}); }, "values");
  ExpectError<ArgumentError>([] { (void)FromVector({}, {}); }, "values");  // a scalar needs one value
  ExpectError<ArgumentError>([] { (void)FromVector({1.0f}, {1}, kBadDtype); }, "dtype");
  ExpectError<ArgumentError>([] { (void)Zeros({2}, kBadDtype); }, "dtype");
  ExpectError<ArgumentError>([] { (void)Scalar(1.0f, kBadDtype); }, "dtype");
  ExpectError<ArgumentError>([] { (void)Zeros({SIZE_MAX, 2}); }, "shape");
  ExpectError<ArgumentError>([] { (void)Zeros({std::size_t{1} << 32, std::size_t{1} << 32, 2}); }, "shape");
  ExpectError<ArgumentError>([] { (void)FromVector({1.0f}, {SIZE_MAX, SIZE_MAX}); }, "shape");
  // Element count fits size_t but the bytes do not: must not wrap into a small buffer.
  ExpectError<ArgumentError>([] { (void)Zeros({std::size_t{1} << 62}, DataType::Float32); }, "shape");
  ExpectError<ArgumentError>([] { (void)backends::cpu::Empty({SIZE_MAX / 2 + 1}, DataType::Float16); }, "shape");
  ExpectError<ArgumentError>([] { (void)backends::cpu::Empty({2}, kBadDtype); }, "dtype");
  if (!MLFW_HAS_CUDA) {
    ExpectError<BackendError>([] { (void)Zeros({2}, DataType::Float32, Device::CUDA(0)); });
    ExpectError<BackendError>([] { (void)FromVector({1.0f}, {1}, DataType::Float16, Device::CUDA(3)); });
  }
  // Zero-size tensors are valid and inert.
  const TensorPtr empty = Zeros({0, 5}, DataType::BFloat16);
  BOOST_TEST(empty->Size() == 0U);
  BOOST_TEST(!empty->HasNonFinite());
  BOOST_TEST(empty->SumOfSquares() == 0.0);
}

BOOST_AUTO_TEST_CASE(MultiTensorFunctionsRejectNullsAndMismatches) {
  const auto tensors = SomeTensors();
  std::vector<TensorPtr> with_null = tensors;
  with_null.insert(with_null.begin() + 2, nullptr);
  // A null anywhere is reported before any tensor is touched.
  ExpectUnchanged<ArgumentNullError>(
      tensors, [&] { (void)UnscaleAndCheck(with_null, 0.5f); }, "tensors[2]");
  ExpectUnchanged<ArgumentNullError>(
      tensors, [&] { ScaleInPlace(with_null, 3.0f); }, "tensors[2]");
  ExpectUnchanged<ArgumentNullError>(
      tensors, [&] { (void)HasNonFinite(with_null); }, "tensors[2]");
  ExpectUnchanged<ArgumentNullError>(
      tensors, [&] { (void)SumOfSquares(with_null); }, "tensors[2]");
  ExpectUnchanged<ArgumentNullError>(
      tensors, [&] { (void)CheckAndSumSquares(with_null, 2.0f); }, "tensors[2]");
  ExpectUnchanged<ArgumentNullError>(
      tensors, [&] { (void)Cast(with_null, DataType::Float32); }, "src[2]");

  // CastInto validates every pair before writing any destination.
  auto dst = Cast(tensors, DataType::Float32, 0.0f);
  ExpectUnchanged<ArgumentNullError>(
      dst, [&] { (void)CastInto(with_null, dst); }, "src[2]");
  std::vector<TensorPtr> dst_with_null = dst;
  dst_with_null[1] = nullptr;
  ExpectUnchanged<ArgumentNullError>(
      dst, [&] { (void)CastInto(tensors, dst_with_null); }, "dst[1]");
  const std::vector<TensorPtr> short_dst(dst.begin(), dst.end() - 1);
  ExpectUnchanged<ArgumentError>(
      dst, [&] { (void)CastInto(tensors, short_dst); }, "dst");
  std::vector<TensorPtr> wrong_shape = dst;
  wrong_shape[2] = Zeros({4});  // same size, different shape
  ExpectUnchanged<ArgumentError>(
      dst, [&] { (void)CastInto(tensors, wrong_shape); }, "dst[2]");
  wrong_shape[2] = Zeros({3, 3});
  ExpectUnchanged<ArgumentError>(
      dst, [&] { (void)CastInto(tensors, wrong_shape); }, "dst[2]");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)Cast(tensors, kBadDtype); }, "dtype");

  GradientMap gradients{{"a", tensors[0]}, {"b", nullptr}};
  ExpectError<ArgumentNullError>([&] { (void)TensorList(gradients); }, "gradients[\"b\"]");

  // Empty lists and zero-size tensors are valid no-ops.
  const std::vector<TensorPtr> none;
  BOOST_TEST(!UnscaleAndCheck(none, 2.0f));
  BOOST_TEST(!HasNonFinite(none));
  BOOST_TEST(SumOfSquares(none) == 0.0);
  BOOST_TEST(TensorList(GradientMap{}).empty());
  BOOST_TEST(Cast(none, DataType::Float16).empty());
  const std::vector<TensorPtr> zero_size = {Zeros({0}, DataType::Float16), Zeros({3, 0})};
  BOOST_TEST(!UnscaleAndCheck(zero_size, kInf));
  BOOST_TEST(!CastInto(zero_size, Cast(zero_size, DataType::Float32)));
}

BOOST_AUTO_TEST_CASE(NonFiniteFactorsAreReportedNotHidden) {
  // A NaN or infinite factor is not an argument error (the scalers pass 1/scale,
  // and a user may pass anything), but it must never be reported as clean.
  for (const float factor : {kNaN, kInf, -kInf}) {
    const auto tensors = SomeTensors();
    BOOST_TEST(UnscaleAndCheck(tensors, factor));
    BOOST_TEST(HasNonFinite(tensors));
    BOOST_TEST(CastInto(SomeTensors(), Cast(SomeTensors(), DataType::Float32), factor));
    // The flag describes the gradients themselves; the sum of (factor * x)^2 carries the factor.
    const NonFiniteAndNorm check = CheckAndSumSquares(SomeTensors(), factor);
    BOOST_TEST((check.FoundNonFinite || !std::isfinite(check.SumOfSquares)));
    BOOST_TEST(!std::isfinite(SumOfSquares(SomeTensors(), factor)));
  }
}

BOOST_AUTO_TEST_CASE(PerTensorOperationsRejectBadValues) {
  const auto tensors = SomeTensors();
  for (const float divisor : {0.0f, -0.0f, kNaN, kInf, -kInf}) {
    ExpectUnchanged<ArgumentError>(
        tensors, [&] { (void)tensors[0]->Divide(divisor); }, "divisor");
  }
  const std::vector<float> wrong_count(5, 1.0f);
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { tensors[1]->CopyFromFloats(wrong_count); }, "values");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { tensors[1]->CopyFromFloats({}); }, "values");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)tensors[2]->CastTo(kBadDtype); }, "dtype");
}

BOOST_AUTO_TEST_CASE(CpuQueriesAndViewsRejectForeignAndOutOfRange) {
  using namespace backends::cpu;
  const auto tensors = SomeTensors();
  const TensorPtr base = tensors[2];  // 4 BF16 elements
  ExpectError<ArgumentNullError>([] { (void)View(nullptr, 0, {1}); }, "base");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)View(base, 0, {5}); }, "shape");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)View(base, 3, {2}); }, "shape");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)View(base, 5, {0}); }, "shape");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)View(base, SIZE_MAX, {1}); }, "shape");
  ExpectUnchanged<ArgumentError>(
      tensors, [&] { (void)View(base, 1, {SIZE_MAX}); }, "shape");
  ExpectUnchanged<ArgumentError>(
      tensors,
      [&] {
        (void)View(base, 0, {SIZE_MAX, 2});
      },
      "shape");
  BOOST_TEST(View(base, 4, {0})->Size() == 0U);  // an empty view at the end is valid

  const auto foreign = std::make_shared<ForeignTensor>(std::vector<float>{1.0f, 2.0f}, Device::CUDA(1));
  BOOST_TEST(!IsCpuTensor(*foreign));
  ExpectError<ArgumentError>([&] { (void)View(foreign, 0, {1}); }, "tensor");
  ExpectError<ArgumentError>([&] { (void)Data(*foreign); }, "tensor");
  ExpectError<ArgumentError>([&] { (void)MutableData(*foreign); }, "tensor");
  ExpectError<ArgumentError>([&] { (void)Elements<DataType::Float32>(*foreign); }, "tensor");
  ExpectError<ArgumentError>([&] { (void)Elements<DataType::Float16>(*tensors[1]); }, "tensor");  // dtype mismatch
  ExpectError<ArgumentError>([&] { (void)Elements<DataType::Float32>(*tensors[0]); }, "tensor");

  // Foreign tensors (no fused backend) still work through the per-tensor fallback,
  // also mixed with CPU tensors in one list.
  const std::vector<TensorPtr> mixed = {tensors[0], foreign};
  BOOST_TEST(!HasNonFinite(mixed));
  BOOST_TEST(SumOfSquares(mixed) == 1.0 + 4.0 + 9.0 + 1.0 + 4.0);

  // Long lists are checked and planned on every thread: a foreign tensor deep in the second
  // thread's range still gives the clear error from the CPU backend (no exception may leave an
  // OpenMP region), leaves every tensor as it was, and takes the front-end's fallback.
  std::vector<TensorPtr> long_list(3000);
  for (TensorPtr& t : long_list) {
    t = FromVector({1.0f, 2.0f, 3.0f}, {3});
  }
  long_list[2500] = foreign;
  std::vector<TensorPtr> long_dst;
  long_dst.reserve(long_list.size());
  for (std::size_t i = 0; i < long_list.size(); ++i) {
    long_dst.push_back(Zeros({3}, DataType::Float16));
  }
  const TensorBackend& cpu = backends::cpu::Backend();
  ExpectUnchanged<ArgumentError>(
      long_list,
      [&] {
        (void)cpu.Write({long_list, true}, {}, {.Op = WriteOp::Scale, .Factor = 0.5f, .Check = true});
      },
      "tensor");
  ExpectUnchanged<ArgumentError>(
      long_list,
      [&] {
        (void)cpu.Read({long_list, true}, {});
      },
      "tensor");
  ExpectUnchanged<ArgumentError>(
      long_dst,
      [&] {
        (void)cpu.Write({long_list, true}, {long_dst, true}, {.Op = WriteOp::Cast, .Check = true});
      },
      "tensor");
  BOOST_TEST(SumOfSquares(long_list) == 2999.0 * 14.0 + 5.0);
  BOOST_TEST(!UnscaleAndCheck(long_list, 2.0f));
  BOOST_TEST(SumOfSquares(long_list) == 4.0 * (2999.0 * 14.0 + 5.0));
  BOOST_TEST_MESSAGE("CoreBadInput: " << mlframework::testing::BadInputCount() << " bad-input cases so far");
}

BOOST_AUTO_TEST_SUITE_END()
