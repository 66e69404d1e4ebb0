# Finds Kokkos (and optionally Kokkos Kernels) and guarantees the targets Kokkos::kokkos and Kokkos::kokkoskernels.
#
# A Kokkos installed by its own CMake build already exports both targets with correct include directories:
# then nothing here touches them. Debian's Trilinos packaging (libtrilinos-kokkos-dev 13.2, Kokkos 3.4.01) is
# broken for multiarch: its Kokkos::kokkos points INTERFACE_INCLUDE_DIRECTORIES at <libdir>/../include
# (/usr/lib/include, which does not exist; the headers are in /usr/include/trilinos), and Kokkos Kernels exports
# only trilinos_kokkoskernels. This module repairs both inside our own build and in TesselConfig.cmake (the
# system files are never modified): it replaces include directories that do not hold the Kokkos headers with
# the verified one, and wraps trilinos_kokkoskernels as Kokkos::kokkoskernels.
#
# Usage: tessel_find_kokkos([KERNELS])  (a macro, so the found variables land in the caller's scope)

function(_tessel_flatten_link_items out)
  set(result)
  foreach(item IN LISTS ARGN)
    if(TARGET ${item})
      get_target_property(_type ${item} TYPE)
      if(NOT _type STREQUAL "INTERFACE_LIBRARY")
        set(_loc "")
        foreach(_prop IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_NONE
                      IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_DEBUG)
          get_target_property(_try ${item} ${_prop})
          if(_try AND NOT _loc)
            set(_loc "${_try}")
          endif()
        endforeach()
        if(NOT _loc)
          message(FATAL_ERROR "TesselFindKokkos: imported target '${item}' has no library location")
        endif()
        list(APPEND result "${_loc}")
      endif()
      get_target_property(_deps ${item} INTERFACE_LINK_LIBRARIES)
      if(_deps)
        _tessel_flatten_link_items(_sub ${_deps})
        list(APPEND result ${_sub})
      endif()
    elseif(item)
      list(APPEND result "${item}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES result)
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

function(_tessel_kokkos_include_dir out header)
  set(_dir "")
  foreach(_candidate IN LISTS ARGN)
    if(EXISTS "${_candidate}/${header}")
      get_filename_component(_dir "${_candidate}" REALPATH)
      break()
    endif()
  endforeach()
  if(NOT _dir)
    find_path(
      _tessel_kokkos_inc_${header} ${header}
      HINTS ${Kokkos_INSTALL_DIR} ${Kokkos_ROOT} ENV Kokkos_ROOT
      PATH_SUFFIXES include/trilinos include/kokkos include trilinos kokkos)
    set(_dir "${_tessel_kokkos_inc_${header}}")
  endif()
  if(NOT _dir)
    message(FATAL_ERROR "TesselFindKokkos: the Kokkos configuration names include directories '${ARGN}', "
                        "none of which holds ${header}; set Kokkos_ROOT to a correct installation")
  endif()
  set(${out} "${_dir}" PARENT_SCOPE)
endfunction()

function(_tessel_wrap_kokkos_target name header include_dirs)
  _tessel_kokkos_include_dir(_inc ${header} ${include_dirs})
  _tessel_flatten_link_items(_libs ${ARGN})
  add_library(${name} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_inc}" INTERFACE_LINK_LIBRARIES
                                                                                   "${_libs}")
  message(STATUS "Tessel: repaired ${name} from Trilinos packaging (include ${_inc})")
endfunction()

# Keeps \p target's include directories when one of them holds \p header; otherwise replaces them with the
# directory found from \p candidates (the package's *_INCLUDE_DIRS) or by searching.
function(_tessel_repair_include_dirs target header candidates)
  get_target_property(_dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(_dirs)
    foreach(_dir IN LISTS _dirs)
      if(EXISTS "${_dir}/${header}")
        return()
      endif()
    endforeach()
  endif()
  _tessel_kokkos_include_dir(_inc ${header} ${candidates})
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_inc}")
  message(STATUS "Tessel: repaired ${target} include directory '${_dirs}' -> '${_inc}'")
endfunction()

macro(tessel_find_kokkos)
  cmake_parse_arguments(_TFK "KERNELS" "" "" ${ARGN})
  if(NOT TARGET Kokkos::kokkos)
    find_package(Kokkos REQUIRED)
  endif()
  if(TARGET Kokkos::kokkos)
    _tessel_repair_include_dirs(Kokkos::kokkos Kokkos_Core.hpp "${Kokkos_INCLUDE_DIRS}")
  else()
    if(NOT Kokkos_LIBRARIES)
      message(FATAL_ERROR "TesselFindKokkos: Kokkos was found but exports neither Kokkos::kokkos nor Kokkos_LIBRARIES")
    endif()
    _tessel_wrap_kokkos_target(Kokkos::kokkos Kokkos_Core.hpp "${Kokkos_INCLUDE_DIRS}" ${Kokkos_LIBRARIES}
                               ${Kokkos_TPL_LIBRARIES})
  endif()
  if(NOT DEFINED Kokkos_VERSION OR Kokkos_VERSION STREQUAL "")
    set(Kokkos_VERSION "${Kokkos_VERSION_MAJOR}.${Kokkos_VERSION_MINOR}.${Kokkos_VERSION_PATCH}")
  endif()
  if(_TFK_KERNELS AND NOT TARGET Kokkos::kokkoskernels)
    find_package(KokkosKernels REQUIRED)
    if(NOT TARGET Kokkos::kokkoskernels)
      if(TARGET trilinos_kokkoskernels)
        _tessel_wrap_kokkos_target(Kokkos::kokkoskernels KokkosSparse_spmv.hpp "${KokkosKernels_INCLUDE_DIRS}"
                                   trilinos_kokkoskernels)
        target_link_libraries(Kokkos::kokkoskernels INTERFACE Kokkos::kokkos)
      else()
        message(FATAL_ERROR "TesselFindKokkos: KokkosKernels was found but exports neither "
                            "Kokkos::kokkoskernels nor trilinos_kokkoskernels")
      endif()
    endif()
  endif()
endmacro()
