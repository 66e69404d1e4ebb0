# Finds Kokkos and (optionally) the Kokkos Kernels built against it, and guarantees the targets Kokkos::kokkos and
# Kokkos::kokkoskernels.
#
# A Kokkos installed by its own CMake build already exports both targets with correct include directories:
# then nothing here touches them. Debian's Trilinos packaging (libtrilinos-kokkos-dev 13.2, Kokkos 3.4.01) is
# broken for multiarch: its Kokkos::kokkos points INTERFACE_INCLUDE_DIRECTORIES at <libdir>/../include
# (/usr/lib/include, which does not exist; the headers are in /usr/include/trilinos), and Kokkos Kernels exports
# only trilinos_kokkoskernels. This module repairs both inside our own build and in TesselConfig.cmake (the
# system files are never modified): it replaces include directories that do not hold the Kokkos headers with
# the verified one, and wraps trilinos_kokkoskernels as Kokkos::kokkoskernels.
#
# It also refuses configurations that would fail later with obscure errors:
# - a Kokkos Kernels that was not built against the Kokkos found (another release, or another installation of
#   Kokkos named in its package configuration); Kokkos Kernels is searched for in Kokkos's prefix first, so
#   -DKokkos_ROOT alone pairs a private Kokkos with the Kokkos Kernels installed beside it;
# - a static Kokkos that is not position-independent, when Tessel builds shared libraries.
#
# Usage: tessel_find_kokkos([KERNELS])  (a macro, so the found variables land in the caller's scope)
# Sets Tessel_KOKKOS_DIR and Tessel_KOKKOSKERNELS_DIR: the package directories found (for TesselConfig.cmake).

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

# The installation prefix of a package whose configuration file is in <prefix>/<libdir>/cmake/<Name>/.
function(_tessel_package_prefix out dir)
  get_filename_component(_real "${dir}" REALPATH)
  get_filename_component(_prefix "${_real}/../../.." REALPATH)
  set(${out} "${_prefix}" PARENT_SCOPE)
endfunction()

# A static libkokkoscore must be position-independent to go into Tessel's shared libraries; the linker's error
# ("relocation R_X86_64_32 ... recompile with -fPIC") names neither Kokkos nor the fix, so try it here first.
function(_tessel_check_kokkos_pic)
  if(NOT BUILD_SHARED_LIBS OR NOT TARGET Kokkos::kokkoscore)
    return()
  endif()
  get_target_property(_type Kokkos::kokkoscore TYPE)
  if(NOT _type STREQUAL "STATIC_LIBRARY")
    return()
  endif()
  set(_dir "${CMAKE_BINARY_DIR}/CMakeFiles/TesselKokkosPic")
  file(WRITE "${_dir}/src/CMakeLists.txt"
       "cmake_minimum_required(VERSION 3.20)\nproject(TesselKokkosPic CXX)\nfind_package(Kokkos REQUIRED)\n"
       "add_library(pic SHARED pic.cpp)\ntarget_link_libraries(pic PRIVATE Kokkos::kokkos)\n")
  file(WRITE "${_dir}/src/pic.cpp" "#include <Kokkos_Core.hpp>\nvoid tessel_pic_probe() { Kokkos::fence(); }\n")
  try_compile(_pic_ok "${_dir}/build" "${_dir}/src" TesselKokkosPic
              CMAKE_FLAGS "-DKokkos_DIR=${Kokkos_DIR}" "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
              OUTPUT_VARIABLE _pic_log)
  if(NOT _pic_ok)
    message(FATAL_ERROR "TesselFindKokkos: the Kokkos in '${Kokkos_DIR}' is a static library that cannot be linked "
                        "into a shared library (not position-independent). Rebuild Kokkos with "
                        "-DBUILD_SHARED_LIBS=ON (or -DCMAKE_POSITION_INDEPENDENT_CODE=ON), or build Tessel with "
                        "-DBUILD_SHARED_LIBS=OFF. Linker output:\n${_pic_log}")
  endif()
endfunction()

# Kokkos Kernels is tied to one Kokkos release, and its headers and library to the Kokkos they were built with.
function(_tessel_check_kernels_match)
  set(_kokkos_prefix "${Kokkos_INSTALL_DIR}")
  if(NOT _kokkos_prefix AND Kokkos_DIR)
    _tessel_package_prefix(_kokkos_prefix "${Kokkos_DIR}")
  endif()
  if(KokkosKernels_VERSION)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kk_mm "${KokkosKernels_VERSION}")
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _k_mm "${Kokkos_VERSION}")
    if(NOT _kk_mm STREQUAL _k_mm)
      message(FATAL_ERROR "TesselFindKokkos: Kokkos Kernels ${KokkosKernels_VERSION} (${KokkosKernels_DIR}) does not "
                          "belong to Kokkos ${Kokkos_VERSION} (${Kokkos_DIR}): Kokkos Kernels must be the release "
                          "of the Kokkos it is used with. Set KokkosKernels_ROOT to the Kokkos Kernels built against "
                          "this Kokkos.")
    endif()
    # A Kokkos Kernels configuration names the Kokkos it was built with; a second installation of the same
    # release is still a different ABI (backends, options).
    file(GLOB _kk_configs "${KokkosKernels_DIR}/KokkosKernelsConfig*.cmake")
    foreach(_file IN LISTS _kk_configs)
      file(STRINGS "${_file}" _lines REGEX "Kokkos_DIR|find_dependency\\(Kokkos")
      foreach(_line IN LISTS _lines)
        if(_line MATCHES "(/[^ \")]+/cmake/Kokkos)")
          get_filename_component(_built_with "${CMAKE_MATCH_1}" REALPATH)
          get_filename_component(_found "${Kokkos_DIR}" REALPATH)
          if(EXISTS "${_built_with}" AND NOT _built_with STREQUAL _found)
            message(FATAL_ERROR "TesselFindKokkos: Kokkos Kernels in '${KokkosKernels_DIR}' was built against the "
                                "Kokkos in '${_built_with}', but Tessel found Kokkos in '${_found}'. Point "
                                "Kokkos_ROOT and KokkosKernels_ROOT at one matching pair.")
          endif()
        endif()
      endforeach()
    endforeach()
  else()
    # Trilinos packaging carries no Kokkos Kernels version: it belongs to the Kokkos of the same Trilinos install.
    if(NOT KokkosKernels_INSTALL_DIR OR NOT _kokkos_prefix)
      message(FATAL_ERROR "TesselFindKokkos: Kokkos Kernels in '${KokkosKernels_DIR}' states neither its version nor "
                          "its installation; cannot check that it belongs to Kokkos ${Kokkos_VERSION}")
    endif()
    get_filename_component(_a "${KokkosKernels_INSTALL_DIR}" REALPATH)
    get_filename_component(_b "${_kokkos_prefix}" REALPATH)
    if(NOT _a STREQUAL _b)
      message(FATAL_ERROR "TesselFindKokkos: Kokkos Kernels from the Trilinos installation in '${_a}' does not "
                          "belong to Kokkos ${Kokkos_VERSION} in '${_b}'. Set KokkosKernels_ROOT to the Kokkos "
                          "Kernels built against this Kokkos.")
    endif()
  endif()
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
  _tessel_check_kokkos_pic()
  set(Tessel_KOKKOS_DIR "${Kokkos_DIR}")
  if(_TFK_KERNELS AND NOT TARGET Kokkos::kokkoskernels)
    # Kokkos's own prefix first: a private Kokkos is usually installed with its Kokkos Kernels beside it.
    _tessel_package_prefix(_tfk_prefix "${Kokkos_DIR}")
    find_package(KokkosKernels HINTS "${_tfk_prefix}" REQUIRED)
    _tessel_check_kernels_match()
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
    set(Tessel_KOKKOSKERNELS_DIR "${KokkosKernels_DIR}")
    message(STATUS "Tessel: Kokkos ${Kokkos_VERSION} (${Kokkos_DIR}), Kokkos Kernels "
                   "${KokkosKernels_VERSION} (${KokkosKernels_DIR})")
  endif()
endmacro()
