#pragma once
/// @file HostDevice.hpp
/// @brief `MLFW_HOST_DEVICE`: marks element-wise functions shared by the CPU and CUDA backends.

#if defined(__CUDACC__)
/// Compiles a function for both host and device when nvcc sees it.
#define MLFW_HOST_DEVICE __host__ __device__
#else
/// Compiles a function for both host and device when nvcc sees it.
#define MLFW_HOST_DEVICE
#endif
