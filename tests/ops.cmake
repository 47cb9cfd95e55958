# tests/ops.cmake: what an operator uses (issue 13): every command's --help
# and the man pages, the log targets, systemd readiness, unmount's report,
# the mount(8) helper, the worker hooks and the Debian package.
if(MFS_MAN)
  mfs_add_test(test_cli_help test_cli_help.c TIMEOUT 60 LABELS cli)
  target_compile_definitions(test_cli_help PRIVATE MFS_MAN_DIR="${MFS_MAN_DIR}")
  add_dependencies(test_cli_help man)
endif()
foreach(area ops helper hooks)
  mfs_add_test(test_mount_${area} test_mount_${area}.c TIMEOUT 300 LABELS mount)
endforeach()
mfs_add_test(test_package test_package.c TIMEOUT 300 LABELS package)
target_compile_definitions(test_package PRIVATE MFS_BUILD_DIR="${CMAKE_BINARY_DIR}"
                           MFS_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_compile_definitions(test_mount_hooks PRIVATE MFS_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
