#pragma once
// What the benchmarks that run under mpiexec share: their main (every rank runs every benchmark
// in lockstep, as their collectives must match; only rank 0 reports, and the other ranks drop
// --benchmark_out* so they never write the same file) and the peak-memory reading.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace mlfw_bench {

/// The "<field>:  N kB" line of /proc/self/status (VmRSS, VmHWM) in bytes (-1 when missing).
inline double ProcStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) * 1024.0;
  }
  return -1.0;
}

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
