// Uses the installed components: the CUDA backend's queries and the MPI process group's.
#include <cstdio>

#include <mlframework/mlframework.hpp>

int main() {
  using namespace mlframework;
  // Answers on any machine: false and 0 without a GPU or without a CUDA build.
  const bool built = backends::cuda::IsBuilt();
  const int devices = backends::cuda::DeviceCount();
  const bool mpi = distributed::MpiAvailable();
  // Core's factory reaches the CUDA backend through the component: without a GPU it throws.
  if (devices == 0) {
    try {
      (void)Zeros({2}, DataType::Float32, Device::CUDA(0));
      return 1;
    } catch (const BackendError& error) {
      std::printf("caught: %s\n", error.what());
    }
  }
  std::printf("component consumer ok (cuda built %d, %d devices, mpi %d)\n", built ? 1 : 0, devices, mpi ? 1 : 0);
  return 0;
}
