// Fault injection for multi-rank jobs, run under `mpiexec -n 2` by CTest
// (tests/reliability/CMakeLists.txt). Each mode breaks one rank in the middle
// of a training step; the job must end on every rank with a clear message
// within seconds. A hang is a failure: the CTest TIMEOUT bounds each run.
//
//   distributed_faults guarded-throw    rank 1 throws inside an AbortGuard while
//                                       rank 0 waits in the gradient reduce-scatter
//   distributed_faults unguarded-throw  rank 1 dies of an uncaught exception (no guard)
//                                       while rank 0 waits in the gradient reduce-scatter
//   distributed_faults mismatched-unit  rank 0 registers a unit of another shape:
//                                       every rank gets ArgumentError and the job
//                                       goes on (the check is agreed by all-reduce)
//   distributed_faults mismatched-grad  rank 1 hands in a gradient of the wrong shape
//   distributed_faults caught-throw     rank 1 throws, main catches it and returns normally
//                                       (no guard) while rank 0 waits in the reduce-scatter:
//                                       rank 1's exit barrier times out and aborts the job
//   distributed_faults early-return     rank 0 returns normally from main; rank 1 then waits
//                                       in a collective rank 0 never joins: rank 0's exit
//                                       barrier times out and aborts the job
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/AbortGuard.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

using namespace mlframework;
namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

GradientMap Layer(const Shape& shape) {
  std::vector<float> values(ElementCount(shape));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.01f * static_cast<float>(i);
  }
  return {{"weight", FromVector(values, shape)}};
}

GradientMap Gradient(const Shape& shape) {
  return {{"weight", FromVector(std::vector<float>(ElementCount(shape), 0.5f), shape)}};
}

// Every rank reports what it caught, then all agree that every rank caught it: if one rank
// had not thrown, it would be waiting in another collective and the job would hang (timeout).
int AgreeEveryRankFailed(dist::IProcessGroup& group, const std::string& what) {
  std::fprintf(stderr, "rank %d: clear error: %s\n", group.Rank(), what.c_str());
  std::vector<double> failed = {1.0};
  group.AllReduceHost(failed, dist::ReduceOp::Sum);
  if (static_cast<int>(failed[0]) != group.WorldSize()) {
    std::fprintf(stderr, "rank %d: only %d of %d ranks failed\n", group.Rank(), static_cast<int>(failed[0]),
                 group.WorldSize());
    return 1;
  }
  if (group.Rank() == 0) {
    std::printf("every rank reported the error (%d ranks)\n", group.WorldSize());
  }
  return 0;
}

int Run(const std::string& mode) {
  auto group = dist::MakeMpiProcessGroup();
  fsdp::FSDP model(group);
  const int rank = group->Rank();

  if (mode == "mismatched-unit") {
    try {
      model.RegisterUnit("layer", Layer(rank == 0 ? Shape{4, 2} : Shape{2, 4}));
    } catch (const ArgumentError& error) {
      return AgreeEveryRankFailed(*group, error.what());
    }
    std::fprintf(stderr, "rank %d: a unit of another shape was accepted\n", rank);
    return 1;
  }

  auto& unit = model.RegisterUnit("layer", Layer({8, 4}));
  unit.Gather();
  if (mode == "mismatched-grad") {
    try {
      unit.ReduceGradients(Gradient(rank == 1 ? Shape{4, 8} : Shape{8, 4}));
    } catch (const ArgumentError& error) {
      return AgreeEveryRankFailed(*group, error.what());
    }
    std::fprintf(stderr, "rank %d: a gradient of another shape was accepted\n", rank);
    return 1;
  }

  if (mode == "guarded-throw") {
    dist::AbortGuard guard(*group, "forward of layer (fault injected on rank 1)");
    if (rank == 1) {
      throw std::runtime_error("injected fault: NaN in the input batch");
    }
    unit.ReduceGradients(Gradient({8, 4}));  // rank 0 waits here for rank 1
  } else if (mode == "unguarded-throw" || mode == "caught-throw") {
    if (rank == 1) {
      throw std::runtime_error("injected fault without a guard");
    }
    unit.ReduceGradients(Gradient({8, 4}));
  } else if (mode == "early-return") {
    if (rank == 0) {
      std::fprintf(stderr, "rank 0: returning from main early\n");
      return 0;
    }
    // Let rank 0 reach its exit first, then wait for it in a collective it never joins.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    unit.ReduceGradients(Gradient({8, 4}));
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::fprintf(stderr, "rank %d: the step completed although rank 1 failed\n", rank);
  return 1;
}

}  // namespace

// The unguarded mode lets an exception leave main on purpose (that is the fault under test).
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: %s guarded-throw|unguarded-throw|caught-throw|early-return|mismatched-unit|mismatched-grad\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "unguarded-throw") {
    // A crash: the exception leaves main, std::terminate aborts the rank, mpiexec sees it
    // die and ends the job. (A rank that instead catches the exception and returns from
    // main normally is mode caught-throw: the library's bounded exit barrier ends that job.)
    return Run(mode);
  }
  // Like a training program's main: report what reached the top. The handler also makes
  // the exception unwind the stack (without one it may terminate first), which is what
  // lets an AbortGuard on the way abort the job.
  try {
    return Run(mode);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank error: %s\n", error.what());
    return 1;
  }
}
