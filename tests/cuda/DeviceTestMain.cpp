// Main of the tests that need a CUDA device: without one (no driver, no GPU,
// or a build without the backend) it says why and exits 77, which CTest
// reports as Skipped (SKIP_RETURN_CODE), so CI stays green and the skip is visible.
#include <iostream>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>

namespace {

constexpr int kSkipReturnCode = 77;

bool InitUnitTest() { return true; }

}  // namespace

int main(int argc, char* argv[]) {
  namespace cuda = mlframework::backends::cuda;
  if (!cuda::IsAvailable()) {
    std::cout << "SKIPPED: no usable CUDA device: " << cuda::UnavailableReason() << '\n';
    return kSkipReturnCode;
  }
  std::cout << "CUDA device 0: " << cuda::DeviceName(0) << " (" << cuda::DeviceCount() << " device(s))\n";
  return boost::unit_test::unit_test_main(&InitUnitTest, argc, argv);
}
