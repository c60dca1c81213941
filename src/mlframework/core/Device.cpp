#include <mlframework/core/Device.hpp>

namespace mlframework {

std::string Device::ToString() const { return IsCPU() ? std::string("cpu") : "cuda:" + std::to_string(Index); }

}  // namespace mlframework
