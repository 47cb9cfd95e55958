# tests/sync.cmake: sync/ (HTTP client, Memory Stores API bindings,
# credentials and session files).  test_sync_json and test_sync_session need
# no server; test_sync_http and test_sync_api start their own memstored per
# test (tests/support/msd.h) and stop it by PID in .fini.
mfs_add_test(test_sync_json test_sync_json.c LIBS mfs_sync TIMEOUT 60 LABELS sync)
mfs_add_test(test_sync_session test_sync_session.c LIBS mfs_sync TIMEOUT 60 LABELS sync)
mfs_add_test(test_sync_http test_sync_http.c LIBS mfs_sync TIMEOUT 180 LABELS sync)
mfs_add_test(test_sync_api test_sync_api.c LIBS mfs_sync TIMEOUT 180 LABELS sync)
mfs_add_test(test_sync_bounds test_sync_bounds.c LIBS mfs_sync TIMEOUT 120 LABELS sync)
mfs_add_test(test_sync_tree test_sync_tree.c LIBS mfs_sync TIMEOUT 120 LABELS sync)
mfs_add_test(test_sync_history test_sync_history.c LIBS mfs_sync TIMEOUT 120 LABELS sync)
