mfs_add_test(test_rules test_rules.c)
