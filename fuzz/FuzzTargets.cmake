# The fuzz targets and their sources, shared by fuzz/CMakeLists.txt (libFuzzer
# executables) and tests/reliability/CMakeLists.txt (corpus replay tests).
# Private pieces (hidden in the shared library) and the demo's IDX reader are
# compiled in from source, so the fuzz build needs no samples.
find_package(ZLIB REQUIRED)
set(MLFW_FUZZ_TARGETS state_blob scaler_state fsdp_checkpoint fsdp_sharded_checkpoint idx dlpack fp8_recipe_state)
set(MLFW_FUZZ_state_blob_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/StateBlobFuzzer.cpp
  ${PROJECT_SOURCE_DIR}/src/mlframework/core/StateBlob.cpp)
set(MLFW_FUZZ_scaler_state_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/ScalerStateFuzzer.cpp)
set(MLFW_FUZZ_fsdp_checkpoint_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/FsdpCheckpointFuzzer.cpp)
set(MLFW_FUZZ_fsdp_sharded_checkpoint_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/FsdpShardedCheckpointFuzzer.cpp)
set(MLFW_FUZZ_idx_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/IdxFuzzer.cpp
  ${PROJECT_SOURCE_DIR}/samples/train_fashion_mnist/IdxReader.cpp)
set(MLFW_FUZZ_idx_LIBS ZLIB::ZLIB)
set(MLFW_FUZZ_dlpack_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/DLPackFuzzer.cpp)
set(MLFW_FUZZ_fp8_recipe_state_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/Fp8RecipeStateFuzzer.cpp)
