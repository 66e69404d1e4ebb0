# Test harness in the style of Kokkos and Cabana: a test body is written once in unit_tests/<pkg>/tst<Name>.hpp
# with TEST(TEST_CATEGORY, ...) and TEST_EXECSPACE, and one translation unit per enabled Kokkos backend is
# generated from it (TEST_CATEGORY_NAME is the backend as a string, for file names that must not collide when the
# backends' tests run in parallel). Targets are Tessel_<Pkg>_Test_<Name>_<BACKEND>; ctest names are
# <pkg>.<Name>.<backend>.
#
#   tessel_add_tests(PACKAGE <pkg> NAMES <Name...> [LIBS <targets>] [LABELS <labels>])
#       per-backend tests of tst<Name>.hpp
#   tessel_add_tests_nobackend(PACKAGE <pkg> NAMES <Name...> [LIBS ...] [LABELS ...] [GPU] [DATA])
#       tests from tst<Name>.cpp (.cu for GPU tests that need nvcc); GPU tests are labelled gpu and reported as
#       skipped where no device is present; DATA tests get TESSEL_DATA_DIR and are skipped when it is absent
#   tessel_add_tests_mpi(PACKAGE <pkg> NAMES <Name...> [RANKS 1 2 4] [LIBS ...] [LABELS ...])
#       tst<Name>.cpp run under mpiexec at each rank count (label mpi); once, on one rank, without MPI

set(Tessel_TEST_BACKENDS)
foreach(_dev SERIAL OPENMP THREADS CUDA)
  if(Kokkos_ENABLE_${_dev} OR "${_dev}" IN_LIST Kokkos_DEVICES)
    list(APPEND Tessel_TEST_BACKENDS ${_dev})
  endif()
endforeach()
if(NOT Tessel_TEST_BACKENDS)
  set(Tessel_TEST_BACKENDS SERIAL)
endif()
set(Tessel_TEST_SPACE_SERIAL Kokkos::Serial)
set(Tessel_TEST_SPACE_OPENMP Kokkos::OpenMP)
set(Tessel_TEST_SPACE_THREADS Kokkos::Threads)
set(Tessel_TEST_SPACE_CUDA Kokkos::Cuda)

# Open MPI refuses to run as root and to place more ranks than cores unless told; the variables are ignored by
# other MPI implementations and by non-root users.
# MPI tests place up to 4 ranks on the machine's cores; with an OpenMP Kokkos each rank also has OMP_NUM_THREADS
# threads, and OpenMP threads that spin between kernels take the cores from the other ranks (moe.MoeLayer.mpi_4 at
# 2 threads on 2 cores: 175 s spinning, 43 s with passive waits), so they wait passively.
# Layers that tune on first use keep the result in a per-user cache: tests keep theirs in the build tree, never in
# the home directory of whoever runs them (the test main sets the same default for tests run without ctest).
set(Tessel_MPI_TEST_ENVIRONMENT OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                                OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
                                OMP_WAIT_POLICY=passive TESSEL_CACHE_DIR=${PROJECT_BINARY_DIR}/test-cache)

# core -> Core, for target names.
function(_tessel_title_case name out)
  string(SUBSTRING ${name} 0 1 _first)
  string(TOUPPER ${_first} _first)
  string(SUBSTRING ${name} 1 -1 _rest)
  set(${out} "${_first}${_rest}" PARENT_SCOPE)
endfunction()

function(_tessel_test_target target pkg)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/unit_tests)
  target_link_libraries(${target} PRIVATE tessel_test_main Tessel::${pkg} ${ARG_LIBS})
  tessel_target_defaults(${target})
endfunction()

function(tessel_add_tests)
  cmake_parse_arguments(ARG "" "PACKAGE" "NAMES;LIBS;LABELS" ${ARGN})
  _tessel_title_case(${ARG_PACKAGE} _Pkg)
  foreach(_backend IN LISTS Tessel_TEST_BACKENDS)
    string(TOLOWER ${_backend} _category)
    foreach(_name IN LISTS ARG_NAMES)
      set(_tu ${CMAKE_CURRENT_BINARY_DIR}/${_backend}/tst${_name}_${_category}.cpp)
      # Written to a temporary file and copied only on change, so reconfiguring does not trigger rebuilds.
      file(WRITE ${_tu}.tmp
           "#include <Kokkos_Core.hpp>\n#define TEST_CATEGORY ${_category}\n#define TEST_CATEGORY_NAME \"${_category}\"\n"
           "#define TEST_EXECSPACE ${Tessel_TEST_SPACE_${_backend}}\n#include <tst${_name}.hpp>\n")
      configure_file(${_tu}.tmp ${_tu} COPYONLY)
      set(_target Tessel_${_Pkg}_Test_${_name}_${_backend})
      _tessel_test_target(${_target} ${ARG_PACKAGE} SOURCES ${_tu} LIBS ${ARG_LIBS})
      add_test(NAME ${ARG_PACKAGE}.${_name}.${_category} COMMAND ${_target})
      set_tests_properties(${ARG_PACKAGE}.${_name}.${_category} PROPERTIES LABELS "unit;${ARG_PACKAGE};${ARG_LABELS}")
    endforeach()
  endforeach()
endfunction()

function(tessel_add_tests_nobackend)
  cmake_parse_arguments(ARG "GPU;DATA" "PACKAGE" "NAMES;LIBS;LABELS" ${ARGN})
  _tessel_title_case(${ARG_PACKAGE} _Pkg)
  foreach(_name IN LISTS ARG_NAMES)
    set(_src ${CMAKE_CURRENT_SOURCE_DIR}/tst${_name}.cpp)
    if(NOT EXISTS ${_src})
      set(_src ${CMAKE_CURRENT_SOURCE_DIR}/tst${_name}.cu)
    endif()
    set(_target Tessel_${_Pkg}_Test_${_name})
    _tessel_test_target(${_target} ${ARG_PACKAGE} SOURCES ${_src} LIBS ${ARG_LIBS})
    add_test(NAME ${ARG_PACKAGE}.${_name} COMMAND ${_target})
    set(_labels unit ${ARG_PACKAGE} ${ARG_LABELS})
    if(ARG_GPU)
      list(APPEND _labels gpu)
      set_tests_properties(${ARG_PACKAGE}.${_name} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
    endif()
    if(ARG_DATA)
      list(APPEND _labels data)
      set_tests_properties(${ARG_PACKAGE}.${_name} PROPERTIES ENVIRONMENT "TESSEL_DATA_DIR=${Tessel_DATA_DIR}"
                                                               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
    endif()
    set_tests_properties(${ARG_PACKAGE}.${_name} PROPERTIES LABELS "${_labels}")
  endforeach()
endfunction()

function(tessel_add_tests_mpi)
  cmake_parse_arguments(ARG "" "PACKAGE" "NAMES;RANKS;LIBS;LABELS" ${ARGN})
  if(NOT Tessel_ENABLE_MPI)
    # Without MPI the same tests run once, on one rank (Communicator::world() is then a Self communicator).
    tessel_add_tests_nobackend(PACKAGE ${ARG_PACKAGE} NAMES ${ARG_NAMES} LIBS ${ARG_LIBS} LABELS ${ARG_LABELS})
    return()
  endif()
  if(NOT ARG_RANKS)
    set(ARG_RANKS 1 2 4)
  endif()
  _tessel_title_case(${ARG_PACKAGE} _Pkg)
  foreach(_name IN LISTS ARG_NAMES)
    set(_target Tessel_${_Pkg}_Test_${_name}_MPI)
    _tessel_test_target(${_target} ${ARG_PACKAGE} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tst${_name}.cpp LIBS
                        ${ARG_LIBS})
    foreach(_np IN LISTS ARG_RANKS)
      set(_test ${ARG_PACKAGE}.${_name}.mpi_${_np})
      add_test(NAME ${_test} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_np} ${MPIEXEC_PREFLAGS}
                                     $<TARGET_FILE:${_target}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(
        ${_test} PROPERTIES LABELS "unit;mpi;${ARG_PACKAGE};${ARG_LABELS}" PROCESSORS ${_np}
                            ENVIRONMENT "${Tessel_MPI_TEST_ENVIRONMENT};TESSEL_DATA_DIR=${Tessel_DATA_DIR}")
    endforeach()
  endforeach()
endfunction()
