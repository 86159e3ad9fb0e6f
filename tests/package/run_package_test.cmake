# Driver of the `package` test: installs the current build into a scratch prefix, then
# configures, builds and runs the consumer project of this folder against that prefix only.
#
#   cmake -DBUILD_DIR=<pkscan build> -DCONSUMER_DIR=<this folder> -DWORK_DIR=<scratch>
#         [-DCXX_COMPILER=<path>] [-DBUILD_TYPE=Release] [-DCONFIG=<config>]
#         [-DMPIEXEC=<mpirun of the MPI pkscan was built with>]
#         -P run_package_test.cmake
#
# With MPIEXEC (pkscan built with MPI) the consumer also uses the `mpi` component and its
# mpi_consumer runs under `mpirun -np 2` (Open MPI's settings for one machine, as root, on
# loopback: tests/mpi/common.sh).
#
# Fails (non-zero exit, FATAL_ERROR) at the first step that does not work.
cmake_minimum_required(VERSION 3.21)

foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_package_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "package test: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(install_args --install ${BUILD_DIR} --prefix ${prefix})
if(CONFIG)
  list(APPEND install_args --config ${CONFIG})
endif()
step("cmake --install into ${prefix}" ${CMAKE_COMMAND} ${install_args})

# The benchmark programs (bench/: pkscan-bench, ...) are never installed.
file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
list(FILTER installed INCLUDE REGEX "bench")
if(installed)
  message(FATAL_ERROR "package test: benchmarks installed into ${prefix}: ${installed}")
endif()

# Only the scratch prefix may provide pkscan: no package registries, no build-tree export.
set(configure_args -S ${CONSUMER_DIR} -B ${consumer_build}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
set(mpi_args)
if(MPIEXEC)
  set(mpi_args -DPKSCAN_CONSUMER_MPI=ON)
endif()
step("configure the consumer" ${CMAKE_COMMAND} ${configure_args} ${mpi_args})

file(STRINGS ${consumer_build}/CMakeCache.txt found REGEX "^pkscan_DIR:")
string(REGEX REPLACE "^pkscan_DIR:[A-Z]+=" "" found "${found}")
file(REAL_PATH "${found}" found_real)
file(REAL_PATH "${prefix}" prefix_real)
string(FIND "${found_real}" "${prefix_real}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "package test: pkscan was found in '${found}', not in ${prefix}")
endif()

set(build_args --build ${consumer_build})
if(CONFIG)
  list(APPEND build_args --config ${CONFIG})
endif()
step("build the consumer" ${CMAKE_COMMAND} ${build_args})

# The output component without yaml-cpp: find_package(pkscan COMPONENTS output) must not need it.
set(output_build ${WORK_DIR}/build-output-only)
set(output_args ${configure_args})
list(TRANSFORM output_args REPLACE "^${consumer_build}$" "${output_build}")
step("configure an output-only consumer without yaml-cpp" ${CMAKE_COMMAND} ${output_args}
     -DPKSCAN_CONSUMER_CONFIG=OFF -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON)
step("build the output-only consumer" ${CMAKE_COMMAND} --build ${output_build}
     --target output_consumer)

# The library alone, with yaml-cpp and HDF5 unfindable: find_package(pkscan) must not need them.
set(lib_build ${WORK_DIR}/build-library-only)
set(lib_args ${configure_args})
list(TRANSFORM lib_args REPLACE "^${consumer_build}$" "${lib_build}")
step("configure a library-only consumer without yaml-cpp and HDF5" ${CMAKE_COMMAND} ${lib_args}
     -DPKSCAN_CONSUMER_OUTPUT=OFF -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON
     -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON)
step("build the library-only consumer" ${CMAKE_COMMAND} --build ${lib_build} --target consumer)

foreach(program consumer output_consumer config_consumer)
  find_program(exe ${program} PATHS ${consumer_build} ${consumer_build}/${CONFIG} NO_DEFAULT_PATH
               NO_CACHE REQUIRED)
  if(program MATCHES "^(output|config)_consumer$")
    step("run ${program}" ${exe} ${WORK_DIR})
  else()
    step("run ${program}" ${exe})
  endif()
  message(STATUS "${step_output}")
  unset(exe)
endforeach()

if(MPIEXEC)
  find_program(exe mpi_consumer PATHS ${consumer_build} ${consumer_build}/${CONFIG}
               NO_DEFAULT_PATH NO_CACHE REQUIRED)
  step("run mpi_consumer under mpirun -np 2" ${CMAKE_COMMAND} -E env
       OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1
       timeout -k 5 300 ${MPIEXEC} -np 2 --oversubscribe --bind-to none --mca oob_tcp_if_include lo
       --mca btl self,vader --mca btl_vader_single_copy_mechanism none ${exe} ${WORK_DIR})
  message(STATUS "${step_output}")
  # The `mpi` component asked for alone (it loads the config and output components itself).
  set(mpi_build ${WORK_DIR}/build-mpi-only)
  set(mpi_only_args ${configure_args})
  list(TRANSFORM mpi_only_args REPLACE "^${consumer_build}$" "${mpi_build}")
  step("configure an mpi-only consumer" ${CMAKE_COMMAND} ${mpi_only_args}
       -DPKSCAN_CONSUMER_MPI_ONLY=ON)
  step("build the mpi-only consumer" ${CMAKE_COMMAND} --build ${mpi_build} --target mpi_consumer)
endif()
