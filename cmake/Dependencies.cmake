# Finds every dependency once, for all targets. CUDA libraries are looked up both under the
# toolkit's own folders (the CI/dev machine) and in the system folders (the GPU machine).
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)
# Image decoding: libjpeg-turbo's TurboJPEG API and libpng (Debian's libturbojpeg0-dev and
# libpng-dev; scripts/install_deps.sh installs them, scripts/fetch_device_deps.sh carries them).
find_path(TURBOJPEG_INCLUDE_DIR turbojpeg.h)
find_library(TURBOJPEG_LIBRARY NAMES turbojpeg libturbojpeg.so.0)
if(NOT TURBOJPEG_INCLUDE_DIR OR NOT TURBOJPEG_LIBRARY)
  message(FATAL_ERROR "vitddp: libjpeg-turbo's TurboJPEG (turbojpeg.h, libturbojpeg) not found: install Debian's "
                      "libturbojpeg0-dev (scripts/install_deps.sh does)")
endif()
find_package(PNG REQUIRED)
if(VITDDP_TESTS)
  find_package(GTest REQUIRED)
endif()

set(VITDDP_WITH_CUDA OFF)
set(VITDDP_HAVE_CUDNN OFF)
set(VITDDP_HAVE_NCCL OFF)
if(VITDDP_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(VITDDP_WITH_CUDA ON)
    set(_cuda_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64 /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/lib64)
    set(_cuda_inc_hints ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/local/include)
    # cuDNN from CUDNN_ROOT when given (e.g. the nvidia-cudnn wheel's folder, whose library has
    # only its versioned name), else the system's; headers and library from the same place.
    set(CUDNN_ROOT "" CACHE PATH "cuDNN's folder (include/, lib/); empty: the system's")
    if(CUDNN_ROOT)
      find_path(CUDNN_INCLUDE_DIR cudnn.h PATHS ${CUDNN_ROOT}/include NO_DEFAULT_PATH)
      find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 PATHS ${CUDNN_ROOT}/lib ${CUDNN_ROOT}/lib64 NO_DEFAULT_PATH)
    else()
      find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cuda_inc_hints})
      find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cuda_hints})
    endif()
    if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
      set(VITDDP_HAVE_CUDNN ON)
    endif()
    # The cuDNN frontend (header-only, the nvidia-cudnn-frontend wheel's include/): cuDNN's fused
    # attention graphs are built through it. scripts/fetch_device_deps.sh puts it in .deps.
    set(CUDNN_FRONTEND_ROOT "${PROJECT_SOURCE_DIR}/.deps/cudnn_frontend" CACHE PATH "the cuDNN frontend's folder (include/)")
    find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${CUDNN_FRONTEND_ROOT}/include ${_cuda_inc_hints})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_cuda_inc_hints})
    find_library(NCCL_LIBRARY nccl HINTS ${_cuda_hints})
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(VITDDP_HAVE_NCCL ON)
    endif()
  else()
    message(STATUS "vitddp: no CUDA compiler found; building the CPU backend only")
  endif()
endif()

# nvtx3 is header-only (it loads a tool, if one is named, with dlopen), so a CPU build uses it too
# when the toolkit's headers are on the machine; without it NVTX ranges compile to nothing.
set(_nvtx_hints ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include /usr/local/include)
find_path(NVTX3_INCLUDE_DIR nvtx3/nvToolsExt.h HINTS ${_nvtx_hints})
set(VITDDP_HAVE_NVTX OFF)
if(NVTX3_INCLUDE_DIR)
  set(VITDDP_HAVE_NVTX ON)
endif()

find_package(Gloo QUIET)
set(VITDDP_HAVE_GLOO OFF)
if(Gloo_FOUND OR TARGET gloo)
  set(VITDDP_HAVE_GLOO ON)
endif()

# Python for the tests. The torchvision parity tests need one that imports numpy, torch and
# torchvision: the candidates are tried in order (VITDDP_PYTHON when the user set it,
# /usr/bin/python3, python3 on PATH) and the first that imports all three is taken as
# VITDDP_PARITY_PYTHON; empty when none does, and those tests then skip. Every configure probes
# again (the cache keeps only the user's choice). VITDDP_PYTHON3 is the first candidate that
# runs at all, for the tests that need only the standard library (TraceLinkUse).
set(_vitddp_python_candidates)
if(VITDDP_PYTHON)
  list(APPEND _vitddp_python_candidates "${VITDDP_PYTHON}")
endif()
if(EXISTS /usr/bin/python3)
  list(APPEND _vitddp_python_candidates /usr/bin/python3)
endif()
find_program(_vitddp_path_python3 NAMES python3 NO_CACHE)
if(_vitddp_path_python3)
  list(APPEND _vitddp_python_candidates "${_vitddp_path_python3}")
endif()
list(REMOVE_DUPLICATES _vitddp_python_candidates)
set(VITDDP_PARITY_PYTHON "")
set(VITDDP_PYTHON3 "")
foreach(_py IN LISTS _vitddp_python_candidates)
  execute_process(COMMAND "${_py}" -c "import sys" RESULT_VARIABLE _py_runs OUTPUT_QUIET ERROR_QUIET)
  if(NOT _py_runs EQUAL 0)
    message(STATUS "vitddp: python ${_py} does not run")
    continue()
  endif()
  if(NOT VITDDP_PYTHON3)
    set(VITDDP_PYTHON3 "${_py}")
  endif()
  execute_process(COMMAND "${_py}" -c "import numpy, torch, torchvision" RESULT_VARIABLE _py_imports
                  OUTPUT_QUIET ERROR_QUIET)
  if(_py_imports EQUAL 0)
    set(VITDDP_PARITY_PYTHON "${_py}")
    break()
  endif()
  message(STATUS "vitddp: python ${_py} lacks numpy, torch or torchvision")
endforeach()
if(VITDDP_PYTHON AND NOT VITDDP_PARITY_PYTHON STREQUAL VITDDP_PYTHON)
  message(WARNING "vitddp: VITDDP_PYTHON=${VITDDP_PYTHON} cannot import numpy, torch and torchvision; "
                  "the parity tests do not use it")
endif()
if(VITDDP_PARITY_PYTHON)
  message(STATUS "vitddp: torchvision parity tests run under ${VITDDP_PARITY_PYTHON}")
else()
  string(REPLACE ";" ", " _tried "${_vitddp_python_candidates}")
  message(STATUS "vitddp: no python imports numpy, torch and torchvision (tried: ${_tried}); "
                 "the torchvision parity tests will skip (set -DVITDDP_PYTHON=...)")
endif()
