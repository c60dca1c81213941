# The fuzz targets and their sources, shared by fuzz/CMakeLists.txt (libFuzzer
# executables) and tests/reliability/CMakeLists.txt (corpus replay tests).
# Private pieces (hidden in the shared library) are compiled in from source.
set(MLFW_FUZZ_TARGETS state_blob)
set(MLFW_FUZZ_state_blob_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/StateBlobFuzzer.cpp
  ${PROJECT_SOURCE_DIR}/src/mlframework/core/StateBlob.cpp)
