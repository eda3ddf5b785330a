# Run at build time after a test executable links: lists its GoogleTest suites and writes a
# CTest file with one test per suite, so that fixtures shared by a suite (a Redis Cluster,
# Sentinel) start once per suite rather than once per test case.
execute_process(COMMAND ${TEST_EXECUTABLE} --gtest_list_tests
  OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed: ${rc}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(REPLACE "/" "_" name "${suite}")
    string(APPEND content "add_test([=[${PREFIX}.${name}]=] [=[${TEST_EXECUTABLE}]=] [=[--gtest_filter=${suite}.*]=])\n")
    string(APPEND content "set_tests_properties([=[${PREFIX}.${name}]=] PROPERTIES LABELS ${PREFIX} TIMEOUT 600)\n")
  endif()
endforeach()
file(WRITE ${OUTPUT} "${content}")
