/* daemon.h - the running daemon, shared by daemon.c and control.c. */
#ifndef MFS_DAEMON_H
#define MFS_DAEMON_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fs.h"
#include "session.h"

/* One connection on the control socket (control.c).  A client has
 * CTL_READ_MS to send its line and CTL_WRITE_MS to take its answer; the
 * main thread never waits for it. */
#define CTL_CLIENTS 8
#define CTL_LINE_MAX 4200
#define CTL_READ_MS 5000
#define CTL_WRITE_MS 10000
struct ctl_client {
    int fd;               /* -1: free slot */
    size_t n;             /* bytes of line received */
    char line[CTL_LINE_MAX];
    char *out;            /* the answer (malloc'd), NULL until the command ran */
    size_t out_len, out_off;
    int64_t deadline_ms;  /* CLOCK_MONOTONIC */
};

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
    struct ctl_client ctl[CTL_CLIENTS];
};

/* Unmounts one store, removes the directories it created, drops its lock. */
void daemon_teardown_store(struct fs_store *s);
/* The final sync of v[0..n) (bounded by the flush timeout), then their
 * teardown; a line per store with unpushed changes goes to report. */
void daemon_unmount(struct fs_store **v, size_t n, FILE *report);
/* status.c: writes the status of every live store to out, then "ok". */
void status_serve(struct daemon *d, FILE *out, bool json);

/* The control socket, served from the main loop without ever blocking on
 * a client (main thread only):
 * control_init marks every client slot free; control_pollfds fills p
 * (at most 1 + CTL_CLIENTS entries: the listening socket, then each
 * client) and returns how many, with *timeout_ms the poll timeout that the
 * nearest client deadline needs (-1: none); control_handle acts on the
 * revents of those entries (accept, read, run a complete command, write,
 * drop clients past their deadline); control_finish gives the answers
 * still queued a last bounded chance at exit and closes every client. */
void control_init(struct daemon *d);
int control_pollfds(struct daemon *d, struct pollfd *p, int *timeout_ms);
void control_handle(struct daemon *d, const struct pollfd *p, int n);
void control_finish(struct daemon *d);

#endif
