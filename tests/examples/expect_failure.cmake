# Runs PROGRAM with ARGUMENT and passes only if it exits with status 1 and its error output matches
# EXPECT: an example that hides a failure behind exit status 0 fails this test.
execute_process(COMMAND ${PROGRAM} ${ARGUMENT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit status 1, got '${rc}'\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}': ${err}")
endif()
