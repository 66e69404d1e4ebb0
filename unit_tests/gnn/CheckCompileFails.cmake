# Builds one target of a configured tree and checks how that went (cmake -P):
#   -DBUILD_DIR=... -DTARGET=... -DEXPECT=success|failure [-DMESSAGE=text the failing build must print]
# A failure case passes only when the build fails *and* prints MESSAGE, so an unrelated error does not count.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "success")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TARGET} was expected to compile and did not:\n${out}")
  endif()
elseif(EXPECT STREQUAL "failure")
  if(rc EQUAL 0)
    message(FATAL_ERROR "${TARGET} compiled, but must not")
  endif()
  string(FIND "${out}" "${MESSAGE}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${TARGET} failed without the message '${MESSAGE}':\n${out}")
  endif()
else()
  message(FATAL_ERROR "CheckCompileFails.cmake: EXPECT must be success or failure, got '${EXPECT}'")
endif()
message(STATUS "${TARGET}: ${EXPECT} as expected")
