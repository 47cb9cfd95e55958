/* cli.h - the command line of memstorefs (parsed in cli.c). */
#ifndef MFS_CLI_H
#define MFS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct session_store;

struct mount_opts {
    struct session_store *stores; /* from --session or --store */
    size_t n_stores;
    int sync_interval;            /* seconds, >= 5 */
    int flush_timeout;            /* seconds */
    int fetch_timeout;            /* seconds: bound of a download a file
                                   * operation waits for */
    int full_resync;              /* seconds between full listings (0: only as a fallback) */
    int max_rpm;                  /* requests per minute, all stores (0: no cap) */
    char *deletions;              /* enabled | log_only | disabled */
    char *cache_dir;
    char *log_file;               /* background mode: where the log goes */
    char *log_level;
    uid_t uid;
    gid_t gid;
    mode_t umask;                 /* --umask: bits taken from every mode (0) */
    bool no_xattrs;               /* --no-xattrs: no user.memstore.* attributes */
    bool foreground;
    char *fuse_opts;              /* extra -o options, comma-joined, or NULL */
    char *credentials;            /* --credentials FILE, or NULL: the environment */
    bool dir_may_exist;           /* mount(8) form: the mount point may be an
                                   * existing empty directory (left in place) */
    uint64_t cache_max_size;      /* --cache-max-size bytes; 0: no limit */
    uint64_t cache_reserve;       /* --cache-reserve bytes; 0: none */
    int conflicts_keep;           /* --conflicts-keep (per store; 0: no limit) */
    int conflicts_max_age;        /* --conflicts-max-age days (0: no limit) */
};

void mount_opts_free(struct mount_opts *o);
/* Parses `mount` arguments (argv[0] is "mount").  0, or 2 after printing a
 * usage error. */
int cli_parse_mount(int argc, char **argv, struct mount_opts *o);
/* A size: a number of bytes with an optional K, M or G suffix (powers
 * of 1024, an optional "iB" or "B" after).  0 or -EINVAL. */
int cli_parse_size(const char *s, uint64_t *out);
/* A decimal integer from min to max, the whole string: 0 or -EINVAL. */
int cli_parse_int(const char *s, long min, long max, long *out);
/* p made absolute against the working directory (malloc'd; NULL with
 * errno set when the working directory cannot be read). */
char *cli_abs_path(const char *p);
/* The default cache directory (malloc'd). */
char *cli_default_cache_dir(void);

/* daemon.c: runs the mount command; returns the exit status. */
int daemon_mount(struct mount_opts *o);
/* control.c: the unmount and status commands; return exit statuses. */
int control_unmount(int argc, char **argv);
int control_status(int argc, char **argv);
/* syncctl.c: the sync command. */
int control_sync(int argc, char **argv);
/* flush.c: the flush command. */
int flush_main(int argc, char **argv);
/* conflicts.c: the conflicts command. */
int conflicts_main(int argc, char **argv);
/* helper.c: `memstorefs STORE_ID MOUNT_PATH -o OPTS`, as mount(8) runs it
 * through mount.fuse3 (or as mount.fuse.memstorefs); the exit status. */
int helper_main(int argc, char **argv);
/* True when argv (after the program name) has the mount(8) helper shape. */
bool helper_form(int argc, char **argv);

/* help.c: the overview, and the help of one command (-1: no such command).
 * help_asked: argv[1..] holds --help or -h. */
void help_overview(FILE *f);
int help_command(const char *cmd, FILE *f);
/* Whether cmd names a command (every command has a help text). */
bool help_is_command(const char *cmd);
bool help_asked(int argc, char **argv);

#endif
