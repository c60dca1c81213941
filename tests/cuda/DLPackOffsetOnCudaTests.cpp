// FromDLPack() of CUDA memory with a byte_offset, as a framework hands over a slice of its own
// storage: the tensor reads and writes the slice, nothing before or after it, and the capsule's
// deleter runs once, when the last reference is gone. Needs a CUDA device.
#include <cstddef>
#include <memory>
#include <numeric>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"
#include "cuda/DLPackWindow.hpp"

using namespace mlframework;
using mlfw_cuda_test::DLPackWindow;
using mlfw_cuda_test::kGpu;

BOOST_AUTO_TEST_SUITE(CudaDLPackOffset)

BOOST_AUTO_TEST_CASE(SliceAtByteOffsetReadsAndWritesOnlyTheSlice) {
  for (const DataType dtype : mlfw_cuda_test::kDtypes) {
    BOOST_TEST_CONTEXT("dtype " << static_cast<int>(dtype)) {
      std::vector<float> values(16);
      std::iota(values.begin(), values.end(), 1.0f);
      const TensorPtr storage = FromVector(values, {values.size()}, dtype, kGpu);
      auto deleter_calls = std::make_shared<int>(0);
      constexpr std::size_t kFirst = 5;
      constexpr std::size_t kCount = 6;
      TensorPtr slice = FromDLPack(DLPackWindow(storage, kFirst, kCount, deleter_calls));
      BOOST_TEST(slice->Size() == kCount);

      const std::vector<float> read = slice->ToFloatVector();
      const std::vector<float> expected_read(values.begin() + kFirst, values.begin() + kFirst + kCount);
      BOOST_TEST(read == expected_read, boost::test_tools::per_element());

      // Small integers times 2 are exact in every dtype here.
      ScaleInPlace(std::vector<TensorPtr>{slice}, 2.0f);
      std::vector<float> expected = values;
      for (std::size_t i = kFirst; i < kFirst + kCount; ++i) {
        expected[i] *= 2.0f;
      }
      const std::vector<float> after = storage->ToFloatVector();
      BOOST_TEST(after == expected, boost::test_tools::per_element());

      BOOST_TEST(*deleter_calls == 0);
      slice.reset();
      BOOST_TEST(*deleter_calls == 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(OffsetThatSplitsAnElementIsRefusedAndLeavesTheCapsule) {
  const TensorPtr storage = Zeros({8}, DataType::Float32, kGpu);
  auto deleter_calls = std::make_shared<int>(0);
  DLManagedTensor* managed = DLPackWindow(storage, 1, 4, deleter_calls);
  managed->dl_tensor.byte_offset = 2;  // half a float
  BOOST_CHECK_THROW(FromDLPack(managed), ArgumentError);
  BOOST_TEST(*deleter_calls == 0);  // refused: the caller still owns it
  managed->deleter(managed);
  BOOST_TEST(*deleter_calls == 1);
}

BOOST_AUTO_TEST_SUITE_END()
