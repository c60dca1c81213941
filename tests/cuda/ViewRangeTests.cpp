// The host bookkeeping of CUDA views (ViewByteOffset), run without a GPU: byte offsets for
// every dtype size, the last element, an empty view at the end, and clear errors for views
// that run past the tensor (including offsets whose sums would wrap around).
#include <cstddef>
#include <limits>
#include <string>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/ViewRange.hpp"

using namespace mlframework;
namespace cu = mlframework::backends::cuda;

BOOST_AUTO_TEST_SUITE(CudaViewRange)

BOOST_AUTO_TEST_CASE(OffsetsAreInBytes) {
  BOOST_TEST(cu::ViewByteOffset(10, 4, 0, 10) == 0u);
  BOOST_TEST(cu::ViewByteOffset(10, 4, 3, 4) == 12u);
  BOOST_TEST(cu::ViewByteOffset(10, 2, 9, 1) == 18u);
  BOOST_TEST(cu::ViewByteOffset(10, 2, 10, 0) == 20u);  // an empty view at the end is fine
}

BOOST_AUTO_TEST_CASE(ViewsPastTheEndAreArgumentErrors) {
  BOOST_CHECK_THROW(cu::ViewByteOffset(10, 4, 8, 3), ArgumentError);
  BOOST_CHECK_THROW(cu::ViewByteOffset(10, 4, 11, 0), ArgumentError);
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  BOOST_CHECK_THROW(cu::ViewByteOffset(10, 4, 2, huge), ArgumentError);  // offset + count wraps
  BOOST_CHECK_THROW(cu::ViewByteOffset(10, 4, huge, 1), ArgumentError);
  try {
    cu::ViewByteOffset(6, 2, 4, 3);
    BOOST_FAIL("expected an ArgumentError");
  } catch (const ArgumentError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("3 elements at offset 4") != std::string::npos);
    BOOST_TEST(message.find("6 elements") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
