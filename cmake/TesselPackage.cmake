# Helpers that give every package the same shape: target tessel_<pkg> exported as Tessel::<pkg> (the component
# <pkg> of find_package(Tessel), in its own export set Tessel<Pkg>Targets), headers under
# <pkg>/include/tessel/<pkg>/, CUDA sources under <pkg>/src/cuda/ compiled only when Tessel_ENABLE_CUDA is on.
#
# The CUDA runtime and NCCL are private dependencies of the libraries: a consumer that uses only host headers
# needs neither. The device headers (tessel/<pkg>/cuda/*.hpp) need the CUDA toolkit and NCCL headers: the
# interface target Tessel::cuda (component cuda) carries them, inside this build (where every package passes it
# on) and for consumers, who name it.

include(CMakePackageConfigHelpers)

set(Tessel_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/Tessel")
# Data files (tessel_add_share_files): installed here, and copied into the build tree for uninstalled programs.
set(Tessel_INSTALL_DATADIR "${CMAKE_INSTALL_DATADIR}/tessel")
set(Tessel_BUILD_SHARE_DIR "${PROJECT_BINARY_DIR}/share/tessel")
# The libraries' ABI may change with every minor release before 1.0 (as Kokkos numbers its libraries).
set(Tessel_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})

# core -> Core (export set and file names).
function(_tessel_component_title name out)
  string(SUBSTRING ${name} 0 1 _first)
  string(TOUPPER ${_first} _first)
  string(SUBSTRING ${name} 1 -1 _rest)
  set(${out} "${_first}${_rest}" PARENT_SCOPE)
endfunction()

# Records a component for TesselConfig.cmake (in order: a component's dependencies come first).
function(_tessel_add_component component)
  set_property(GLOBAL APPEND PROPERTY Tessel_COMPONENTS ${component})
endfunction()

# tessel_add_package(<pkg> SOURCES <cpp...> [CUDA_SOURCES <cu...>] [PUBLIC_DEPS <targets...>]
#                    [PRIVATE_DEPS <targets...>])
function(tessel_add_package pkg)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target tessel_${pkg})
  set(sources ${ARG_SOURCES})
  if(Tessel_ENABLE_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  endif()
  add_library(${target} ${sources})
  add_library(Tessel::${pkg} ALIAS ${target})
  set_target_properties(
    ${target}
    PROPERTIES EXPORT_NAME ${pkg}
               OUTPUT_NAME tessel_${pkg}
               POSITION_INDEPENDENT_CODE ON
               VERSION ${PROJECT_VERSION}
               SOVERSION ${Tessel_SOVERSION})
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_include_directories(
    ${target} PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
                     $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/core/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
  if(Tessel_ENABLE_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(Tessel_ENABLE_CUDA)
    # Inside this build every package passes the device headers' requirements on (tests, apps and benchmarks use
    # them); installed, only Tessel::cuda does.
    target_link_libraries(${target} PUBLIC $<BUILD_INTERFACE:tessel_cuda>)
    if(ARG_CUDA_SOURCES)
      target_link_libraries(${target} PRIVATE CUDA::cudart)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
    endif()
  endif()
  _tessel_component_title(${pkg} _Pkg)
  install(
    TARGETS ${target}
    EXPORT Tessel${_Pkg}Targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(
    DIRECTORY include/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    PATTERN "*.in" EXCLUDE)
  _tessel_add_component(${pkg})
endfunction()

# Adds the subdirectory <pkg> of the current folder for every enabled package that has one (apps, benchmarks,
# dataset tools and tests keep one folder per package).
function(tessel_add_package_subdirectories)
  foreach(_pkg moe gnn sched)
    string(TOUPPER ${_pkg} _PKG)
    if(Tessel_ENABLE_${_PKG} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_pkg}/CMakeLists.txt)
      add_subdirectory(${_pkg})
    endif()
  endforeach()
endfunction()

# Compile options shared by apps, tests and benchmarks (never by consumers).
function(tessel_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
  if(Tessel_ENABLE_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()

# The interface target of the device headers (component cuda): the CUDA runtime's and NCCL's headers and libraries.
# Called by core before any package is added.
function(tessel_add_cuda_interface)
  add_library(tessel_cuda INTERFACE)
  add_library(Tessel::cuda ALIAS tessel_cuda)
  set_target_properties(tessel_cuda PROPERTIES EXPORT_NAME cuda)
  target_link_libraries(tessel_cuda INTERFACE CUDA::cudart $<INSTALL_INTERFACE:Tessel::core>)
  if(Tessel_ENABLE_NCCL)
    target_link_libraries(tessel_cuda INTERFACE NCCL::nccl)
  endif()
  install(TARGETS tessel_cuda EXPORT TesselCudaTargets)
endfunction()

# tessel_add_share_files(<subdirectory> <files...>): data files that programs find with tessel::share_file
# ("<subdirectory>/<name>"): installed under share/tessel/<subdirectory>, copied into the build tree's share/tessel.
function(tessel_add_share_files subdirectory)
  foreach(_file IN LISTS ARGN)
    get_filename_component(_name ${_file} NAME)
    configure_file(${_file} ${Tessel_BUILD_SHARE_DIR}/${subdirectory}/${_name} COPYONLY)
  endforeach()
  install(FILES ${ARGN} DESTINATION ${Tessel_INSTALL_DATADIR}/${subdirectory})
endfunction()

# Packages that need more than core's dependencies register a line of CMake for their component in
# TesselConfig.cmake, e.g. tessel_add_config_dependency("find_dependency(METIS)") in gnn/CMakeLists.txt (the
# component is the folder's name).
function(tessel_add_config_dependency line)
  get_filename_component(_component ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  set_property(GLOBAL APPEND_STRING PROPERTY Tessel_CONFIG_DEPENDENCIES_${_component} "  ${line}\n")
endfunction()

function(tessel_install_package)
  get_property(_components GLOBAL PROPERTY Tessel_COMPONENTS)
  if(TARGET tessel_cuda)
    list(APPEND _components cuda)
  endif()
  # One export set per component; TesselConfig.cmake loads those asked for, after their dependencies.
  set(Tessel_COMPONENT_DEPENDENCIES "")
  foreach(_component IN LISTS _components)
    _tessel_component_title(${_component} _Title)
    install(
      EXPORT Tessel${_Title}Targets
      NAMESPACE Tessel::
      DESTINATION ${Tessel_INSTALL_CMAKEDIR})
    get_property(_lines GLOBAL PROPERTY Tessel_CONFIG_DEPENDENCIES_${_component})
    string(APPEND Tessel_COMPONENT_DEPENDENCIES "if(_tessel_component STREQUAL \"${_component}\")\n${_lines}endif()\n")
  endforeach()
  set(Tessel_COMPONENTS "${_components}")
  if(BUILD_SHARED_LIBS)
    set(_tessel_static FALSE)
  else()
    set(_tessel_static TRUE)
  endif()
  configure_package_config_file(
    ${PROJECT_SOURCE_DIR}/cmake/TesselConfig.cmake.in ${PROJECT_BINARY_DIR}/TesselConfig.cmake
    INSTALL_DESTINATION ${Tessel_INSTALL_CMAKEDIR}
    PATH_VARS Tessel_INSTALL_DATADIR)
  # Before 1.0 a minor release may change the API: only the same major.minor is compatible.
  if(PROJECT_VERSION_MAJOR EQUAL 0)
    set(_compatibility SameMinorVersion)
  else()
    set(_compatibility SameMajorVersion)
  endif()
  write_basic_package_version_file(
    ${PROJECT_BINARY_DIR}/TesselConfigVersion.cmake
    VERSION ${PROJECT_VERSION}
    COMPATIBILITY ${_compatibility})
  install(FILES ${PROJECT_BINARY_DIR}/TesselConfig.cmake ${PROJECT_BINARY_DIR}/TesselConfigVersion.cmake
                ${PROJECT_SOURCE_DIR}/cmake/TesselFindKokkos.cmake DESTINATION ${Tessel_INSTALL_CMAKEDIR})
  file(GLOB _tessel_find_modules ${PROJECT_SOURCE_DIR}/cmake/Find*.cmake)
  install(FILES ${_tessel_find_modules} DESTINATION ${Tessel_INSTALL_CMAKEDIR})
endfunction()
