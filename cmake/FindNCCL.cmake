# FindNCCL: NCCL's own NCCLConfig.cmake (NCCL::nccl) exists only from 2.29.7; distro and toolkit-bundled NCCL
# need this module. Honours NCCL_ROOT and NCCL_HOME (variables or environment), then the CUDA toolkit prefix.
#
# Result: NCCL_FOUND, NCCL_VERSION, NCCL_INCLUDE_DIR, NCCL_LIBRARY and the imported target NCCL::nccl.

find_package(NCCL CONFIG QUIET)
if(TARGET NCCL::nccl)
  set(NCCL_FOUND TRUE)
  return()
endif()

set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${NCCL_HOME} $ENV{NCCL_HOME})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
if(CUDAToolkit_INCLUDE_DIRS)
  list(GET CUDAToolkit_INCLUDE_DIRS 0 _nccl_cuda_inc)
  get_filename_component(_nccl_cuda_prefix "${_nccl_cuda_inc}" DIRECTORY)
  list(APPEND _nccl_hints ${_nccl_cuda_prefix})
endif()

find_path(
  NCCL_INCLUDE_DIR nccl.h
  HINTS ${_nccl_hints}
  PATH_SUFFIXES include)
find_library(
  NCCL_LIBRARY
  NAMES nccl
  HINTS ${_nccl_hints}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_part} +([0-9]+).*" "\\1" NCCL_VERSION_${_part} "${_nccl_ver}")
  endforeach()
  set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(
  NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES
                                                                                 "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
