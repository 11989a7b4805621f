// C API tests: the header keeps its promise that EVERY function documents itself. pdkv.h and the
// concept headers under pdkv/ are read from the source tree (PDKV_SOURCE_DIR) and each PDKV_API declaration's own preceding comment
// (the /* ... */ right before it, not a shared block further up) must state:
//   - thread safety ("thread", e.g. "Thread-safe." or "Not thread-safe with ...");
//   - for a function returning pdkv_status_t, its errors ("Errors" or "Never fails");
//   - for a *_free function, that NULL is allowed;
//   - for a function handing out an owned handle through `**out`, who owns it ("owned");
//   - for a function handing out borrowed pointers (`const T **`, or a returned const char *),
//     their lifetime ("valid until", "static storage", "owned by" or "Ownership as").
// A declaration added without these notes fails here, naming the function.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

#ifndef PDKV_SOURCE_DIR
#error "PDKV_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

namespace {

struct Declaration {
  std::string name;
  std::string return_type;
  std::string text;     // from PDKV_API to the ';'
  std::string comment;  // the comment immediately before, "" when there is none
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// pdkv.h and every concept header it includes (capi/include/pdkv/*.h, in name order).
std::string read_header() {
  const std::string dir = std::string(PDKV_SOURCE_DIR) + "/capi/include/";
  std::vector<std::string> subs;
  for (const auto& e : std::filesystem::directory_iterator(dir + "pdkv")) {
    if (e.path().extension() == ".h") subs.push_back(e.path().string());
  }
  std::sort(subs.begin(), subs.end());
  REQUIRE(subs.size() >= 10);  // errors, model, geometry, ..., agent, engine
  std::string all = read_file(dir + "pdkv.h");
  for (const auto& p : subs) all += "\n" + read_file(p);
  return all;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The comment's words on one line: the " * " continuation prefixes and line breaks become single
// spaces, so a phrase broken across lines still matches.
std::string flatten(const std::string& comment) {
  static const std::regex continuation(R"(\n\s*\*(?!/))");
  static const std::regex spaces(R"(\s+)");
  return std::regex_replace(std::regex_replace(comment, continuation, " "), spaces, " ");
}

// Every "PDKV_API <type> <name>(...);" outside the #define lines, with its own comment.
std::vector<Declaration> declarations(const std::string& h) {
  std::vector<Declaration> out;
  size_t pos = 0;
  while ((pos = h.find("PDKV_API ", pos)) != std::string::npos) {
    const size_t line_start = h.rfind('\n', pos) == std::string::npos ? 0 : h.rfind('\n', pos) + 1;
    if (h.compare(line_start, 1, "#") == 0 || pos != line_start) {  // #define PDKV_API ... or inside text
      pos += 9;
      continue;
    }
    const size_t end = h.find(';', pos);
    REQUIRE(end != std::string::npos);
    Declaration d;
    d.text = h.substr(pos, end - pos + 1);
    const size_t paren = d.text.find('(');
    REQUIRE(paren != std::string::npos);
    size_t name_end = paren;
    while (name_end > 0 && std::isspace(static_cast<unsigned char>(d.text[name_end - 1]))) --name_end;
    size_t name_begin = name_end;
    while (name_begin > 0 &&
           (std::isalnum(static_cast<unsigned char>(d.text[name_begin - 1])) || d.text[name_begin - 1] == '_')) {
      --name_begin;
    }
    d.name = d.text.substr(name_begin, name_end - name_begin);
    d.return_type = d.text.substr(9, name_begin - 9);
    // The comment must end on the line(s) right before the declaration: only whitespace between.
    size_t back = line_start;
    while (back > 0 && std::isspace(static_cast<unsigned char>(h[back - 1]))) --back;
    if (back >= 2 && h.compare(back - 2, 2, "*/") == 0) {
      const size_t open = h.rfind("/*", back - 2);
      if (open != std::string::npos) d.comment = h.substr(open, back - open);
    }
    out.push_back(d);
    pos = end;
  }
  return out;
}

// The documentation problems of one declaration, "" when it has none.
std::string problems(const Declaration& d) {
  std::string p;
  const std::string c = lower(flatten(d.comment));
  const std::string args = d.text.substr(d.text.find('('));
  if (d.comment.empty()) return "no comment right before the declaration";
  if (!contains(c, "thread")) p += " no thread-safety note;";
  if (contains(d.return_type, "pdkv_status_t") && !contains(c, "errors") && !contains(c, "never fails")) {
    p += " no 'Errors' list;";
  }
  const bool is_free = d.name.size() > 5 && d.name.compare(d.name.size() - 5, 5, "_free") == 0;
  if (is_free && !contains(c, "null is allowed")) p += " a free function without 'NULL is allowed';";
  // An owned handle out: a non-const `T **out` (not `const T **`).
  static const std::regex owned_out(R"((^|[(,]\s*)(pdkv_\w+_t)\s*\*\*\s*out\b)");
  if (std::regex_search(args, owned_out) && !contains(c, "owned")) p += " an owned **out without ownership;";
  // Borrowed pointers out: `const T **x` arguments (except the const-element input arrays
  // `const T *const *`), or a `const char *` return value.
  static const std::regex borrowed_out(R"(const\s+\w+\s*\*\*)");
  const bool borrowed = std::regex_search(args, borrowed_out) || contains(d.return_type, "const char");
  if (borrowed && !contains(c, "valid until") && !contains(c, "static storage") && !contains(c, "owned by") &&
      !contains(c, "ownership as")) {
    p += " borrowed pointers without their lifetime;";
  }
  return p;
}

}  // namespace

TEST_CASE("pdkv.h: every PDKV_API declaration documents thread safety, errors and ownership", "[capi][docs]") {
  const std::string header = read_header();
  const auto decls = declarations(header);
  // The header has well over a hundred functions; a parser that finds few is broken.
  REQUIRE(decls.size() > 100);
  std::string failures;
  size_t checked_free = 0;
  for (const auto& d : decls) {
    INFO(d.name);
    REQUIRE(d.name.rfind("pdkv_", 0) == 0);
    if (d.name.size() > 5 && d.name.compare(d.name.size() - 5, 5, "_free") == 0) ++checked_free;
    const std::string p = problems(d);
    if (!p.empty()) failures += d.name + ":" + p + "\n";
  }
  INFO("declarations lacking notes:\n" << failures);
  CHECK(failures.empty());
  CHECK(checked_free >= 15);
}

TEST_CASE("pdkv.h doc check: the rules catch a missing note", "[capi][docs]") {
  // The checker itself can fail: synthetic declarations missing each note are reported.
  const std::string h =
      "/* Does x. Errors: NULL_POINTER. */\n"
      "PDKV_API pdkv_status_t pdkv_no_thread(int a, pdkv_error_t **err);\n"
      "/* Does y. Thread-safe. */\n"
      "PDKV_API pdkv_status_t pdkv_no_errors(int a, pdkv_error_t **err);\n"
      "/* Frees. Thread-safe. */\n"
      "PDKV_API void pdkv_thing_free(pdkv_thing_t *t);\n"
      "/* Makes one. Errors: NULL_POINTER. Thread-safe. */\n"
      "PDKV_API pdkv_status_t pdkv_thing_new(int a, pdkv_thing_t **out, pdkv_error_t **err);\n"
      "/* Items. Errors: NULL_POINTER. Thread-safe. */\n"
      "PDKV_API pdkv_status_t pdkv_thing_items(const pdkv_thing_t *t, const uint64_t **items,\n"
      "                                        size_t *count, pdkv_error_t **err);\n"
      "/* Name. Thread-safe. */\n"
      "PDKV_API const char *pdkv_thing_name(int v);\n"
      "/* A shared block. Thread-safe. Errors: none. */\n"
      "\n"
      "int unrelated;\n"
      "PDKV_API pdkv_status_t pdkv_uncommented(pdkv_error_t **err);\n"
      "/* Fine. Errors: NULL_POINTER. *out owned by the\n"
      " * caller. Thread-\n * safe: any thread. */\n"
      "PDKV_API pdkv_status_t pdkv_fine(pdkv_thing_t **out, pdkv_error_t **err);\n";
  const auto decls = declarations(h);
  REQUIRE(decls.size() == 8);
  CHECK_THAT(problems(decls[0]), Catch::Matchers::Contains("thread"));
  CHECK_THAT(problems(decls[1]), Catch::Matchers::Contains("Errors"));
  CHECK_THAT(problems(decls[2]), Catch::Matchers::Contains("NULL is allowed"));
  CHECK_THAT(problems(decls[3]), Catch::Matchers::Contains("ownership"));
  CHECK_THAT(problems(decls[4]), Catch::Matchers::Contains("lifetime"));
  CHECK_THAT(problems(decls[5]), Catch::Matchers::Contains("lifetime"));
  CHECK_THAT(problems(decls[6]), Catch::Matchers::Contains("no comment"));
  CHECK(problems(decls[7]).empty());
  CHECK(decls[7].name == "pdkv_fine");
  CHECK(decls[4].name == "pdkv_thing_items");
}
