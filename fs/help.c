/* help.c - the help texts of memstorefs and of each command.
 *
 * `memstorefs --help` gives the overview, `memstorefs COMMAND --help` (or
 * `memstorefs help COMMAND`) the command's own options; both go to stdout
 * and exit 0.  The man page memstorefs(1) (docs/man/memstorefs.1.scd) says
 * the same at length; tests/test_cli_help.c checks that every option
 * named here appears there. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char overview[] =
    "memstorefs - memory stores as directories, backed by a local cache\n"
    "\n"
    "usage:\n"
    "  memstorefs mount (--session FILE | --store ID:MOUNT_PATH[:ro]...) [options]\n"
    "  memstorefs unmount PATH... | --all\n"
    "  memstorefs status [--json]\n"
    "  memstorefs sync [PATH... | --all] [--wait]\n"
    "  memstorefs conflicts [show ID | restore ID | diff ID | drop ID | drop --all |\n"
    "                       drop --older-than DAYS] [--cache-dir DIR] [--json]\n"
    "  memstorefs log [--json] PATH | log --deleted [--json] DIR\n"
    "  memstorefs show PATH --version ID\n"
    "  memstorefs restore PATH --version ID [--to PATH]\n"
    "  memstorefs flush [--cache-dir DIR] [--store ID]... [--sync-deletions MODE]\n"
    "  memstorefs STORE_ID MOUNT_PATH [-o OPTS]    (the mount.fuse3 form, for mount(8))\n"
    "  memstorefs --help | --version\n"
    "  memstorefs COMMAND --help                   (the options of one command)\n"
    "\n"
    "exit status: 0 success, 1 failure, 2 bad usage; unmount: 3 when it unmounted\n"
    "but changes stayed unpushed in the cache; sync --wait: 3 when the sync ran but\n"
    "changes are not in the store.\n"
    "\n"
    "environment: ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN or ANTHROPIC_WORK_SECRET\n"
    "(the credential), ANTHROPIC_BASE_URL (the API endpoint), MEMSTOREFS_RUNTIME_DIR,\n"
    "MEMSTOREFS_CACHE_DIR, MEMSTOREFS_SYSLOG_SOCKET, NOTIFY_SOCKET.\n"
    "See memstorefs(1).\n";

static const char mount_help[] =
    "usage: memstorefs mount (--session FILE | --store ID:MOUNT_PATH[:ro]...) [options]\n"
    "\n"
    "Mounts each memory store at its path and returns once every store is mounted\n"
    "and listed (0), or fails with the reason and nothing left mounted (1).\n"
    "\n"
    "  --session FILE          a session object (or its resources array, or a resources\n"
    "                          page {\"data\": [...]}) as the API returns it; only\n"
    "                          memory_store resources count (at most 8); - is stdin\n"
    "  --store ID:PATH[:ro]    a store and its mount path (repeatable)\n"
    "  --sync-interval SEC     seconds between syncs (default 15, minimum 5)\n"
    "  --sync-deletions MODE   enabled | log_only | disabled (default enabled)\n"
    "  --flush-timeout SEC     bound of the final sync at unmount (default 30)\n"
    "  --fetch-timeout SEC     bound of a download an open waits for, a 429's pause\n"
    "                          included; past it the open fails with EIO (default 60)\n"
    "  --full-resync SEC       list each store in full at least this often, as a safety\n"
    "                          net for the version feed (default 300; 0: only when the\n"
    "                          feed cannot be used)\n"
    "  --max-requests-per-minute N\n"
    "                          cap on the requests of every store together (default:\n"
    "                          no cap; a 429 pauses every request anyway)\n"
    "  --cache-dir DIR         the local cache (default /var/lib/memstorefs for root,\n"
    "                          else $XDG_STATE_HOME/memstorefs)\n"
    "  --cache-max-size SIZE   most content the cache keeps (e.g. 500M; default 0: no\n"
    "                          limit); past it clean files are evicted, fetched on open\n"
    "  --cache-reserve SIZE    disk space kept beside the cache for the last sync of a\n"
    "                          session that ends on a full disk (default 24M; 0: none)\n"
    "  --conflicts-keep N      conflict records kept per store (default 100; 0: all)\n"
    "  --conflicts-max-age DAYS  conflict records older than this go (default 30; 0:\n"
    "                          never)\n"
    "  --credentials FILE      KEY=VALUE lines (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,\n"
    "                          ANTHROPIC_WORK_SECRET, ANTHROPIC_BASE_URL) that override\n"
    "                          the environment; refused when group or others may read it\n"
    "  --uid UID, --gid GID    owner of the files (default: the caller)\n"
    "  --no-xattrs             no user.memstore.* attributes: the kernel then stops\n"
    "                          asking for attributes (faster listings and writes)\n"
    "  -f, --foreground        stay attached; log to stderr\n"
    "  --log-level LEVEL       error | warn | info | debug (default info)\n"
    "  --log-file FILE         where the log goes once mounted: a file (reopened on\n"
    "                          SIGHUP), syslog, or - for stderr (default: stderr with\n"
    "                          --foreground, else CACHE_DIR/memstorefs.log)\n"
    "  -o OPTS                 extra FUSE mount options\n"
    "  -h, --help              this help\n";

static const char unmount_help[] =
    "usage: memstorefs unmount PATH... | --all\n"
    "\n"
    "Runs a final sync of the stores mounted at PATH (or of every store), then\n"
    "unmounts them and removes the directories their mount created.  A dead mount\n"
    "(its daemon was killed) is cleaned up.\n"
    "\n"
    "  --all                   every store mounted on this host (this runtime dir)\n"
    "  -h, --help              this help\n"
    "\n"
    "exit status: 0 everything unmounted and pushed; 1 a path is not a memstorefs\n"
    "mount or could not be unmounted; 2 bad usage; 3 unmounted, but changes stayed\n"
    "unpushed in the cache (each listed on stderr; the next mount or memstorefs\n"
    "flush pushes them; a file the server refused is retried once it changes).\n";

static const char status_help[] =
    "usage: memstorefs status [--json]\n"
    "\n"
    "Shows every mounted store: counts, content cached / total, the last sync and\n"
    "its report, whether syncs keep up (STUCK or FAILING for longer than the sync\n"
    "interval, since when and why), the cache's size, refused files, conflicts;\n"
    "and dead mounts.\n"
    "\n"
    "  --json                  one JSON object per store and line\n"
    "  -h, --help              this help\n";

static const char sync_help[] =
    "usage: memstorefs sync [PATH... | --all] [--wait]\n"
    "\n"
    "Runs a sync of the stores mounted at PATH (a mount point or a path inside\n"
    "one; or of every store) now: the remote changes come in, the local ones go\n"
    "out, all of them (a backlog in slices, store after store).  The next\n"
    "periodic sync comes an interval after it.\n"
    "\n"
    "  --all                   every store mounted on this host (the default)\n"
    "  --wait                  return once that sync is done, with a line per store;\n"
    "                          without it, return at once\n"
    "  -h, --help              this help\n"
    "\n"
    "exit status: 0 synced (everything pushed, with --wait); 1 a path is not a\n"
    "memstorefs mount, or a sync failed (the reason on stderr); 2 bad usage; 3\n"
    "synced, but changes are not in the store (each listed: refused, still open\n"
    "for writing, failed).\n";

static const char conflicts_help[] =
    "usage: memstorefs conflicts [show ID | restore ID | diff ID | drop ID | drop --all |\n"
    "                             drop --older-than DAYS] [--cache-dir DIR] [--json]\n"
    "\n"
    "Lists the local versions that lost to the store, prints one of them, puts one\n"
    "back, compares one with its file, or removes records and their content.\n"
    "\n"
    "  show ID                 write conflict ID's local content to stdout\n"
    "  restore ID              make it its file's content again, a local edit the next\n"
    "                          sync pushes (through the running daemon; the record is\n"
    "                          dropped)\n"
    "  diff ID                 a unified diff of it against its file's current content\n"
    "  drop ID                 remove conflict ID\n"
    "  drop --all              remove every conflict record\n"
    "  drop --older-than DAYS  remove the records older than DAYS days\n"
    "  --cache-dir DIR         the cache (default: those of the runtime directory's\n"
    "                          mounts and the default one, as for mount; restore and\n"
    "                          diff ask the running daemons first)\n"
    "  --json                  one JSON object per record and line\n"
    "  -h, --help              this help\n"
    "\n"
    "exit status: 0 done; 1 failure (no such record, no daemon for restore, ...);\n"
    "2 bad usage.\n";

static const char log_help[] =
    "usage: memstorefs log [--json] PATH\n"
    "       memstorefs log --deleted [--json] DIR\n"
    "\n"
    "Lists the versions of the memory behind a file of a mount, newest first: version\n"
    "id, time, operation, who wrote it (session, API key, user, service account),\n"
    "size and the path at the time (renames show).  PATH may be a file that was\n"
    "deleted.  Asks the running daemon, which reads the store's version history with\n"
    "its own credential.\n"
    "\n"
    "  --deleted               list the memories deleted under directory DIR of a\n"
    "                          mount instead: last path, time, who, memory id\n"
    "  --json                  one JSON object per version (or memory) and line\n"
    "  -h, --help              this help\n"
    "\n"
    "exit status: 0 listed; 1 failure (not in a mount, never synced, the server\n"
    "down, ...); 2 bad usage.\n";

static const char show_help[] =
    "usage: memstorefs show PATH --version ID\n"
    "\n"
    "Writes the content of version ID (of the memory behind PATH) to stdout, byte\n"
    "for byte.  A redacted version, or the version of a deletion, has no content: it\n"
    "says so and exits 1.\n"
    "\n"
    "  --version ID            the version (memstorefs log PATH lists them)\n"
    "  -h, --help              this help\n"
    "\n"
    "exit status: 0 written; 1 failure (unknown or redacted version, the server\n"
    "down, ...); 2 bad usage.\n";

static const char restore_help[] =
    "usage: memstorefs restore PATH --version ID [--to PATH]\n"
    "\n"
    "Makes the content of version ID the file's content again, as an ordinary local\n"
    "edit: the next sync pushes it (one new modified version), under the same rules\n"
    "as any edit.  For a deleted memory it recreates the file at PATH (its last path)\n"
    "as a new file.  Local changes the store does not have yet are kept as a conflict\n"
    "record first.  Refused on a read-only store (EROFS).\n"
    "\n"
    "  --version ID            the version (memstorefs log PATH lists them)\n"
    "  --to PATH               write it to a new file PATH of the same mount instead\n"
    "  -h, --help              this help\n"
    "\n"
    "exit status: 0 restored (or the file held that content already); 1 failure\n"
    "(read-only store, unknown or redacted version, the file open for writing, the\n"
    "server down, ...); 2 bad usage.\n";

static const char flush_help[] =
    "usage: memstorefs flush [--cache-dir DIR] [--store ID]... [--sync-deletions MODE]\n"
    "\n"
    "Pushes what a cache directory holds that never reached its stores (after a\n"
    "daemon was killed).  Needs the credential in the environment, as mount does.\n"
    "\n"
    "  --cache-dir DIR         the cache (default: as for mount)\n"
    "  --store ID              only this store (repeatable)\n"
    "  --sync-deletions MODE   enabled | log_only | disabled (default enabled)\n"
    "  -h, --help              this help\n";

static const struct {
    const char *cmd;
    const char *text;
} texts[] = {
    {"mount", mount_help},         {"unmount", unmount_help}, {"umount", unmount_help},
    {"status", status_help},       {"flush", flush_help},     {"conflicts", conflicts_help},
    {"sync", sync_help},           {"log", log_help},         {"show", show_help},
    {"restore", restore_help},
};

void help_overview(FILE *f)
{
    fputs(overview, f);
}

int help_command(const char *cmd, FILE *f)
{
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        if (strcmp(texts[i].cmd, cmd) == 0) {
            fputs(texts[i].text, f);
            return 0;
        }
    }
    return -1;
}

bool help_is_command(const char *cmd)
{
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if (strcmp(texts[i].cmd, cmd) == 0)
            return true;
    return strcmp(cmd, "help") == 0;
}

bool help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    }
    return false;
}
