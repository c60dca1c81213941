// StreamGuard on a GPU: the library's work waits for the framework stream's earlier work and
// the framework stream's later work waits for the library's, with no synchronisation by the
// caller. The framework stream is held back by a host function, so the ordering is observed
// deterministically instead of by a race. Needs a CUDA device.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <cuda_runtime_api.h>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

using namespace mlframework;
namespace cuda = mlframework::backends::cuda;

namespace {

void Check(cudaError_t status) { BOOST_REQUIRE_EQUAL(cudaGetErrorName(status), cudaGetErrorName(cudaSuccess)); }

// A non-blocking stream (no implicit order with the default stream), as frameworks create them.
struct FrameworkStream {
  cudaStream_t stream = nullptr;
  FrameworkStream() { Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~FrameworkStream() { static_cast<void>(cudaStreamDestroy(stream)); }
  FrameworkStream(const FrameworkStream&) = delete;
  FrameworkStream& operator=(const FrameworkStream&) = delete;
};

// Pinned host memory: copies from or to pageable memory may block the host until the stream
// reaches them, which a held-back stream never would.
template <typename T>
struct Pinned {
  T* data = nullptr;
  std::size_t size = 0;
  Pinned(std::size_t count, T value) : size(count) {
    void* memory = nullptr;
    Check(cudaMallocHost(&memory, count * sizeof(T)));
    data = static_cast<T*>(memory);
    std::fill(data, data + count, value);
  }
  ~Pinned() { static_cast<void>(cudaFreeHost(data)); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

// Holds a stream at a host function until Release().
struct Gate {
  std::atomic<bool> open{false};
  static void CUDART_CB Wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    while (!gate->open.load(std::memory_order_acquire)) {
    }
  }
  void HoldBack(cudaStream_t stream) { Check(cudaLaunchHostFunc(stream, &Gate::Wait, this)); }
  void Release() { open.store(true, std::memory_order_release); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaStreamGuard)

BOOST_AUTO_TEST_CASE(LibraryWorkRunsBetweenTheFrameworkStreamsEarlierAndLaterWork) {
  FrameworkStream framework;
  constexpr std::size_t kElements = 1 << 20;
  void* memory = nullptr;
  Check(cudaMalloc(&memory, kElements * sizeof(float)));
  const std::shared_ptr<void> owner(memory, [](void* pointer) { static_cast<void>(cudaFree(pointer)); });
  const TensorPtr gradient = cuda::Wrap(memory, {static_cast<std::int64_t>(kElements)}, DataType::Float32, 0, owner);
  cuda::Synchronize(0);

  // The framework writes 8.0 into its gradient, but only after the gate opens.
  Gate gate;
  gate.HoldBack(framework.stream);
  const Pinned<float> eights(kElements, 8.0f);
  Check(cudaMemcpyAsync(memory, eights.data, kElements * sizeof(float), cudaMemcpyHostToDevice, framework.stream));
  const Pinned<float> seen(kElements, 0.0f);
  {
    const cuda::StreamGuard guard(framework.stream, 0);
    BOOST_TEST(cuda::CurrentExternalStream(0) == static_cast<void*>(framework.stream));
    ScaleInPlace(std::vector<TensorPtr>{gradient}, 0.25f);  // queued, not run: the gate holds it
    // The framework reads the result on its own stream, after the library's work.
    Check(cudaMemcpyAsync(seen.data, memory, kElements * sizeof(float), cudaMemcpyDeviceToHost, framework.stream));
  }
  BOOST_TEST(cuda::CurrentExternalStream(0) == nullptr);
  auto* library = static_cast<cudaStream_t>(cuda::StreamHandle(0));
  BOOST_TEST(cudaStreamQuery(library) == cudaErrorNotReady);  // waiting for the framework's copy
  gate.Release();
  Check(cudaStreamSynchronize(framework.stream));
  BOOST_TEST(seen.data[0] == 2.0f);
  BOOST_TEST(seen.data[kElements - 1] == 2.0f);
}

BOOST_AUTO_TEST_CASE(AnOverflowWrittenByTheFrameworkIsSeenByTheCheck) {
  FrameworkStream framework;
  const TensorPtr gradient = Zeros({4096}, DataType::Float16, Device::CUDA(0));
  cuda::Synchronize(0);
  Gate gate;
  gate.HoldBack(framework.stream);
  // 0x7C00 is +Inf in FP16: the framework's kernel produced an overflow.
  const Pinned<std::uint16_t> inf(4096, 0x7C00);
  Check(cudaMemcpyAsync(cuda::DevicePointer(*gradient), inf.data, inf.size * sizeof(std::uint16_t),
                        cudaMemcpyHostToDevice, framework.stream));
  const cuda::StreamGuard guard(framework.stream, 0);
  gate.Release();  // the check below blocks the host on its result, so the gate opens first
  BOOST_TEST(HasNonFinite(std::vector<TensorPtr>{gradient}));
}

BOOST_AUTO_TEST_CASE(GuardsNestPerDeviceAndThread) {
  FrameworkStream outer_stream;
  FrameworkStream inner_stream;
  {
    const cuda::StreamGuard outer(outer_stream.stream, 0);
    {
      const cuda::StreamGuard inner(inner_stream.stream, 0);
      BOOST_TEST(cuda::CurrentExternalStream(0) == static_cast<void*>(inner_stream.stream));
    }
    BOOST_TEST(cuda::CurrentExternalStream(0) == static_cast<void*>(outer_stream.stream));
    std::atomic<void*> other_thread{outer_stream.stream};
    std::thread([&] { other_thread = cuda::CurrentExternalStream(0); }).join();
    BOOST_TEST(other_thread.load() == nullptr);
  }
  BOOST_TEST(cuda::CurrentExternalStream(0) == nullptr);
}

BOOST_AUTO_TEST_CASE(AStreamOfAnotherDeviceIsRejectedByName) {
  if (cuda::DeviceCount() < 2) {
    BOOST_TEST_MESSAGE("one device: the cross-device case needs two");
    return;
  }
  Check(cudaSetDevice(1));
  FrameworkStream on_one;
  Check(cudaSetDevice(0));
  BOOST_CHECK_EXCEPTION(cuda::StreamGuard(on_one.stream, 0), ArgumentError, [](const ArgumentError& e) {
    return e.Parameter() == "stream" &&
           std::string(e.what()).find("belongs to cuda:1, not to cuda:0") != std::string::npos;
  });
  BOOST_TEST(cuda::CurrentExternalStream(0) == nullptr);
}

BOOST_AUTO_TEST_SUITE_END()
