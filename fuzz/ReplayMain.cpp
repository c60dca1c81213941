// Runs a fuzz target's entry point over files (or every file of directories)
// without libFuzzer, so the corpus and the inputs of fixed crashes are
// regression tests in every build, sanitizers included.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::size_t Replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::uint8_t> input(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(input.data(), input.size());
  return 1;
}

int Run(int argc, char** argv) {
  std::size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (entry.is_regular_file()) {
          count += Replay(entry.path());
        }
      }
    } else if (std::filesystem::is_regular_file(path)) {
      count += Replay(path);
    } else {
      std::fprintf(stderr, "replay: %s is not a file or directory\n", argv[i]);
      return 2;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 2;
  }
  std::printf("replay: %zu inputs ran cleanly\n", count);
  return 0;
}

}  // namespace

// A fuzz target must not let an exception out (the library's errors are part of what it expects);
// one that does fails the replay with its message instead of a bare std::terminate.
int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "replay: an exception escaped the fuzz target: %s\n", error.what());
  } catch (...) {
    std::fprintf(stderr, "replay: an exception of unknown type escaped the fuzz target\n");
  }
  return 1;
}
