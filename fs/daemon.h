/* daemon.h - the running daemon, shared by daemon.c and control.c. */
#ifndef MFS_DAEMON_H
#define MFS_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fs.h"
#include "session.h"

struct daemon {
    struct fs_store *stores;
    size_t n;
    struct cache *cache;
    struct http_client *http;
    struct syncer *sync;
    struct mfs_cred cred;
    int wake_fd;          /* eventfd: a loop thread ended */
    int ctl_fd;           /* control socket, -1 if none */
    char ctl_path[4200];
    int flush_timeout;    /* seconds: bound of the final sync */
    const char *cache_dir;
    uint64_t cache_max_size; /* --cache-max-size, 0: none (for status) */
};

/* Unmounts one store, removes the directories it created, drops its lock. */
void daemon_teardown_store(struct fs_store *s);
/* The final sync of v[0..n) (bounded by the flush timeout), then their
 * teardown; a line per store with unpushed changes, and the files
 * concerned, go to report.  Returns the number of such stores. */
size_t daemon_unmount(struct fs_store **v, size_t n, FILE *report);
/* daemon_io.c: one line per file of the store that the cache still holds
 * unpushed (dirty, deleted locally, refused), at most 50. */
void daemon_list_unpushed(struct cache *c, const char *store_id, const char *mount_path,
                          FILE *out);
/* status.c: writes the status of every live store to fd, then "ok". */
void status_serve(struct daemon *d, int fd, bool json);
/* daemon_io.c: opens the log target of a mount (--log-file, else
 * CACHE_DIR/memstorefs.log in background mode), printing the reason when
 * it cannot; detaches stdio in background mode (stderr stays when the log
 * goes there); the listing progress line (a syncer_opts progress callback
 * whose arg is a bool). */
struct mount_opts;
int daemon_open_log(const struct mount_opts *o);
void daemon_detach_stdio(void);
void daemon_list_progress(void *arg, const char *store_id, size_t listed, bool last);
/* Serves one connection on the control socket (main thread only). */
void control_serve(struct daemon *d, int listen_fd);

#endif
