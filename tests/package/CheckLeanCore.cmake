# cmake -DCORE=<libmlframework.so> -DCUDA=<libmlframework_cuda.so> -DMPI=<libmlframework_mpi.so>
#       -DHAS_CUDA=0|1 -DHAS_NCCL=0|1 -DHAS_MPI=0|1 -P CheckLeanCore.cmake
#
# The core library must not load CUDA, NCCL or MPI (a framework that ships its own would clash
# with them); each component must load exactly the ones it was built with, and the MPI component
# only libmpi.so (not the C++ bindings).
function(needed lib out)
  execute_process(COMMAND readelf -d ${lib} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${lib} failed (${rc})")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]]+\\]" lines "${dynamic}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()

needed(${CORE} core)
message(STATUS "libmlframework needs: ${core}")
foreach(forbidden libcudart libcuda\\. libnccl libmpi)
  if(core MATCHES "${forbidden}")
    message(FATAL_ERROR "libmlframework.so lists ${forbidden} in its NEEDED entries: ${core}")
  endif()
endforeach()

needed(${CUDA} cuda)
message(STATUS "libmlframework_cuda needs: ${cuda}")
foreach(pair "libcudart;${HAS_CUDA}" "libnccl;${HAS_NCCL}")
  list(GET pair 0 name)
  list(GET pair 1 expected)
  if(expected AND NOT cuda MATCHES "${name}")
    message(FATAL_ERROR "libmlframework_cuda.so was built with ${name} but does not load it: ${cuda}")
  elseif(NOT expected AND cuda MATCHES "${name}")
    message(FATAL_ERROR "libmlframework_cuda.so was built without ${name} but loads it: ${cuda}")
  endif()
endforeach()

needed(${MPI} mpi)
message(STATUS "libmlframework_mpi needs: ${mpi}")
if(HAS_MPI AND NOT mpi MATCHES "libmpi\\.so")
  message(FATAL_ERROR "libmlframework_mpi.so was built with MPI but does not load libmpi.so: ${mpi}")
endif()
# The engine uses MPI's C API: the deprecated C++ bindings' library (Open MPI's libmpi_cxx.so.40,
# MPICH's libmpichcxx) must not be needed, or a system without it cannot load the component.
if(mpi MATCHES "libmpi_cxx|libmpichcxx|libmpicxx")
  message(FATAL_ERROR "libmlframework_mpi.so needs the MPI C++ bindings: ${mpi}")
endif()
message(STATUS "lean core ok")
