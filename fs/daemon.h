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
    uint64_t cache_max_size; /* --cache-max-size, 0: none (for status) */
    uint64_t cache_reserve;  /* --cache-reserve, 0: none (finalsync.c) */
};

/* fsmount.c: mounts store s (its FUSE session, with the options of o) and
 * starts its loop thread, which writes s->wake_fd as it ends; 0 or a
 * negative errno, the reason printed to stderr.  fsmount_log_init sends
 * libfuse's own messages to the daemon's log. */
struct mount_opts;
int fsmount_start(struct fs_store *s, const struct mount_opts *o);
void fsmount_log_init(void);
/* fsmount.c: whether store s's own mount (the mount id its lock file
 * records) is still in the mount table; its mount point in at (len
 * bytes), when at is not NULL.  After its loop ended by itself: true
 * when the connection was aborted from outside (or the loop failed),
 * false when it was unmounted from outside. */
bool fsmount_in_place(const struct fs_store *s, char *at, size_t len);
/* fsmount.c: unmounts v[0..n) (at most 16) together, files still held
 * open in them served for up to 2 s in all, then their connections
 * aborted; removes the directories made for them, drops their locks,
 * and calls torn (when not NULL) with each store then. */
void daemon_teardown_stores(struct fs_store **v, size_t n, void (*torn)(const struct fs_store *));
/* Joins the loop threads of stores torn down while files held open kept
 * them serving (fs_store.loop_left) that have ended since; the number of
 * v[0..n) still running. */
size_t daemon_reap_loops(struct fs_store *v, size_t n);
/* finalsync.c: the final sync of v[0..n) at unmount, bounded by the flush
 * timeout: past it, requests in flight are cancelled and what they carried
 * stays dirty in the cache for the next mount.  On a full disk it frees the
 * cache's reserve for itself (cache/reserve.c); unless last (no store of
 * the daemon is left after these), the reserve is made again after it. */
void daemon_final_sync(struct daemon *d, struct fs_store **v, size_t n, bool last);
/* After their teardown (nothing can be written to them any more): one line
 * per store of v[0..n) with something left unpushed to report (may be
 * NULL) and to the log, then (to report) the files concerned.  Returns
 * how many stores left some (a store whose state cannot be read counts). */
size_t daemon_final_report(struct daemon *d, struct fs_store **v, size_t n, FILE *report);
/* The final sync of v[0..n) (bounded by the flush timeout), then their
 * teardown; a line per store with unpushed changes, and the files
 * concerned, go to report.  Returns the number of such stores. */
size_t daemon_unmount(struct fs_store **v, size_t n, FILE *report);
/* daemon_io.c: one line per file of the store that the cache still holds
 * unpushed (dirty, deleted locally, refused), and, but after the final
 * sync, per file a writer holds with an edit not saved yet; at most 50
 * lines, then a count.  final: after the final sync, which pushes files
 * writers still hold too; after any other, a changed file a writer holds
 * open is named as such (a sync pushes it only once it is closed). */
void daemon_list_unpushed(struct cache *c, const char *store_id, const char *mount_path,
                          bool final, FILE *out);
/* daemon_io.c: only the files of the store a writer holds open with an
 * edit no close or fsync has saved yet (in no list of the cache: not
 * pushed; daemon_list_unpushed names them too, unless final), for a store
 * with nothing else left; how many it named or counted. */
size_t daemon_list_unsaved_open(struct cache *c, const char *store_id, const char *mount_path,
                                FILE *out);
/* control.c: sends cmd to daemon pid and copies its answer lines (but the
 * final one) to out.  0 on "ok", 1 on "ok unpushed", -EIO with the reason
 * printed otherwise, or a negative errno when the daemon cannot be reached
 * or does not answer within timeout_s. */
int control_ask(pid_t pid, const char *cmd, FILE *out, int timeout_s);
/* control_ask of the daemon a store's lock names; a daemon still setting
 * up its mount (no control socket yet) is waited for, within timeout_s.
 * A daemon that cannot be reached is said on stderr (with the store's
 * mount path); an error it answered was printed by control_ask. */
struct rt_lockinfo;
int control_ask_mount(const struct rt_lockinfo *info, const char *cmd, FILE *out, int timeout_s);
/* ctlserve.c: sends n bytes of an answer on fd, a blocking socket with
 * a send timeout, from a thread of its own; gives up when the client is
 * gone or has not read it all by *deadline_ms (set on the first call of an
 * answer, from 0, to CTL_SEND_MS from now): a client that reads a byte at
 * a time holds the thread no longer than that. */
#define CTL_SEND_MS 10000
void ctl_send_all(int fd, const char *s, size_t n, int64_t *deadline_ms);
/* syncctl.c: serves a "sync..." command on fd; true when a thread of its
 * own now answers and closes fd.  syncctl_drain waits (bounded) for them:
 * false when one still runs. */
bool syncctl_serve(struct daemon *d, int fd, const char *line);
bool syncctl_drain(int timeout_s);
/* status.c: writes the status of every live store to out, then "ok". */
void status_serve(struct daemon *d, FILE *out, bool json);
/* daemon_io.c: opens the log target of a mount (--log-file, else
 * CACHE_DIR/memstorefs.log in background mode), printing the reason when
 * it cannot; detaches stdio in background mode (stderr stays when the log
 * goes there); the listing progress line (a syncer_opts progress callback
 * whose arg is a bool). */
struct mount_opts;
int daemon_open_log(const struct mount_opts *o);
void daemon_detach_stdio(void);
void daemon_list_progress(void *arg, const char *store_id, size_t listed, bool last);

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
/* At exit, once no store is left: clients that connected meanwhile get
 * their answer (an unmount: what the stores' unmount reported), for at
 * most ms milliseconds. */
void control_serve_late(struct daemon *d, int ms);

#endif
