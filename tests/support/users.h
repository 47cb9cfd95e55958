/* users.h - second local users for the security tests: created with
 * useradd by the test and deleted in its teardown, commands run as them
 * (setpriv, a clean environment), and /dev/fuse opened to them only while
 * the test runs (its mode is restored in the teardown, pass or fail).
 *
 * A test suite calls tu_setup() in .init and tu_teardown() in .fini; in
 * between, tu_create() makes users that tu_teardown() deletes after it
 * has stopped, by PID, every memstorefs daemon named by a lock file in
 * their runtime directories (/tmp/memstorefs-UID) and lazily detached
 * every mount below the test's directory. */
#ifndef MFS_TEST_USERS_H
#define MFS_TEST_USERS_H

#include <stdbool.h>
#include <sys/types.h>

#include "mnt.h"

struct tuser {
    char name[32];
    uid_t uid;
    gid_t gid;
    char home[300]; /* TU_DIR/home-NAME, 0700, the user's */
};

/* The test's shared directory (0755): homes, and bin/memstorefs, a copy
 * of the binary every account can run.  Set by tu_setup. */
extern char TU_DIR[256];
extern char TU_BIN[300];

/* Makes TU_DIR, copies the binary, and lets every account open /dev/fuse
 * (remembering its mode). */
void tu_setup(void);
/* Stops the users' daemons by PID, detaches what is mounted below TU_DIR
 * or named by their lock files, deletes the users, restores /dev/fuse's
 * mode, removes TU_DIR. */
void tu_teardown(void);

/* Creates the local user `name` (a stale one of that name is deleted
 * first) with its home in TU_DIR; asserts on failure. */
void tu_create(struct tuser *u, const char *name);

/* Runs `sh -c CMD` (printf-formatted) as u, in a clean environment:
 * HOME, USER, LOGNAME, PATH, ANTHROPIC_API_KEY=test-key,
 * ANTHROPIC_BASE_URL=<e's memstored>, MFS=TU_BIN, HOME_DIR=u->home, and
 * the sanitizers' *SAN_OPTIONS; no XDG_RUNTIME_DIR, no
 * MEMSTOREFS_RUNTIME_DIR.  Returns the exit status (or -1); the combined
 * output in *out (malloc'd) when out is not NULL. */
int tu_sh(const struct mnt_env *e, const struct tuser *u, char **out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The runtime directory memstorefs uses for u by default. */
void tu_runtime_dir(const struct tuser *u, char *buf, size_t len);

/* The pid of u's daemon from a lock file in its runtime dir (0: none). */
pid_t tu_daemon_pid(const struct tuser *u);

#endif
