# Helpers that give every package the same shape: target tessel_<pkg> exported as Tessel::<pkg>, headers under
# <pkg>/include/tessel/<pkg>/, CUDA sources under <pkg>/src/cuda/ compiled only when Tessel_ENABLE_CUDA is on.

include(CMakePackageConfigHelpers)

set(Tessel_EXPORT_SET TesselTargets)
set(Tessel_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/Tessel")

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
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${pkg} OUTPUT_NAME tessel_${pkg} POSITION_INDEPENDENT_CODE ON)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_include_directories(
    ${target} PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
                     $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/core/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
  if(Tessel_ENABLE_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(Tessel_ENABLE_CUDA AND ARG_CUDA_SOURCES)
    target_link_libraries(${target} PUBLIC CUDA::cudart)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  endif()
  install(
    TARGETS ${target}
    EXPORT ${Tessel_EXPORT_SET}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(
    DIRECTORY include/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    PATTERN "*.in" EXCLUDE)
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

# Packages that need more than core's dependencies register a line of CMake for TesselConfig.cmake, e.g.
# tessel_add_config_dependency("find_dependency(METIS)").
function(tessel_add_config_dependency line)
  set_property(GLOBAL APPEND_STRING PROPERTY Tessel_CONFIG_DEPENDENCIES "${line}\n")
endfunction()

function(tessel_install_package)
  get_property(Tessel_EXTRA_CONFIG_DEPENDENCIES GLOBAL PROPERTY Tessel_CONFIG_DEPENDENCIES)
  install(
    EXPORT ${Tessel_EXPORT_SET}
    NAMESPACE Tessel::
    DESTINATION ${Tessel_INSTALL_CMAKEDIR})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TesselConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/TesselConfig.cmake INSTALL_DESTINATION ${Tessel_INSTALL_CMAKEDIR})
  write_basic_package_version_file(
    ${PROJECT_BINARY_DIR}/TesselConfigVersion.cmake
    VERSION ${PROJECT_VERSION}
    COMPATIBILITY SameMajorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/TesselConfig.cmake ${PROJECT_BINARY_DIR}/TesselConfigVersion.cmake
                ${PROJECT_SOURCE_DIR}/cmake/TesselFindKokkos.cmake DESTINATION ${Tessel_INSTALL_CMAKEDIR})
  file(GLOB _tessel_find_modules ${PROJECT_SOURCE_DIR}/cmake/Find*.cmake)
  install(FILES ${_tessel_find_modules} DESTINATION ${Tessel_INSTALL_CMAKEDIR})
endfunction()
