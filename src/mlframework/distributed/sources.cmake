# The MPI engine links MPI privately: public headers and consumers never see mpi.h.
# It is its own library (mlframework::mpi), so programs without MPI never load libmpi.
if(MLFW_HAS_MPI)
  target_sources(mlframework_mpi PRIVATE ${CMAKE_CURRENT_LIST_DIR}/MpiProcessGroup.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/MpiAsync.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/MpiCombine.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/MpiOptions.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/MpiWait.cpp)
  target_link_libraries(mlframework_mpi PRIVATE MPI::MPI_CXX OpenMP::OpenMP_CXX)
else()
  target_sources(mlframework_mpi PRIVATE ${CMAKE_CURRENT_LIST_DIR}/NoMpiProcessGroup.cpp)
endif()
