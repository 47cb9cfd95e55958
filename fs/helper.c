/* helper.c - memstorefs as a mount(8) helper.
 *
 * `mount -t fuse.memstorefs memstore_ID /mnt/memory/notes -o ro,...` and
 * the same line in /etc/fstab reach memstorefs in one of two ways, both
 * with the argument shape SOURCE MOUNTPOINT [-o OPTS] [flags]:
 *   - mount(8) runs /sbin/mount.fuse.memstorefs (installed as a symlink to
 *     memstorefs) directly;
 *   - without it, mount(8) runs mount.fuse3, which runs
 *     `memstorefs SOURCE MOUNTPOINT -o OPTS` (adding dev,suid).
 * Both become an ordinary `memstorefs mount --store SOURCE:MOUNTPOINT`
 * in the background: mount(8) returns once the store is mounted and
 * listed.  Options of memstorefs are spelled with underscores
 * (sync_interval=15, cache_dir=DIR, credentials=FILE, ...); mount(8)'s
 * own options (defaults, auto, noauto, user, nouser, users, nofail,
 * _netdev, x-*, comment=) and dev/suid are dropped (the mount stays
 * nodev,nosuid); everything else goes to FUSE as -o.  The mount point may
 * be an existing empty directory, which is left in place at unmount. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_ARGS 64

static const char *const dropped[] = {"defaults", "auto", "noauto", "user", "nouser", "users",
                                      "nofail", "_netdev", "dev", "suid", "rw", "", NULL};

/* memstorefs options in -o form and the long option each stands for. */
static const struct {
    const char *key, *opt;
} mapped[] = {
    {"sync_interval", "--sync-interval"}, {"sync_deletions", "--sync-deletions"},
    {"flush_timeout", "--flush-timeout"}, {"fetch_timeout", "--fetch-timeout"},
    {"cache_dir", "--cache-dir"},
    {"full_resync", "--full-resync"}, {"max_requests_per_minute", "--max-requests-per-minute"},
    {"credentials", "--credentials"},     {"uid", "--uid"},
    {"gid", "--gid"},                     {"log_level", "--log-level"},
    {"log_file", "--log-file"},           {"cache_max_size", "--cache-max-size"},
    {"cache_reserve", "--cache-reserve"}, {"conflicts_keep", "--conflicts-keep"}, {"conflicts_max_age", "--conflicts-max-age"},
    {"umask", "--umask"},
};

bool helper_form(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (strncmp(base, "mount.", 6) == 0)
        return true;
    /* mount.fuse3's form: a store id (never a command name), then an
     * absolute mount point. */
    if (argc < 3 || argv[2][0] != '/' || argv[1][0] == '-' || help_is_command(argv[1]))
        return false;
    for (const char *c = argv[1]; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-'))
            return false;
    return true;
}

static bool is_dropped(const char *opt)
{
    if (strncmp(opt, "x-", 2) == 0 || strncmp(opt, "comment=", 8) == 0)
        return true;
    for (size_t i = 0; dropped[i]; i++)
        if (strcmp(opt, dropped[i]) == 0)
            return true;
    return false;
}

struct args {
    char *v[MAX_ARGS + 1];
    int n;
    char *fuse;  /* comma-joined FUSE options */
    bool ro;
};

static int push(struct args *a, const char *s)
{
    if (a->n >= MAX_ARGS || !(a->v[a->n] = strdup(s))) {
        fprintf(stderr, "memstorefs: too many mount options\n");
        return 2;
    }
    a->n++;
    return 0;
}

static int add_opts(struct args *a, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return 1;
    int rc = 0;
    for (char *o = strtok_r(copy, ",", &save); o && !rc; o = strtok_r(NULL, ",", &save)) {
        if (strcmp(o, "ro") == 0) {
            a->ro = true;
            continue;
        }
        if (strcmp(o, "no_xattrs") == 0) {
            rc = push(a, "--no-xattrs");
            continue;
        }
        if (is_dropped(o))
            continue;
        char *eq = strchr(o, '=');
        bool done = false;
        for (size_t i = 0; eq && i < sizeof(mapped) / sizeof(mapped[0]); i++) {
            if (strlen(mapped[i].key) == (size_t)(eq - o) &&
                strncmp(o, mapped[i].key, (size_t)(eq - o)) == 0) {
                rc = push(a, mapped[i].opt);
                if (!rc)
                    rc = push(a, eq + 1);
                done = true;
            }
        }
        if (done)
            continue;
        size_t have = a->fuse ? strlen(a->fuse) : 0;
        char *f = realloc(a->fuse, have + strlen(o) + 2);
        if (!f) {
            rc = 1;
            break;
        }
        snprintf(f + have, strlen(o) + 2, "%s%s", have ? "," : "", o);
        a->fuse = f;
    }
    free(copy);
    return rc;
}

int helper_main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s STORE_ID MOUNT_PATH [-o OPTIONS]\n"
                        "Try 'memstorefs mount --help'.\n", argv[0]);
        return 2;
    }
    struct args a = {0};
    bool fake = false;
    int rc = push(&a, "mount");
    for (int i = 3; i < argc && !rc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            rc = add_opts(&a, argv[++i]);
        } else if (strncmp(argv[i], "-o", 2) == 0 && argv[i][2]) {
            rc = add_opts(&a, argv[i] + 2);
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            i++; /* fuse.memstorefs */
        } else if (strcmp(argv[i], "-f") == 0) {
            fake = true; /* mount -f: do everything but the mount */
        } else if (strcmp(argv[i], "-r") == 0) {
            a.ro = true;
        } else if (strcmp(argv[i], "-n") && strcmp(argv[i], "-s") && strcmp(argv[i], "-v") &&
                   strcmp(argv[i], "-w")) {
            fprintf(stderr, "memstorefs: unexpected mount helper argument '%s'\n", argv[i]);
            rc = 2;
        }
    }
    char store[8300];
    /* The access always spelt out: --store takes one ":ro" or ":rw" off
     * the end, so a mount point that itself ends so keeps its name. */
    int sn = snprintf(store, sizeof(store), "%s:%s%s", argv[1], argv[2], a.ro ? ":ro" : ":rw");
    if (!rc && (sn < 0 || (size_t)sn >= sizeof(store))) {
        fprintf(stderr, "memstorefs: the memory store id and mount point are too long\n");
        rc = 2;
    }
    if (!rc)
        rc = push(&a, "--store");
    if (!rc)
        rc = push(&a, store);
    if (!rc && a.fuse) {
        rc = push(&a, "-o");
        if (!rc)
            rc = push(&a, a.fuse);
    }
    struct mount_opts o;
    if (!rc)
        rc = cli_parse_mount(a.n, a.v, &o);
    if (!rc) {
        o.dir_may_exist = true;
        rc = fake ? 0 : daemon_mount(&o);
        mount_opts_free(&o);
    }
    for (int i = 0; i < a.n; i++)
        free(a.v[i]);
    free(a.fuse);
    return rc;
}
