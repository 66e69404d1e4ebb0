# Runs a tstMain case and checks how the job ended:
#   cmake -DCOMMAND=<command;args> -DSTATUS=<exit status> -DERRORS=<number of "tstMain: error" lines>
#         [-DMESSAGE=<regex the error line matches>] [-DABORT=ON] -P RunMainCheck.cmake
# ABORT=ON: the job must have been ended by MPI_Abort (a rank blocked where the failed rank never comes), which
# run_main announces ("...; ending the job)"); otherwise no rank may have aborted.
execute_process(
  COMMAND ${COMMAND}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 100)
message("exit status: ${status}\n-- stdout --\n${out}-- stderr --\n${err}--")
if(NOT status STREQUAL "${STATUS}")
  message(FATAL_ERROR "expected exit status ${STATUS}, got ${status}")
endif()
# Semicolons would split the lines of the list.
string(REPLACE ";" "," err "${err}")
string(REGEX MATCHALL "tstMain: error[^\n]*" lines "${err}")
list(LENGTH lines count)
if(NOT count EQUAL ERRORS)
  message(FATAL_ERROR "expected ${ERRORS} error line(s), got ${count}: ${lines}")
endif()
if(DEFINED MESSAGE)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "${MESSAGE}")
      message(FATAL_ERROR "error line '${line}' does not match '${MESSAGE}'")
    endif()
  endforeach()
endif()
# run_main says so before it calls MPI_Abort (Open MPI's own banner is not always printed).
if(ABORT AND NOT err MATCHES "ending the job\\)")
  message(FATAL_ERROR "expected the job to be ended with MPI_Abort")
elseif(NOT ABORT AND err MATCHES "MPI_ABORT|ending the job")
  message(FATAL_ERROR "no rank should have aborted")
endif()
