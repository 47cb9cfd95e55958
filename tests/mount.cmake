# tests/mount.cmake: real FUSE mounts against a private memstored.
target_sources(mfs_testsupport PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support/mnt.c)
target_compile_definitions(mfs_testsupport PUBLIC
    MEMSTOREFS_BIN="$<TARGET_FILE:memstorefs>")
add_dependencies(mfs_testsupport memstorefs)

foreach(area read lifecycle refresh flush)
  mfs_add_test(test_mount_${area} test_mount_${area}.c TIMEOUT 300 LABELS mount)
endforeach()
foreach(area write write_ro write_durable)
  mfs_add_test(test_mount_${area} test_mount_${area}.c TIMEOUT 300 LABELS mount
               LIBS PkgConfig::SQLITE3)
endforeach()
# Sync back (issue 5): each binary links the shared helpers of test_mount_sync.h.
foreach(area push conflict paths delete faults refused unmount teardown ro identity hostile open modes feed budget cmd full mapped
             prefetch loop)
  mfs_add_test(test_mount_sync_${area} test_mount_sync_${area}.c test_mount_sync_util.c
               TIMEOUT 300 LABELS mount LIBS PkgConfig::SQLITE3 mfs_reconcile)
endforeach()
# The cache's temporary data stays in memory (issue 12).
mfs_add_test(test_mount_tmpfiles test_mount_tmpfiles.c test_mount_sync_util.c
             TIMEOUT 300 LABELS mount LIBS PkgConfig::SQLITE3 mfs_reconcile)
# The fault soak and two daemons on one store (issue 8): longer runs.
foreach(area soak two)
  mfs_add_test(test_mount_sync_${area} test_mount_sync_${area}.c test_mount_sync_util.c
               TIMEOUT 600 LABELS mount LIBS PkgConfig::SQLITE3 mfs_reconcile)
endforeach()
# Security (issue 10): attacks from a second local user the tests create
# (support/users.c), run through real mounts.
target_sources(mfs_testsupport PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support/users.c)
# They add and remove those users and open /dev/fuse to them (host state):
# one of them at a time, whatever ctest's -j.
foreach(area runtime files)
  mfs_add_test(test_security_${area} test_security_${area}.c TIMEOUT 300 LABELS mount security)
  set_tests_properties(test_security_${area} PROPERTIES RESOURCE_LOCK host_users)
endforeach()
mfs_add_test(test_security_bounds test_security_bounds.c test_mount_sync_util.c TIMEOUT 300
             LABELS mount security LIBS PkgConfig::SQLITE3)
# Memory history and recovery (issue 14): log, show, restore, conflicts
# restore/diff and the user.memstore.* attributes, through real mounts.
foreach(area history history_attrs)
  mfs_add_test(test_mount_${area} test_mount_${area}.c test_mount_sync_util.c
               TIMEOUT 300 LABELS mount LIBS PkgConfig::SQLITE3 mfs_reconcile)
endforeach()
# Bounded and exact (issue 9): the cache stays small, status and the log
# tell the truth, POSIX details as a local filesystem has them.
mfs_add_test(test_mount_posix test_mount_posix.c TIMEOUT 300 LABELS mount)
foreach(area cache status)
  mfs_add_test(test_mount_${area} test_mount_${area}.c test_mount_sync_util.c
               TIMEOUT 300 LABELS mount LIBS PkgConfig::SQLITE3 mfs_reconcile)
endforeach()
# Local operations (issue 12): what the kernel asks a mount, counted.
mfs_add_test(test_mount_kernel test_mount_kernel.c test_mount_sync_util.c TIMEOUT 300
             LABELS mount LIBS PkgConfig::SQLITE3 mfs_reconcile)
