/* test_mount_sync.h - helpers shared by the sync-back mount tests
 * (tests/test_mount_sync_*.c): one private memstored, one store mounted
 * writable (or read-only) at MNT/s, and the server's state read back
 * through the API, the cache's through a read-only SQLite connection and
 * the daemon's log from CACHE/memstorefs.log (background mode).
 *
 * The mounts use --sync-interval 5; every wait is bounded by WITHIN (about
 * two intervals), polling, never a fixed sleep standing in for a sync. */
#ifndef MFS_TEST_MOUNT_SYNC_H
#define MFS_TEST_MOUNT_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnt.h"

/* Two sync intervals plus slack. */
#define WITHIN 12

extern struct mnt_env E;
extern char *store;  /* the store's id (malloc'd) */
extern char mnt[400]; /* MNT/s */

/* Starts memstored and creates the store with the memories
 * seed[0..] = {path, content, ..., NULL}. */
void sy_start(const char *const *seed);
/* Mounts the store at MNT/s with extra mount arguments (may be ""). */
void sy_mount(bool ro, const char *extra);
/* Unmounts the store and mounts it again with extra options. */
void sy_remount(const char *extra);
void sy_stop(void);

/* Runs CMD (printf-formatted) in the mount dir; exit status, output in
 * *out when out is not NULL (malloc'd). */
int sy_run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The server's memories, view=full (cJSON array; caller deletes). */
cJSON *sy_list(void);
/* The memory at path in list, or NULL. */
const cJSON *sy_find(const cJSON *list, const char *path);
/* malloc'd id / content of the memory at path now, or NULL. */
char *sy_id(const char *path);
char *sy_content(const char *path);
/* "path=content|path=content|..." of every memory, in path order, or of
 * expect[] = {path, content, ..., NULL} sorted the same way (malloc'd). */
char *sy_server_state(void);
char *sy_expect_state(const char *const *expect);
/* Polls until the server holds exactly expect[]; the last state seen in
 * *last (malloc'd, may be NULL).  True if it did within timeout_s. */
bool sy_wait_server(const char *const *expect, int timeout_s, char **last);
/* Every memory's content_sha256 is the SHA-256 of its content, and of the
 * bytes the mount shows for it; NULL or a description (malloc'd). */
char *sy_check_hashes(void);

/* The cache's conflict records of path, oldest first: their content,
 * "|"-separated (malloc'd). */
char *sy_records_at(const char *path);

/* Versions (memory_id NULL: the whole store), newest first; caller deletes. */
cJSON *sy_versions(const char *memory_id);
/* How many versions of memory_id have operation op (NULL: any). */
int sy_count_versions(const char *memory_id, const char *op);


/* Local changes not pushed yet: dirty files no open holds unsaved, and
 * deletions made under --sync-deletions enabled. */
int sy_pending(void);
/* Waits until nothing is pending (and the server is quiet for one poll). */
bool sy_wait_clean(int timeout_s);

/* `memstorefs status --json` of the (one) store, parsed (asserts that it
 * ran and is JSON; caller deletes). */
cJSON *sy_status_json(void);

/* The daemon's log (malloc'd, "" when absent). */
char *sy_log(void);
/* Lines of the log holding every one of the (NULL-terminated) strings. */
int sy_log_count(const char *a, const char *b);
/* The lines of the log holding a (for assertion messages; malloc'd). */
char *sy_log_grep(const char *a);
bool sy_wait_log(const char *a, const char *b, int min, int timeout_s);
/* "2026-12-01T04:05:06.123Z" (a log line's ts=, an API timestamp) in ms
 * since the epoch; asserts it parses. */
int64_t sy_ts_ms(const char *s);

/* POST /admin/faults body; asserts 200. */
void sy_fault(const char *json);
void sy_clear_faults(void);
void sy_reset_stats(void);
long sy_writes(void);
/* Runs a sync now (memstorefs sync --all --wait) and waits for it: the
 * next periodic one is an interval away, so changes made right after land
 * between two syncs. */
void sy_after_sync(void);

/* memstored's routes, as its statistics name them (t_route_count). */
#define FEED_ROUTE "GET /v1/memory_stores/{id}/memory_versions"
#define LIST_ROUTE "GET /v1/memory_stores/{id}/memories"
#define FETCH_ROUTE "GET /v1/memory_stores/{id}/memories/{id}"

/* Waits until a request on route ("METHOD template") reached the server
 * after n0 of them (asserts it did, within WITHIN). */
void sy_wait_route(const char *route, long n0);
/* Every read of the store by the daemon (the version feed, the listing)
 * is refused (400, not retried) until the faults are cleared. */
void sy_refuse_reads(void);

/* POST /v1/memory_stores/STORE/memories/ID (remote change); the status. */
long sy_remote_update(const char *id, const char *body_json);
long sy_remote_delete(const char *id);



#endif
