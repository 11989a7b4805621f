# The bindings' raw layers are generated from the header by scripts/gen_bindings.py (issue 7
# item 6). Included by tests/CMakeLists.txt.
#
# bindings_generated_drift        the committed generated files (python/pdkv/_raw.py,
#                                 go/zz_generated*.go, rust/pdkv/src/status.rs,
#                                 rust/pdkv/tests/common/header_functions.rs) are exactly what the
#                                 header generates; on drift it prints the diff and the command.
# bindings_generator_self_test    the drift check fails when a function, a status or a field is
#                                 added to a copy of the headers and nothing was regenerated; the
#                                 reader stops with file:line on constructs it does not understand.
# bindings_ctypes_layout          every generated ctypes struct mirror has the C compiler's size,
#                                 alignment and field offsets.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME bindings_generated_drift
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/scripts/gen_bindings.py --check)
  add_test(NAME bindings_generator_self_test
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/scripts/gen_bindings_test.py)
  add_test(NAME bindings_ctypes_layout
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/scripts/gen_bindings_test.py --layouts
            ${CMAKE_C_COMPILER})
else()
  add_test(NAME bindings_generated_drift
    COMMAND sh -c "echo 'FAIL: python3 not found: the generated bindings cannot be checked'; exit 1")
endif()
