#pragma once
/// @file CollectiveRequest.hpp
/// @brief The handle of a non-blocking collective (IProcessGroup::AllGatherAsync and friends).

#include <memory>

#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// A collective that was started and may still be running (MPI_Request, torch's Work).
///
/// The tensors handed to the call that made it must stay alive and untouched until Test()
/// returned true or Wait() returned: only then do the outputs hold the result. Wait() and
/// Test() are local (they never start communication); a failed collective throws
/// CommunicationError from the Wait() or Test() that finds it. Once complete, further Wait()
/// and Test() calls return at once (the first failure is thrown again).
///
/// Destroying a request that is still running completes it first (a collective cannot be
/// cancelled once a peer may have joined it): the destructor blocks until the peers joined
/// and swallows a failure, which the other ranks see from their own requests.
class MLFRAMEWORK_EXPORT CollectiveRequest {
 public:
  virtual ~CollectiveRequest();
  /// Not copyable: one owner waits.
  CollectiveRequest(const CollectiveRequest&) = delete;
  /// Not assignable.
  CollectiveRequest& operator=(const CollectiveRequest&) = delete;

  /// Drives the collective without blocking; true once it is complete (outputs final).
  virtual bool Test() = 0;
  /// Blocks until the collective is complete (outputs final).
  virtual void Wait() = 0;

 protected:
  /// Only engines make requests.
  CollectiveRequest() = default;
};

/// Owning handle of a started collective.
using CollectiveRequestPtr = std::unique_ptr<CollectiveRequest>;

/// A request that is already complete: what the blocking default implementations return.
MLFRAMEWORK_EXPORT CollectiveRequestPtr MakeCompletedRequest();

}  // namespace mlframework::distributed
