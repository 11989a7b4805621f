// Error objects, status names and versions.
#include <cstring>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

TEST_CASE("status names are stable and unknown values are named as such", "[capi][error]") {
  CHECK(std::string(pdkv_status_name(PDKV_OK)) == "PDKV_OK");
  CHECK(std::string(pdkv_status_name(PDKV_ERR_TP_NOT_DIVISIBLE)) == "PDKV_ERR_TP_NOT_DIVISIBLE");
  CHECK(std::string(pdkv_status_name(PDKV_ERR_INTERNAL)) == "PDKV_ERR_INTERNAL");
  CHECK(std::string(pdkv_status_name(PDKV_ERR_TIMED_OUT)) == "PDKV_ERR_TIMED_OUT");
  CHECK(std::string(pdkv_status_name(PDKV_ERR_SHUTDOWN)) == "PDKV_ERR_SHUTDOWN");
  CHECK(std::string(pdkv_status_name(static_cast<pdkv_status_t>(99))) == "PDKV_ERR_UNKNOWN");
  CHECK(std::string(pdkv_status_name(static_cast<pdkv_status_t>(18))) == "PDKV_ERR_UNKNOWN");
  CHECK(std::string(pdkv_status_name(static_cast<pdkv_status_t>(208))) == "PDKV_ERR_UNKNOWN");
  CHECK(std::string(pdkv_status_name(static_cast<pdkv_status_t>(-1))) == "PDKV_ERR_UNKNOWN");
}

TEST_CASE("NULL error objects are tolerated by the accessors", "[capi][error]") {
  CHECK(pdkv_error_status(nullptr) == PDKV_OK);
  int32_t domain = -1;
  int64_t code = -1;
  pdkv_error_cause(nullptr, &domain, &code);
  CHECK(domain == PDKV_CAUSE_NONE);
  CHECK(code == 0);
  pdkv_error_cause(nullptr, nullptr, nullptr);  // both out pointers may be NULL
  CHECK(std::string(pdkv_error_message(nullptr)).empty());
  pdkv_error_free(nullptr);
}

TEST_CASE("a failing call with err == NULL still returns its status", "[capi][error]") {
  int32_t ratio = 0;
  CHECK(pdkv_tp_ratio(3, 2, &ratio, nullptr) == PDKV_ERR_TP_NOT_DIVISIBLE);
  CHECK(pdkv_tp_ratio(4, 2, &ratio, nullptr) == PDKV_OK);
  CHECK(ratio == 2);
}

TEST_CASE("a successful call resets *err to NULL", "[capi][error]") {
  int32_t ratio = 0;
  pdkv_error_t* err = nullptr;
  REQUIRE(pdkv_tp_ratio(3, 2, &ratio, &err) != PDKV_OK);
  REQUIRE(err != nullptr);
  pdkv_error_t* first = err;
  REQUIRE(pdkv_tp_ratio(2, 2, &ratio, &err) == PDKV_OK);
  CHECK(err == nullptr);  // the caller still owns `first`
  pdkv_error_free(first);
}

TEST_CASE("version matches the header", "[capi][version]") {
  CHECK(pdkv_version() == ((PDKV_VERSION_MAJOR << 16) | (PDKV_VERSION_MINOR << 8) | PDKV_VERSION_PATCH));
  const std::string expected = std::to_string(PDKV_VERSION_MAJOR) + "." + std::to_string(PDKV_VERSION_MINOR) + "." +
                               std::to_string(PDKV_VERSION_PATCH);
  CHECK(std::string(pdkv_version_string()) == expected);
}
