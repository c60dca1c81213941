// The runs of test_cpu_kernels with an instruction set forced through MLFW_CPU_ISA
// (tests/core/CMakeLists.txt) exist to test that set's kernels. On a CPU without it the
// library runs its best supported set instead, which the default runs already test: such a
// run says so and exits 77, which CTest reports as Skipped (SKIP_RETURN_CODE), instead of
// spending a whole suite's time on a duplicate and passing as if the set had been tested.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>

namespace {

constexpr int kSkipReturnCode = 77;

struct ForcedIsaGate {
  ForcedIsaGate() {
    const char* gate = std::getenv("MLFW_TEST_SKIP_MISSING_ISA");
    const char* requested = std::getenv("MLFW_CPU_ISA");
    if (gate == nullptr || std::string_view(gate) != "1" || requested == nullptr) return;
    const std::string_view active = mlframework::backends::cpu::InstructionSet();
    if (active != requested) {
      std::printf("SKIPPED: this CPU lacks MLFW_CPU_ISA=%s (the best supported set, %.*s, runs in the default runs)\n",
                  requested, static_cast<int>(active.size()), active.data());
      std::fflush(stdout);
      std::_Exit(kSkipReturnCode);  // before the framework runs: nothing to tear down
    }
  }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(ForcedIsaGate);
