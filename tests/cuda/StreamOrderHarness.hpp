#pragma once
// Shared by the stream-order suites: runs entry points of the CUDA backend on the recording
// driver (backends/cuda/RecordingDriver.hpp) and fails on any stream-order violation.

#include <functional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/RecordingDriver.hpp"

namespace mlfw_stream_order {

using namespace mlframework;
namespace cuda = mlframework::backends::cuda;

inline const Device kGpu = Device::CUDA(0);

// Installs a recording driver for its lifetime (declare it before every tensor of the test).
struct Recorded {
  cuda::RecordingDriver driver;
  cuda::Driver* previous = cuda::InstallDriver(&driver);
  Recorded() = default;
  ~Recorded() { cuda::InstallDriver(previous); }
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;
};

inline std::string Joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& line : lines) {
    all += line + "\n";
  }
  return all;
}

inline void RequireOrdered(const Recorded& recorded) {
  const std::vector<std::string> violations = recorded.driver.Violations();
  BOOST_TEST(violations.empty(), "stream-order violations:\n" << Joined(violations));
  BOOST_TEST(recorded.driver.LaunchCount() > 0);  // the entry point did reach the driver
}

inline std::vector<TensorPtr> List(DataType dtype, std::size_t count = 3) {
  std::vector<TensorPtr> list;
  for (std::size_t i = 0; i < count; ++i) {
    list.push_back(Zeros({static_cast<std::size_t>(64 * (i + 1))}, dtype, kGpu));
  }
  return list;
}

inline cuda::BufferUse UseOf(const TensorPtr& tensor, cuda::Use use) {
  return {cuda::DevicePointer(*tensor), tensor->Size() * ElementSize(tensor->GetDataType()), use};
}

// A framework kernel on @p stream that uses @p tensors as @p use.
inline void FrameworkKernel(Recorded& recorded, cudaStream_t stream, const std::vector<TensorPtr>& tensors,
                            cuda::Use use) {
  std::vector<cuda::BufferUse> buffers;
  buffers.reserve(tensors.size());
  for (const TensorPtr& tensor : tensors) {
    buffers.push_back(UseOf(tensor, use));
  }
  recorded.driver.Launch("framework kernel", stream, cuda::KernelOperands{{}, cuda::Access::Writes, buffers}, [] {});
}

// One run of an entry point: make(), which creates the tensors; produce: the inputs' writers;
// call(); consume: what the caller reads after. Plain: the host writes the inputs and reads
// the outputs back. Guarded: all of it under a StreamGuard, with a framework stream writing
// the inputs and reading the outputs.
struct Flow {
  std::function<void()> make;
  std::function<std::vector<TensorPtr>()> inputs;
  std::function<void()> call;
  std::function<std::vector<TensorPtr>()> outputs;
};

inline void RunPlain(const std::function<Flow()>& flow_of) {
  Recorded recorded;
  {
    Flow flow = flow_of();
    flow.make();
    for (const TensorPtr& input : flow.inputs()) {
      input->CopyFromFloats(std::vector<float>(input->Size(), 1.0f));
    }
    flow.call();
    for (const TensorPtr& output : flow.outputs()) {
      static_cast<void>(output->ToFloatVector());
    }
  }
  RequireOrdered(recorded);
}

inline void RunGuarded(const std::function<Flow()>& flow_of) {
  Recorded recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  recorded.driver.NameStream(framework, "framework");
  {
    const cuda::StreamGuard guard(framework, 0);
    Flow flow = flow_of();
    flow.make();
    FrameworkKernel(recorded, framework, flow.inputs(), cuda::Use::Write);
    flow.call();
    FrameworkKernel(recorded, framework, flow.outputs(), cuda::Use::Read);
    // The caller's tensors go while the framework stream may still read them: the frees
    // must wait for it (they run with the guard still installed).
  }
  RequireOrdered(recorded);
}

inline void RunBoth(const std::function<Flow()>& flow_of) {
  BOOST_TEST_CONTEXT("without a StreamGuard") { RunPlain(flow_of); }
  BOOST_TEST_CONTEXT("under a StreamGuard") { RunGuarded(flow_of); }
}

}  // namespace mlfw_stream_order
