# Installs the build tree BUILD into a fresh PREFIX (what an earlier install left there is removed first, so the
# tests see only what this build installs): cmake -DBUILD=<dir> -DPREFIX=<dir> -P Install.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${PREFIX}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${status})")
endif()
