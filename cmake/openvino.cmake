# The OpenVINO engine plugin (src/engine/openvino/): libhs_engine_openvino.so in plugins/ next to
# hetserve, where the registry discovers it (engine/plugin.h). It is built against the OpenVINO
# runtime's C API that scripts/setup unpacks into third_party/openvino/ (the PyPI wheel's libs/
# and include/), or HS_OPENVINO_ROOT. HS_OPENVINO: AUTO (built when the runtime is there), ON
# (an error when it is not), OFF.
set(HS_OPENVINO "AUTO" CACHE STRING "OpenVINO engine plugin: AUTO (when the runtime is found), ON, OFF")
set(HS_OPENVINO_ROOT "${CMAKE_SOURCE_DIR}/third_party/openvino" CACHE PATH
    "OpenVINO runtime: a folder with include/openvino/c/openvino.h and libs/libopenvino_c.so*")
# Under the sanitizers the runtime cannot load: its threading library dlopens with RTLD_DEEPBIND,
# which the sanitizer runtimes refuse (the process aborts), so AUTO leaves the plugin out there
# (the fuzzing build too: it is instrumented with the sanitizers).
if((HS_SANITIZE OR HS_TSAN OR HS_FUZZ) AND HS_OPENVINO STREQUAL "AUTO")
  message(STATUS "OpenVINO engine plugin: not built (its runtime cannot run under the sanitizers)")
  set(HS_OPENVINO_SKIP ON)
endif()
if(NOT HS_OPENVINO STREQUAL "OFF" AND NOT HS_OPENVINO_SKIP)
  find_path(HS_OV_INCLUDE openvino/c/openvino.h PATHS ${HS_OPENVINO_ROOT}/include NO_DEFAULT_PATH)
  file(GLOB HS_OV_C_LIB ${HS_OPENVINO_ROOT}/libs/libopenvino_c.so*)
  if(HS_OV_INCLUDE AND HS_OV_C_LIB)
    list(GET HS_OV_C_LIB 0 HS_OV_C_LIB)
    get_filename_component(HS_OV_LIBDIR ${HS_OV_C_LIB} DIRECTORY)
    add_library(hs_engine_openvino MODULE src/engine/openvino/ov_engine.c
                src/engine/openvino/ov_graph.c src/engine/openvino/ov_onnx.c)
    target_include_directories(hs_engine_openvino PRIVATE src ${HS_OV_INCLUDE})
    target_compile_options(hs_engine_openvino PRIVATE ${HS_WARN})
    # the plugin links nothing of hetserve: everything it needs comes through the ABI
    target_link_libraries(hs_engine_openvino PRIVATE ${HS_OV_C_LIB} Threads::Threads m)
    target_link_options(hs_engine_openvino PRIVATE -Wl,--no-undefined)
    set_target_properties(hs_engine_openvino PROPERTIES
      PREFIX "lib" OUTPUT_NAME hs_engine_openvino
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/plugins
      BUILD_RPATH ${HS_OV_LIBDIR})
    add_dependencies(hetserve_lib hs_engine_openvino)
    message(STATUS "OpenVINO engine plugin: built (runtime in ${HS_OPENVINO_ROOT})")
  elseif(HS_OPENVINO STREQUAL "ON")
    message(FATAL_ERROR "HS_OPENVINO=ON but no OpenVINO runtime in ${HS_OPENVINO_ROOT} (scripts/setup fetches it)")
  else()
    message(STATUS "OpenVINO engine plugin: not built (no runtime in ${HS_OPENVINO_ROOT}; scripts/setup fetches it)")
  endif()
endif()
