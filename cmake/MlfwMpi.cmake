# MPI engine (Open MPI from Debian): sets MLFW_HAS_MPI and links MPI::MPI_CXX privately,
# so the public headers and the package config need no MPI.
#
# The engine calls MPI's C API only. The deprecated MPI-2 C++ bindings are switched off
# (MPI_CXX_SKIP_MPICXX defines OMPI_SKIP_MPICXX and MPICH_SKIP_MPICXX), and their library
# (Open MPI's libmpi_cxx, MPICH's libmpichcxx), which the compiler wrapper still names, is taken
# out of MPI::MPI_CXX: libmlframework_mpi.so then needs libmpi.so alone (tests/package checks it).
option(MLFW_WITH_MPI "Build the MPI process group when MPI is found" ON)
set(MLFW_HAS_MPI OFF)
if(MLFW_WITH_MPI)
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(MLFW_HAS_MPI ON)
    get_target_property(mlfw_mpi_libraries MPI::MPI_CXX INTERFACE_LINK_LIBRARIES)
    list(FILTER mlfw_mpi_libraries EXCLUDE REGEX "(^|/|-l)(lib)?(mpi_cxx|mpichcxx|mpicxx)[.a-z0-9]*$")
    set_property(TARGET MPI::MPI_CXX PROPERTY INTERFACE_LINK_LIBRARIES "${mlfw_mpi_libraries}")
    message(STATUS "mlframework: MPI ${MPI_CXX_VERSION} (${MPIEXEC_EXECUTABLE}): MPI process group ON")
  else()
    message(STATUS "mlframework: MPI not found: MPI process group OFF (constructors throw BackendError)")
  endif()
else()
  message(STATUS "mlframework: MPI process group OFF (MLFW_WITH_MPI=OFF)")
endif()
