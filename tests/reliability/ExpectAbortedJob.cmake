# Runs `MPIEXEC -n RANKS --oversubscribe PROGRAM MODE` and passes only when the job fails
# (non-zero exit), prints a line matching EXPECT, and ends within LIMIT seconds. Used for the
# faults whose correct outcome is an aborted job, where CTest's PASS_REGULAR_EXPRESSION alone
# would ignore the exit code. The CTest TIMEOUT of the test is the backstop for a real hang.
string(TIMESTAMP start "%s" UTC)
execute_process(COMMAND ${MPIEXEC} -n ${RANKS} --oversubscribe ${PROGRAM} ${MODE}
                RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
string(TIMESTAMP stop "%s" UTC)
math(EXPR elapsed "${stop} - ${start}")
message("${output}")
message("job exit: ${result}, ${elapsed} s")
if(result STREQUAL "0")
  message(FATAL_ERROR "the job exited with 0 although it should have been aborted")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output lacks the expected message: ${EXPECT}")
endif()
if(elapsed GREATER ${LIMIT})
  message(FATAL_ERROR "the job took ${elapsed} s, more than ${LIMIT} s")
endif()
