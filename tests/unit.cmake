mfs_add_test(test_rules test_rules.c)
mfs_add_test(test_reconcile test_reconcile.c LIBS mfs_reconcile)
mfs_add_test(test_cache_write test_cache_write.c LIBS mfs_cache)
mfs_add_test(test_cache_sent test_cache_sent.c LIBS mfs_cache)
