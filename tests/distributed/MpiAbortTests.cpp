// A rank that throws inside an AbortGuard ends the whole MPI job with a clear message instead
// of leaving the other ranks waiting in a collective. Disabled by default (it ends the
// process); CTest runs it explicitly under mpiexec -n 2 and expects the abort message.
#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/AbortGuard.hpp>

#include "distributed/DistributedTestUtil.hpp"

BOOST_AUTO_TEST_SUITE(MpiAbortOnRankFailure, *boost::unit_test::disabled())

BOOST_AUTO_TEST_CASE(OneRankThrowsInsideGuard) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() == 1) {
    BOOST_TEST_MESSAGE("world size 1: nobody to leave waiting (run under mpiexec -n 2)");
    return;
  }
  if (group->Rank() == group->WorldSize() - 1) {
    mlframework::distributed::AbortGuard guard(*group, "user code of the last rank");
    throw mlframework::ArgumentError("batch", "rank-local failure injected by the test");
  }
  group->Barrier();  // without the guard the other ranks would wait here forever
  BOOST_ERROR("the barrier returned although one rank never entered it");
}

BOOST_AUTO_TEST_SUITE_END()
