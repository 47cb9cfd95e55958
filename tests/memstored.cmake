# tests/memstored.cmake: the memstored (local Memory Stores API server)
# suite, one executable per area.  Each test starts its own memstored in its
# .init and stops it by PID in its .fini (tests/support/msd.h).

target_link_libraries(mfs_testsupport PUBLIC Threads::Threads)

foreach(area stores memories list versions errors auth admin concurrency process security)
  mfs_add_test(test_memstored_${area} test_memstored_${area}.c TIMEOUT 120
               LABELS memstored)
endforeach()
