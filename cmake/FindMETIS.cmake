# Finds METIS (serial graph partitioning, e.g. Debian's libmetis-dev) and defines the imported target METIS::METIS.
#
# Result variables: METIS_FOUND, METIS_INCLUDE_DIR, METIS_LIBRARY, METIS_IDXTYPEWIDTH (32 or 64, from metis.h).
# Hints: METIS_ROOT (CMake or environment variable).
find_path(
  METIS_INCLUDE_DIR metis.h
  HINTS ${METIS_ROOT} ENV METIS_ROOT
  PATH_SUFFIXES include include/metis)
find_library(
  METIS_LIBRARY metis
  HINTS ${METIS_ROOT} ENV METIS_ROOT
  PATH_SUFFIXES lib lib64)

if(METIS_INCLUDE_DIR AND EXISTS "${METIS_INCLUDE_DIR}/metis.h")
  file(STRINGS "${METIS_INCLUDE_DIR}/metis.h" _metis_width REGEX "^#define IDXTYPEWIDTH [0-9]+")
  string(REGEX REPLACE "^#define IDXTYPEWIDTH ([0-9]+).*" "\\1" METIS_IDXTYPEWIDTH "${_metis_width}")
  file(STRINGS "${METIS_INCLUDE_DIR}/metis.h" _metis_version REGEX "^#define METIS_VER_(MAJOR|MINOR|SUBMINOR)")
  foreach(_part MAJOR MINOR SUBMINOR)
    string(REGEX REPLACE ".*METIS_VER_${_part} +([0-9]+).*" "\\1" _v_${_part} "${_metis_version}")
  endforeach()
  set(METIS_VERSION "${_v_MAJOR}.${_v_MINOR}.${_v_SUBMINOR}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(
  METIS
  REQUIRED_VARS METIS_LIBRARY METIS_INCLUDE_DIR
  VERSION_VAR METIS_VERSION)

if(METIS_FOUND AND NOT TARGET METIS::METIS)
  add_library(METIS::METIS UNKNOWN IMPORTED)
  set_target_properties(METIS::METIS PROPERTIES IMPORTED_LOCATION "${METIS_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES
                                                                                    "${METIS_INCLUDE_DIR}")
endif()
mark_as_advanced(METIS_INCLUDE_DIR METIS_LIBRARY)
