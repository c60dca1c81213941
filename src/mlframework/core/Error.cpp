#include <mlframework/core/Error.hpp>

namespace mlframework {

Error::Error(const std::string& message) : std::runtime_error(message) {}
Error::~Error() = default;

ArgumentError::ArgumentError(const std::string& parameter, const std::string& message)
    : Error("invalid argument '" + parameter + "': " + message), parameter_(parameter) {}
ArgumentError::~ArgumentError() = default;

ArgumentNullError::ArgumentNullError(const std::string& parameter) : ArgumentError(parameter, "must not be null") {}
ArgumentNullError::~ArgumentNullError() = default;

InvalidOperationError::InvalidOperationError(const std::string& message) : Error(message) {}
InvalidOperationError::~InvalidOperationError() = default;

BackendError::BackendError(const std::string& message) : Error(message) {}
BackendError::~BackendError() = default;

CommunicationError::CommunicationError(const std::string& message) : Error(message) {}
CommunicationError::~CommunicationError() = default;

}  // namespace mlframework
