/* main.c - memstorefs: dispatch of the subcommands (mount, unmount,
 * status) and the help text. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "log.h"

static const char help[] =
    "memstorefs - memory stores as directories, backed by a local cache\n"
    "\n"
    "usage:\n"
    "  memstorefs mount (--session FILE | --store ID:MOUNT_PATH[:ro]...) [options]\n"
    "  memstorefs unmount PATH... | --all\n"
    "  memstorefs status [--json]\n"
    "  memstorefs conflicts [show ID] [--cache-dir DIR] [--json]\n"
    "  memstorefs flush [--cache-dir DIR] [--store ID]... [--sync-deletions MODE]\n"
    "  memstorefs --help | --version\n"
    "\n"
    "mount options:\n"
    "  --session FILE          a session object (or its resources array) as the API\n"
    "                          returns it; only memory_store resources count (at most 8)\n"
    "  --store ID:PATH[:ro]    a store and its mount path (repeatable)\n"
    "  --sync-interval SEC     seconds between syncs (default 15, minimum 5)\n"
    "  --sync-deletions MODE   enabled | log_only | disabled (default enabled)\n"
    "  --flush-timeout SEC     bound of the final sync at unmount (default 30)\n"
    "  --cache-dir DIR         the local cache (default /var/lib/memstorefs for root,\n"
    "                          else $XDG_STATE_HOME/memstorefs)\n"
    "  --uid UID, --gid GID    owner of the files (default: the caller); a root mount\n"
    "                          is private to root unless they name another user/group\n"
    "  --umask MASK            octal bits taken from the modes 0644/0755 (default 000)\n"
    "  -f, --foreground        stay attached; log to stderr\n"
    "  --log-level LEVEL       error | warn | info | debug (default info)\n"
    "  --log-file FILE         background log (default CACHE_DIR/memstorefs.log)\n"
    "  -o OPTS                 extra FUSE mount options (-o allow_other: every account\n"
    "                          may use the mount, as the modes allow)\n"
    "\n"
    "environment: ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN or ANTHROPIC_WORK_SECRET\n"
    "(the credential), ANTHROPIC_BASE_URL (the API endpoint), MEMSTOREFS_RUNTIME_DIR,\n"
    "MEMSTOREFS_CACHE_DIR.\n";

int main(int argc, char **argv)
{
    log_set_tag("memstorefs");
    if (argc < 2) {
        fputs(help, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(help, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("memstorefs %s\n", MFS_VERSION);
        return 0;
    }
    if (strcmp(cmd, "mount") == 0) {
        struct mount_opts o;
        int rc = cli_parse_mount(argc - 1, argv + 1, &o);
        if (rc)
            return rc;
        rc = daemon_mount(&o);
        mount_opts_free(&o);
        return rc;
    }
    if (strcmp(cmd, "unmount") == 0 || strcmp(cmd, "umount") == 0)
        return control_unmount(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0)
        return control_status(argc - 1, argv + 1);
    if (strcmp(cmd, "flush") == 0)
        return flush_main(argc - 1, argv + 1);
    if (strcmp(cmd, "conflicts") == 0)
        return conflicts_main(argc - 1, argv + 1);
    fprintf(stderr, "memstorefs: unknown command '%s'\nTry 'memstorefs --help'.\n", cmd);
    return 2;
}
