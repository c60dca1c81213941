# CUDA backend (MLFW_HAS_CUDA, see cmake/MlfwCuda.cmake). Few .cu files, one per
# kernel family, to keep the nvcc time of CI modest.
if(MLFW_HAS_CUDA)
  target_sources(mlframework_cuda PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/CudaBackend.cpp
    ${CMAKE_CURRENT_LIST_DIR}/CudaFloat8Scales.cpp
    ${CMAKE_CURRENT_LIST_DIR}/CudaFloat8Backend.cpp
    ${CMAKE_CURRENT_LIST_DIR}/CudaFloat8Wire.cpp
    ${CMAKE_CURRENT_LIST_DIR}/CudaOptimizerSteps.cpp
    ${CMAKE_CURRENT_LIST_DIR}/CudaTensor.cpp
    ${CMAKE_CURRENT_LIST_DIR}/DeviceContext.cpp
    ${CMAKE_CURRENT_LIST_DIR}/ExternalStream.cpp
    ${CMAKE_CURRENT_LIST_DIR}/RuntimeDriver.cpp
    ${CMAKE_CURRENT_LIST_DIR}/TableCache.cpp
    ${CMAKE_CURRENT_LIST_DIR}/AddInto.cu
    ${CMAKE_CURRENT_LIST_DIR}/Cast.cu
    ${CMAKE_CURRENT_LIST_DIR}/Float8ScaleUpdate.cu
    ${CMAKE_CURRENT_LIST_DIR}/Float8Cast.cu
    ${CMAKE_CURRENT_LIST_DIR}/LowBitSteps.cu
    ${CMAKE_CURRENT_LIST_DIR}/Float8Wire.cu
    ${CMAKE_CURRENT_LIST_DIR}/NonFinite.cu
    ${CMAKE_CURRENT_LIST_DIR}/OptimizerSteps.cu
    ${CMAKE_CURRENT_LIST_DIR}/Scale.cu
    ${CMAKE_CURRENT_LIST_DIR}/ScaleUpdate.cu
    ${CMAKE_CURRENT_LIST_DIR}/ScanNonFinite.cu
    ${CMAKE_CURRENT_LIST_DIR}/SumSquares.cu
    ${CMAKE_CURRENT_LIST_DIR}/Unscale.cu)
  target_link_libraries(mlframework_cuda PRIVATE CUDA::cudart)
  set_target_properties(mlframework_cuda PROPERTIES
    CUDA_VISIBILITY_PRESET hidden
    # libcudart may live outside the loader's default path (for example /usr/local/cuda/lib64).
    INSTALL_RPATH_USE_LINK_PATH ON)
else()
  target_sources(mlframework_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/CudaUnavailable.cpp)
endif()

# The NCCL process group (distributed area) builds on this backend's streams and memory,
# so it is listed here, next to the CUDA sources it needs.
set(mlfw_distributed_dir ${CMAKE_CURRENT_LIST_DIR}/../../distributed)
if(MLFW_HAS_NCCL)
  target_sources(mlframework_cuda PRIVATE ${mlfw_distributed_dir}/NcclProcessGroup.cpp
                                     ${mlfw_distributed_dir}/NcclDriver.cpp
                                     ${mlfw_distributed_dir}/PendingCollectives.cpp)
  target_link_libraries(mlframework_cuda PRIVATE NCCL::NCCL)
else()
  target_sources(mlframework_cuda PRIVATE ${mlfw_distributed_dir}/NoNcclProcessGroup.cpp)
endif()
