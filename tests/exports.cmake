# The exported-symbol check of libpdkv.so (scripts/check-exports.sh): only pdkv_* symbols, every
# PDKV_API function of pdkv.h, SONAME libpdkv.so.<PDKV_VERSION_MAJOR>. The self-test proves the
# check rejects a leaking library, a missing function and a wrong SONAME, and that
# capi/libpdkv.map hides the leak. Included by tests/CMakeLists.txt.
add_test(NAME capi_exports
  COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/check-exports.sh $<TARGET_FILE:pdkv>
          ${PROJECT_SOURCE_DIR}/capi/include/pdkv.h)
add_test(NAME capi_exports_self_test
  COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/check-exports.sh --self-test ${CMAKE_C_COMPILER}
          ${PROJECT_SOURCE_DIR}/capi/libpdkv.map)
