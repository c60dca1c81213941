#include <mlframework/core/TensorBackend.hpp>

namespace mlframework {

TensorBackend::~TensorBackend() = default;

}  // namespace mlframework
