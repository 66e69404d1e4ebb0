# Looks for nvcc without enabling the CUDA language, so that Tessel_ENABLE_CUDA can default to ON exactly when a
# CUDA toolkit is installed. A toolkit outside PATH is found in its usual prefix; the user's CMAKE_CUDA_COMPILER or
# CUDACXX always wins.
include(CheckLanguage)

function(tessel_probe_cuda_compiler result)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(
      Tessel_NVCC nvcc
      HINTS ENV CUDA_HOME ENV CUDA_PATH
      PATHS /usr/local/cuda /opt/cuda
      PATH_SUFFIXES bin)
    if(Tessel_NVCC)
      set(CMAKE_CUDA_COMPILER "${Tessel_NVCC}" CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(${result} ON PARENT_SCOPE)
  else()
    set(${result} OFF PARENT_SCOPE)
  endif()
endfunction()
