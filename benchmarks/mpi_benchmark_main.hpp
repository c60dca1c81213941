#pragma once
// The main of the benchmarks that run under mpiexec: every rank runs every benchmark in
// lockstep (their collectives must match), only rank 0 reports, and the other ranks drop
// --benchmark_out* so they never write the same file.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

namespace mlfw_bench {

class SilentReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

inline int RunOnEveryRank(int argc, char** argv, int rank) {
  std::vector<char*> args(argv, argv + argc);
  if (rank != 0) {
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](const char* arg) { return std::string(arg).rfind("--benchmark_out", 0) == 0; }),
               args.end());
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace mlfw_bench
