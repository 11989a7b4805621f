# Self-contained sources (issue 7 item 7): no tracked file cites a file outside the repository
# (scripts/check-self-contained.sh), and the checker itself is shown to catch each kind of
# outside citation on a planted scratch tree (tests/self_contained_test.sh).
add_test(NAME self_contained_sources
  COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/check-self-contained.sh ${PROJECT_SOURCE_DIR})
add_test(NAME self_contained_check_catches_citations
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/self_contained_test.sh)
