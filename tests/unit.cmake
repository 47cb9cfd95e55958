mfs_add_test(test_rules test_rules.c)
mfs_add_test(test_reconcile test_reconcile.c LIBS mfs_reconcile)
mfs_add_test(test_cache_write test_cache_write.c LIBS mfs_cache)
mfs_add_test(test_cache_sent test_cache_sent.c LIBS mfs_cache PkgConfig::SQLITE3)
mfs_add_test(test_cache_gc test_cache_gc.c LIBS mfs_cache PkgConfig::SQLITE3)
mfs_add_test(test_cache_lazy test_cache_lazy.c LIBS mfs_cache PkgConfig::SQLITE3)
mfs_add_test(test_cache_journal test_cache_journal.c LIBS mfs_cache PkgConfig::SQLITE3)
mfs_add_test(test_cache_marks test_cache_marks.c LIBS mfs_cache PkgConfig::SQLITE3)
mfs_add_test(test_cache_reserve test_cache_reserve.c LIBS mfs_cache)
mfs_add_test(test_cache_ckpt test_cache_ckpt.c LIBS mfs_cache PkgConfig::SQLITE3)
mfs_add_test(test_cache_wal test_cache_wal.c LIBS mfs_cache PkgConfig::SQLITE3)
target_include_directories(test_cache_wal PRIVATE ${PROJECT_SOURCE_DIR}/cache)
mfs_add_test(test_base_text test_base_text.c)
mfs_add_test(test_spinhint test_spinhint.c)
target_include_directories(test_spinhint PRIVATE ${PROJECT_SOURCE_DIR}/fs)
mfs_add_test(test_cache_history test_cache_history.c LIBS mfs_cache)
# The fuzz targets' seed corpora (tests/fuzz/corpus/<target>, which also
# holds every input a fuzzer found) replayed as regression tests of this
# build, through tests/fuzz/replay.c instead of libFuzzer.
foreach(target rules api_parse session msd)
  add_executable(replay_${target} fuzz/replay.c fuzz/fuzz_${target}.c)
  add_test(NAME fuzz_replay_${target}
           COMMAND replay_${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${target})
  set_tests_properties(fuzz_replay_${target} PROPERTIES TIMEOUT 120 LABELS fuzz)
endforeach()
target_link_libraries(replay_rules PRIVATE mfs_base)
target_link_libraries(replay_api_parse PRIVATE mfs_sync)
target_include_directories(replay_api_parse PRIVATE ${PROJECT_SOURCE_DIR}/sync)
target_link_libraries(replay_session PRIVATE mfs_sync)
target_link_libraries(replay_msd PRIVATE msd_core)
# Every warning and error the daemon logs has a line in
# docs/troubleshooting.md (tests/check_log_docs.py says how it finds them).
find_program(MFS_PYTHON3 python3 REQUIRED)
add_test(NAME docs_log_messages
         COMMAND ${MFS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/check_log_docs.py ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_log_messages PROPERTIES TIMEOUT 60 LABELS docs)
