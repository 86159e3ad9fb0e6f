# Driver of the `package_library_alone` test: configures pkscan itself with only the library
# (no config, output, program, tests or Python module) while yaml-cpp, HDF5, pkg-config (and so
# libdeflate), CLI11, Ceres and GoogleTest cannot be found: the library must need nothing but
# Eigen and OpenMP to configure. Configure-only (nothing is built).
#
#   cmake -DSOURCE_DIR=<pkscan> -DWORK_DIR=<scratch> [-DGENERATOR=<name>] [-DCXX_COMPILER=<path>]
#         -P library_alone.cmake
cmake_minimum_required(VERSION 3.21)

foreach(var SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "library_alone.cmake: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})

set(args -S ${SOURCE_DIR} -B ${WORK_DIR}
    -DPKSCAN_BUILD_CONFIG=OFF -DPKSCAN_BUILD_OUTPUT=OFF -DPKSCAN_BUILD_APPS=OFF
    -DPKSCAN_BUILD_TESTS=OFF -DPKSCAN_BUILD_PYTHON=OFF -DPKSCAN_WITH_CUDA=OFF
    -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_Ceres=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
if(GENERATOR)
  list(APPEND args -G ${GENERATOR})
endif()
if(CXX_COMPILER)
  list(APPEND args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "library alone: configuring without yaml-cpp, HDF5 and libdeflate failed "
                      "(${rc}):\n${out}")
endif()
# The library's targets are generated, and none of the parts left out.
file(READ ${WORK_DIR}/pkscanTargets.cmake targets)
if(NOT targets MATCHES "pkscan::pkscan" OR EXISTS ${WORK_DIR}/pkscanOutputTargets.cmake OR
   EXISTS ${WORK_DIR}/pkscanConfigTargets.cmake)
  message(FATAL_ERROR "library alone: expected pkscanTargets.cmake with pkscan::pkscan and no "
                      "output or config export in ${WORK_DIR}")
endif()
message(STATUS "library alone: configured with Eigen and OpenMP only")
