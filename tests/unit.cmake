mfs_add_test(test_rules test_rules.c)
mfs_add_test(test_reconcile test_reconcile.c LIBS mfs_reconcile)
