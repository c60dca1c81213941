// mlframework::SetNumThreads() / NumThreads(): the library's thread count, and lists too small
// for threads on the calling thread.
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include <omp.h>
#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/Threads.hpp>

using namespace mlframework;

namespace {

// The threads of this process (Linux): the library's OpenMP pool keeps the threads it started.
std::size_t ProcessThreads() {
  const std::filesystem::directory_iterator tasks("/proc/self/task");
  return static_cast<std::size_t>(std::distance(tasks, std::filesystem::directory_iterator{}));
}

// Back to the default count whatever a test did.
struct DefaultThreadsGuard {
  ~DefaultThreadsGuard() { SetNumThreads(0); }
};

std::vector<TensorPtr> List(std::size_t elements) {
  return {FromVector(std::vector<float>(elements, 2.0f), {elements}, DataType::Float32)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(LibraryThreads)

BOOST_AUTO_TEST_CASE(DefaultIsOpenMPsCountAndTheSettingIsTheLibrarys) {
  const DefaultThreadsGuard guard;
  const int openmp = omp_get_max_threads();
  BOOST_TEST(NumThreads() == openmp);  // OMP_NUM_THREADS when set
  SetNumThreads(3);
  BOOST_TEST(NumThreads() == 3);
  BOOST_TEST(omp_get_max_threads() == openmp);  // OpenMP's own count (the framework's) untouched
  SetNumThreads(0);
  BOOST_TEST(NumThreads() == omp_get_max_threads());
  // OpenMP's count followed while none is set.
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  BOOST_TEST(NumThreads() == 1);
  omp_set_num_threads(before);
}

BOOST_AUTO_TEST_CASE(ANegativeCountIsRefusedAndChangesNothing) {
  const DefaultThreadsGuard guard;
  SetNumThreads(2);
  try {
    SetNumThreads(-4);
    BOOST_FAIL("expected an ArgumentError");
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == "threads");
    BOOST_TEST(std::string(error.what()).find("-4") != std::string::npos, error.what());
  }
  BOOST_TEST(NumThreads() == 2);
}

// The kernels run on as many threads as set (the pool grows to the count), and a small list
// runs on the calling thread (no team is started for it).
BOOST_AUTO_TEST_CASE(KernelsUseTheCountAndSmallListsStayOnTheCallingThread) {
  const DefaultThreadsGuard guard;
  constexpr int kThreads = 7;  // a team size nothing else in this executable asks for
  SetNumThreads(kThreads);
  const std::size_t start = ProcessThreads();
  // Four chunks, below the threshold: forked before there was one.
  const std::vector<TensorPtr> small = List(std::size_t{1} << 17);
  BOOST_TEST(!UnscaleAndCheck(small, 0.5f));
  BOOST_TEST(ProcessThreads() == start);
  const std::vector<TensorPtr> large = List(std::size_t{1} << 21);
  BOOST_TEST(!UnscaleAndCheck(large, 0.5f));
  BOOST_TEST(large[0]->ToFloatVector()[12345] == 1.0f);
  BOOST_TEST(ProcessThreads() >= static_cast<std::size_t>(kThreads),
             "threads before " << start << ", after " << ProcessThreads());
}

BOOST_AUTO_TEST_SUITE_END()
