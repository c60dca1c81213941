// docs/cpu-backend.md: the library's thread count beside the framework's pools.
#include <mlframework/mlframework.hpp>

// At start-up: the framework's pools keep the cores, the library's kernels run on the caller.
void LeaveTheCoresToTheFramework() { mlframework::SetNumThreads(1); }
