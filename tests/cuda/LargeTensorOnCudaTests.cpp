// A CUDA tensor of more than 2^31 elements: every fused pass reaches the elements whose index
// does not fit a 32-bit int (4 GiB of FP16 on the device). Needs a CUDA device.
#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"
#include "cuda/DLPackWindow.hpp"

using namespace mlframework;
using mlfw_cuda_test::DLPackWindow;
using mlfw_cuda_test::kGpu;

namespace {

constexpr std::size_t kTwoTo31 = std::size_t{1} << 31;
constexpr std::size_t kElements = kTwoTo31 + 1000;

// A view of @p count elements of @p big from element @p first (DLPack with a byte_offset).
TensorPtr Slice(const TensorPtr& big, std::size_t first, std::size_t count) {
  return FromDLPack(DLPackWindow(big, first, count, nullptr));
}

void Write(const TensorPtr& big, std::size_t first, const std::vector<float>& values) {
  CopyInto(std::vector<TensorPtr>{FromVector(values, {values.size()}, DataType::Float16, kGpu)},
           std::vector<TensorPtr>{Slice(big, first, values.size())});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaLargeTensor)

BOOST_AUTO_TEST_CASE(PassesReachElementsPastTwoToThe31) {
  const TensorPtr big = Zeros({kElements}, DataType::Float16, kGpu);
  BOOST_TEST(big->Size() == kElements);
  const std::vector<TensorPtr> list = {big};
  Write(big, 0, {4.0f});
  Write(big, kTwoTo31 + 500, {2.0f, -6.0f, 8.0f, 1.0f});

  // The largest value sits past 2^31: an index that wraps to 32 bits misses it.
  const NonFiniteAndAmax checked = CheckAndAmax(list);
  BOOST_TEST(!checked.FoundNonFinite);
  BOOST_TEST(checked.Amax == 8.0f);

  BOOST_TEST(!UnscaleAndCheck(list, 0.5f));
  BOOST_TEST(Slice(big, 0, 1)->ToFloatVector() == std::vector<float>{2.0f}, boost::test_tools::per_element());
  BOOST_TEST(Slice(big, kTwoTo31 + 500, 4)->ToFloatVector() == (std::vector<float>{1.0f, -3.0f, 4.0f, 0.5f}),
             boost::test_tools::per_element());

  // An Inf in the very last element is found by the check and by the unscale pass.
  Write(big, kElements - 1, {std::numeric_limits<float>::infinity()});
  BOOST_TEST(HasNonFinite(list));
  BOOST_TEST(UnscaleAndCheck(list, 1.0f));
  BOOST_TEST(CheckAndAmax(list).Amax == 4.0f);
}

BOOST_AUTO_TEST_SUITE_END()
