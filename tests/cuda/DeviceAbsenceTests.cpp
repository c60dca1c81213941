// What a machine without a CUDA driver or GPU (or a build without the backend)
// sees: clear errors, never a crash. On a GPU machine: clear errors for a
// device that does not exist.
#include <string>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>

using namespace mlframework;
namespace cuda = mlframework::backends::cuda;

namespace {

bool MessageNames(const Error& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaDeviceAbsence)

BOOST_AUTO_TEST_CASE(BuildFlagMatchesConfig) {
  BOOST_TEST(cuda::IsBuilt() == (MLFW_HAS_CUDA == 1));
  BOOST_TEST(cuda::IsAvailable() == (cuda::DeviceCount() > 0));
  BOOST_TEST(cuda::UnavailableReason().empty() == cuda::IsAvailable());
  BOOST_TEST_MESSAGE("CUDA devices: " << cuda::DeviceCount() << " " << cuda::UnavailableReason());
}

BOOST_AUTO_TEST_CASE(MissingDeviceGivesBackendErrorNamingIt) {
  const int missing = cuda::DeviceCount();  // the first ordinal that does not exist
  const Device device = Device::CUDA(missing);
  BOOST_CHECK_EXCEPTION(Zeros({4}, DataType::Float16, device), BackendError,
                        [&](const BackendError& e) { return MessageNames(e, device.ToString()); });
  BOOST_CHECK_EXCEPTION(FromVector({1.0f, 2.0f}, {2}, DataType::Float32, device), BackendError,
                        [&](const BackendError& e) { return MessageNames(e, device.ToString()); });
  BOOST_CHECK_THROW(cuda::Synchronize(missing), BackendError);
  BOOST_CHECK_THROW(cuda::DeviceName(missing), BackendError);
  if (!cuda::IsAvailable()) {
    BOOST_CHECK_EXCEPTION(Scalar(1.0f, DataType::BFloat16, Device::CUDA(0)), BackendError,
                          [&](const BackendError& e) { return MessageNames(e, cuda::UnavailableReason()); });
  }
}

BOOST_AUTO_TEST_CASE(InvalidArgumentsAreArgumentErrors) {
  BOOST_CHECK_EXCEPTION(cuda::Empty({2}, DataType::Float32, -1), Error, [](const Error& e) {
    // A negative ordinal is the caller's mistake (ArgumentError) in a CUDA build.
    return cuda::IsBuilt() ? dynamic_cast<const ArgumentError*>(&e) != nullptr
                           : dynamic_cast<const BackendError*>(&e) != nullptr;
  });
  const TensorPtr cpu = Zeros({2});
  BOOST_TEST(!cuda::IsCudaTensor(*cpu));
  BOOST_CHECK_THROW(cuda::DevicePointer(*cpu), ArgumentError);
}

BOOST_AUTO_TEST_CASE(BackendObjectExistsWithoutDevice) {
  if (!cuda::IsBuilt()) {
    BOOST_CHECK_THROW(cuda::Backend(), BackendError);
    return;
  }
  const DeviceScalingBackend& backend = cuda::Backend();
  BOOST_TEST(backend.Name() == "cuda");
  // A CPU tensor handed to the CUDA backend is rejected by name, before any device work.
  TensorPtr cpu = Zeros({2});
  ITensor* pointer = cpu.get();
  BOOST_CHECK_EXCEPTION(backend.Scale({&pointer, 1}, 2.0f), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensors[0]"; });
  BOOST_CHECK_THROW(backend.CreateScaleState(Device::CPU(), amp::ScalePolicy{}, amp::ScaleState{}), ArgumentError);
  BOOST_TEST(DeviceScalingOf(*cpu) == nullptr);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(NcclWithoutDevice)

BOOST_AUTO_TEST_CASE(FactoryThrowsBackendErrorForAMissingDevice) {
  using namespace mlframework::distributed;
  // Ordinal DeviceCount() never exists: BackendError (no device, no NCCL, or no CUDA backend).
  BOOST_CHECK_THROW(MakeNcclProcessGroup(NcclUniqueId{}, 0, 1, {.Device = cuda::DeviceCount()}), BackendError);
  if (!cuda::IsAvailable()) {
    BOOST_CHECK_THROW(MakeNcclProcessGroup(NcclUniqueId{}, 0, 1), BackendError);
  }
}

BOOST_AUTO_TEST_SUITE_END()
