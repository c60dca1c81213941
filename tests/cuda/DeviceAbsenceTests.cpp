// What a machine without a CUDA driver or GPU (or a build without the backend)
// sees: clear errors, never a crash. On a GPU machine: clear errors for a
// device that does not exist.
#include <span>
#include <string>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>

using namespace mlframework;
namespace cuda = mlframework::backends::cuda;

namespace {

bool MessageNames(const Error& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

// The whole ArgumentError: the parameter and the exact message.
auto IsArgumentError(const std::string& parameter, const std::string& message) {
  return [=](const ArgumentError& e) {
    return e.Parameter() == parameter && std::string(e.what()) == "invalid argument '" + parameter + "': " + message;
  };
}

// A scale state some other backend created: the CUDA backend must refuse it by name.
class ForeignScaleState final : public DeviceScaleState {
 public:
  Device GetDevice() const noexcept override { return Device::CPU(); }
  const amp::ScalePolicy& Policy() const noexcept override { return policy_; }
  amp::ScaleState Read() const override { return state_; }
  void Write(const amp::ScaleState& state) override { state_ = state; }
  bool FoundInf() const override { return false; }
  void MarkFoundInf() override {}
  void ClearFoundInf() override {}
  bool LastStepSkipped() const override { return false; }
  void FlagToTensor(TensorPtr& /*out*/) const override {}
  void FlagFromTensor(const ITensor& /*in*/) override {}
  float Amax() const override { return 0.0f; }
  void ClearAmax() override {}

 private:
  amp::ScalePolicy policy_{};
  amp::ScaleState state_{};
};

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

BOOST_AUTO_TEST_CASE(StreamGuardNeedsAValidDevice) {
  BOOST_CHECK_EXCEPTION(cuda::StreamGuard(nullptr, -2), ArgumentError, IsArgumentError("device", "-2 is negative"));
  const int missing = cuda::DeviceCount();
  BOOST_CHECK_EXCEPTION(cuda::StreamGuard(nullptr, missing), BackendError,
                        [&](const BackendError& e) { return MessageNames(e, Device::CUDA(missing).ToString()); });
  // A failed guard installs nothing.
  BOOST_TEST(cuda::CurrentExternalStream(missing) == nullptr);
  BOOST_TEST(cuda::CurrentExternalStream(0) == nullptr);
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
  BOOST_CHECK_EXCEPTION(backend.Write({{&cpu, 1}, true}, {}, {.Op = WriteOp::Scale, .Factor = 2.0f}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensors[0]"; });
  BOOST_CHECK_THROW(backend.CreateScaleState(Device::CPU(), amp::ScalePolicy{}, amp::ScaleState{}), ArgumentError);
  BOOST_TEST(DeviceScalingOf(*cpu) == nullptr);
}

// Every multi-tensor entry point checks its whole list before it asks for a device, so these
// errors are the same with or without a GPU.
BOOST_AUTO_TEST_CASE(EveryEntryPointRejectsForeignInputsByName) {
  if (!cuda::IsBuilt()) {
    return;
  }
  const DeviceScalingBackend& backend = cuda::Backend();
  TensorPtr cpu = Zeros({2});
  const auto not_cuda = IsArgumentError("tensors[0]", "is not a CUDA-backend tensor (device cpu)");
  const std::span<const TensorPtr> list{&cpu, 1};
  const WritePassOptions unscale{.Op = WriteOp::Scale, .Factor = 0.5f, .Check = true};
  BOOST_CHECK_EXCEPTION(backend.Write({list, true}, {}, unscale), ArgumentError, not_cuda);
  BOOST_CHECK_EXCEPTION(backend.Read({list, true}, {}), ArgumentError, not_cuda);
  BOOST_CHECK_EXCEPTION(backend.Read({list, true}, {.SumOfSquares = true}), ArgumentError, not_cuda);
  BOOST_CHECK_EXCEPTION(backend.Write({list, true}, {}, {.Op = WriteOp::Scale, .Factor = 2.0f}), ArgumentError,
                        not_cuda);
  const auto src_not_cuda = IsArgumentError("src[0]", "is not a CUDA-backend tensor (device cpu)");
  const auto write_pair = [&](WriteOp op, bool check) {
    return backend.Write({list, true}, {list, true}, {.Op = op, .Check = check});
  };
  BOOST_CHECK_EXCEPTION(write_pair(WriteOp::Cast, true), ArgumentError, src_not_cuda);
  BOOST_CHECK_EXCEPTION(write_pair(WriteOp::Cast, false), ArgumentError, src_not_cuda);
  BOOST_CHECK_EXCEPTION(write_pair(WriteOp::Add, false), ArgumentError, src_not_cuda);

  ForeignScaleState state;
  const auto foreign = IsArgumentError("state", "was not created by the CUDA backend (device cpu)");
  const WritePassOptions scale{.State = &state, .FactorOfState = StateFactor::Scale};
  BOOST_CHECK_EXCEPTION(backend.Write({list, true}, {}, scale), ArgumentError, foreign);
  BOOST_CHECK_EXCEPTION(backend.Write({list, true}, {}, {.State = &state}), ArgumentError, foreign);
  // The state is checked before the list sizes.
  BOOST_CHECK_EXCEPTION(backend.Write({list, true}, {}, {.Op = WriteOp::Cast, .State = &state}), ArgumentError,
                        foreign);
  BOOST_CHECK_EXCEPTION(backend.Read({list, true}, {.State = &state}), ArgumentError, foreign);
  BOOST_CHECK_EXCEPTION(backend.UpdateScale(state), ArgumentError, foreign);
}

// Empty lists launch nothing, so they need no device either.
BOOST_AUTO_TEST_CASE(EmptyListsNeedNoDevice) {
  if (!cuda::IsBuilt()) {
    return;
  }
  const DeviceScalingBackend& backend = cuda::Backend();
  BOOST_TEST(!backend.Write({{}, true}, {}, {.Op = WriteOp::Scale, .Factor = 0.5f, .Check = true})->FoundNonFinite);
  BOOST_TEST(!backend.Read({{}, true}, {})->FoundNonFinite);
  const ReadPassResult result = *backend.Read({{}, true}, {.SumOfSquares = true});
  BOOST_TEST(!result.FoundNonFinite);
  BOOST_TEST(result.SumOfSquares == 0.0);
  BOOST_CHECK_NO_THROW(backend.Write({{}, true}, {}, {.Op = WriteOp::Scale, .Factor = 2.0f}));
  BOOST_TEST(!backend.Write({{}, true}, {{}, true}, {.Op = WriteOp::Cast, .Check = true})->FoundNonFinite);
  BOOST_CHECK_NO_THROW(backend.Write({{}, true}, {{}, true}, {.Op = WriteOp::Cast}));
  BOOST_CHECK_NO_THROW(backend.Write({{}, true}, {{}, true}, {.Op = WriteOp::Add}));
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
