/* journal.c - the journal of closed files: a close's content survives
 * kill -9 the moment the FLUSH replies, without a commit of its own.
 *
 * A FLUSH (the close of a descriptor) saves the file's content into the
 * lazy transaction (cache/saved.c), committed with the rest of the work
 * of the next few milliseconds; what keeps it until that commit is one
 * record appended here, with one pwritev(2), before the FLUSH replies
 * (content.c, save_closed).  SQLite's commit (B-tree pages, the WAL
 * write, the WAL-index locks) was the largest part of a create or an
 * overwrite; a burst of closes now shares one.
 *
 * The file: CACHE_DIR/journal-<pid>-<ns>, made private (0600, never
 * followed) at the first record, held with an exclusive flock for the
 * life of the cache (daemons may share a cache directory: each has its
 * own journal).  From offset 0 it holds the records of one epoch, the
 * lazy transaction now open: each is a struct jhdr (magic, epoch, the
 * node's ino, mtime, lengths, whether a writer still holds the file, the
 * content's sha, the sha it was edited from, a checksum of the header and
 * the names), then the store id, the path and the content.  Where the
 * file holds older bytes past a record (an earlier epoch's, longer), the
 * record is followed by a zero word, which no record starts with: the
 * replay stops there and never reads what a committed epoch left.
 *
 * Invariants (c->lock guards every field):
 *   - every content a close saved that no commit has made durable yet has
 *     its record in the journal, in the order the closes came;
 *   - the transaction that carries the records also writes their epoch in
 *     meta ("journal <file name>"): after a crash, records of an epoch
 *     meta has are in the database already and are not applied again;
 *   - a commit ends the epoch: the next epoch's records are written from
 *     offset 0 again, over the committed ones (overwriting blocks the file
 *     has is cheaper than an ftruncate and then allocating them again);
 *   - a rollback of the whole transaction (its commit failed) leaves the
 *     records the only copy: the journal is stuck, no record is added and
 *     no write transaction begins until they are applied again
 *     (db_journal_retry, from db_begin and the saver).
 * At cache_open every journal no live process holds is replayed: the
 * records from offset 0 while they are whole and of one epoch meta lacks
 * (a record of a committed epoch, a zero word or a torn record ends it)
 * are applied in order, each to its node
 * (by ino, else by path, else a new file at that path, under the record's
 * ino when no node has it: a told create a failed commit undid) with the close's
 * own check (content edited from a version the store has replaced since
 * becomes a conflict record); then it is emptied and removed.  A torn
 * record (the daemon died writing it: its close had not returned) fails
 * its checksum or its content's hash and ends the replay. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "db_internal.h"
#include "log.h"
#include "private.h"
#include "rules.h"
#include "sha256.h"

#define J_MAGIC 0x314a464du /* "MFJ1" */
#define J_PREFIX "journal-"
/* A journal past this many bytes takes no more records: the close then
 * commits, which empties it. */
#define J_MAX ((off_t)8 << 20)

struct jhdr {
    uint32_t magic;
    uint32_t len; /* content bytes */
    uint64_t epoch;
    uint64_t ino;
    int64_t mtime;
    uint16_t store_len, path_len;
    uint8_t held, has_expect;
    uint8_t pad[2];
    char sha[SHA256_HEX_LEN];
    char expect[SHA256_HEX_LEN];
    uint64_t sum; /* FNV-1a of the header (sum 0), the store id and the path */
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t jsum(struct jhdr h, const char *store, const char *path)
{
    h.sum = 0;
    uint64_t s = fnv(0xcbf29ce484222325ull, &h, sizeof(h));
    s = fnv(s, store, h.store_len);
    return fnv(s, path, h.path_len);
}

static int put_epoch(struct cache *c, const char *key, uint64_t epoch)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)epoch);
    rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, "journal epoch");
}

/* The epoch of key's journal already committed (0: none). */
static int get_epoch(struct cache *c, const char *key, uint64_t *out)
{
    sqlite3_stmt *st;
    *out = 0;
    int rc = db_prepare(c, "SELECT value FROM meta WHERE key = ?1", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = (uint64_t)sqlite3_column_int64(st, 0);
    db_finish(c, st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(c, rc, "journal epoch");
}

/* The live node at path in store, or its directory's when dir: *ino, 0
 * if none.  A database error is returned, never taken for "none" (the
 * record would be kept aside and its file left at the older content). */
static int ino_at(struct cache *c, const char *store, const char *path, size_t n, bool dir,
                  bool *is_dir, uint64_t *ino)
{
    sqlite3_stmt *st;
    *ino = 0;
    int rc = db_prepare(c, "SELECT ino, is_dir FROM nodes WHERE store = ?1 AND path = ?2"
                           " AND unlinked = 0 AND ino > 2", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, path, (int)n, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *ino = (uint64_t)sqlite3_column_int64(st, 0);
        *is_dir = sqlite3_column_int(st, 1) != 0;
        if (dir != *is_dir)
            *ino = 0;
    }
    db_finish(c, st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(c, rc, "journal target");
}

/* The node a record's content goes to: its own (same ino, store and
 * path), else the live file at its path, else a new file there (the one
 * the close saved was made by an open whose lazy create died with it);
 * 1 when the record has no content to place (its file was removed). */
static int target(struct cache *c, const struct jhdr *h, const char *store, const char *path,
                  uint64_t *ino)
{
    struct cnode n = {0};
    char id[CACHE_ID_MAX] = "";
    int got = db_get_node(c, h->ino, &n);
    if (got && got != -ENOENT)
        return got;
    if (got == 0) {
        bool mine = !n.is_dir && strcmp(n.path, path) == 0 &&
                    db_writable_store(c, h->ino, id, NULL) == 0 && strcmp(id, store) == 0;
        /* Its own node, removed: the removal committed at once, so it came
         * before the close.  Removed here (no memory kept, its content
         * kept), the bytes were written to a file gone, as on any file
         * system: nothing to keep.  Removed by the sync (its memory kept;
         * or, never synced, dropped with its content where the store won),
         * the close lost to the store, as it would have live: a conflict
         * record. */
        bool removed = mine && n.unlinked;
        bool by_sync = removed && (n.memory_id[0] || !n.sha[0]);
        cnode_clear(&n);
        if (removed)
            return by_sync ? -ENOENT : 1;
        if (mine) {
            *ino = h->ino;
            return 0;
        }
    }
    bool is_dir = false;
    int rc = ino_at(c, store, path, strlen(path), false, &is_dir, ino);
    if (rc || *ino)
        return rc;
    if (is_dir)
        return -EISDIR;
    const char *slash = strrchr(path, '/');
    if (!slash || !slash[1])
        return -EINVAL;
    uint64_t dir = 0;
    rc = ino_at(c, store, path, slash == path ? 1 : (size_t)(slash - path), true, &is_dir, &dir);
    if (rc)
        return rc;
    if (!dir)
        return -ENOENT;
    /* A file an open created whose row a failed commit undid: the kernel
     * still has it under the ino it was told (never given to another
     * node), so it comes back under that ino. */
    rc = db_create_node(c, dir, slash + 1, h->mtime, got == -ENOENT ? h->ino : 0, &n);
    if (!rc)
        *ino = n.ino;
    cnode_clear(&n);
    return rc;
}

/* A record that has no place any more is kept as a conflict record. */
static int keep_record(struct cache *c, const struct jhdr *h, const char *store,
                       const char *path, const char *sha, const char *buf)
{
    sqlite3_stmt *st;
    int rc = db_blob_put(c, sha, buf, h->len, "keep journal record");
    if (rc)
        return rc;
    rc = db_prepare(c, "INSERT INTO conflicts(store, path, memory_id, local_sha, remote_sha, at,"
                       " kind) VALUES (?1, ?2, NULL, ?3, NULL, ?4, ?5)", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, db_now_ns());
    sqlite3_bind_int(st, 5, CACHE_CONFLICT_UNSAVED);
    rc = sqlite3_step(st);
    db_finish(c, st);
    if (rc != SQLITE_DONE)
        return db_fail(c, rc, "keep journal record");
    log_warn("a closed file of the journal has no place in the cache any more; it is kept as a "
             "conflict record (memstorefs conflicts)", "store", store, "path", path);
    return 0;
}

/* Notes ino among the nodes a replay changed (c->replayed). */
static int tell(struct cache *c, uint64_t ino)
{
    if (c->n_replayed == c->cap_replayed) {
        size_t cap = c->cap_replayed ? 2 * c->cap_replayed : 16;
        uint64_t *v = realloc(c->replayed, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->replayed = v;
        c->cap_replayed = cap;
    }
    c->replayed[c->n_replayed++] = ino;
    return 0;
}

static int apply_record(struct cache *c, const struct jhdr *h, const char *store,
                        const char *path, const char *buf)
{
    char sha[SHA256_HEX_LEN + 1], expect[SHA256_HEX_LEN + 1];
    memcpy(sha, h->sha, SHA256_HEX_LEN);
    sha[SHA256_HEX_LEN] = '\0';
    memcpy(expect, h->expect, SHA256_HEX_LEN);
    expect[SHA256_HEX_LEN] = '\0';
    uint64_t ino = 0;
    bool kept = false;
    int rc = target(c, h, store, path, &ino);
    if (rc == 1)
        return 0;
    if (!rc)
        rc = db_content_put(c, ino, buf, h->len, h->mtime, sha, h->has_expect ? expect : NULL,
                            h->held, &kept);
    if (!rc && c->replay_hook) {
        /* Noted for the hook, which a daemon sets after its cache's open
         * (the replay of dead journals there tells no kernel anything).
         * No room to note it (no memory): the kernel keeps what it showed
         * until its attributes expire; the replay goes on. */
        if (tell(c, h->ino) != 0 || (ino != h->ino && tell(c, ino) != 0))
            c->jtell_lost = true;
    }
    switch (rc) {
    case -EROFS: case -ENOENT: case -EISDIR: case -ENOTDIR: case -EEXIST: case -EPERM:
    case -EINVAL: case -ENAMETOOLONG:
        return keep_record(c, h, store, path, sha, buf);
    default:
        return rc;
    }
}

/* The records of fd not yet in the database (key's epoch), applied in
 * one transaction that also records their epoch; *n counts them. */
static int replay_fd(struct cache *c, int fd, const char *key, uint64_t *epoch, size_t *n)
{
    *n = 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return -errno;
    size_t size = sb.st_size > J_MAX ? (size_t)J_MAX : (size_t)sb.st_size;
    if (size < sizeof(struct jhdr))
        return 0;
    char *data = malloc(size);
    if (!data)
        return -ENOMEM;
    ssize_t got = pread(fd, data, size, 0);
    if (got < 0) {
        int e = -errno;
        free(data);
        return e;
    }
    /* The epoch is read in the transaction that applies the records: a
     * daemon that replayed them meanwhile (another process opening the
     * same cache) has committed its epoch by the time this one can
     * write, and nothing is applied twice. */
    uint64_t done = 0, first = 0;
    size_t off = 0;
    int rc = db_exec(c, "BEGIN IMMEDIATE");
    bool open_tx = rc == 0, burnt = false;
    if (!rc)
        rc = get_epoch(c, key, &done);
    while (!rc && (size_t)got - off >= sizeof(struct jhdr)) {
        struct jhdr h;
        memcpy(&h, data + off, sizeof(h));
        size_t need = sizeof(h) + (size_t)h.store_len + h.path_len + h.len;
        if (h.magic != J_MAGIC || need > (size_t)got - off || h.len > MEM_CONTENT_MAX_BYTES ||
            !h.store_len || h.store_len >= CACHE_ID_MAX || !h.path_len)
            break;
        const char *store = data + off + sizeof(h), *path = store + h.store_len;
        const char *buf = path + h.path_len;
        if (jsum(h, store, path) != h.sum || (first && h.epoch != first))
            break;
        char sha[SHA256_HEX_LEN + 1];
        sha256_hex(buf, h.len, sha);
        if (memcmp(sha, h.sha, SHA256_HEX_LEN) != 0)
            break; /* torn content: its close never returned */
        first = h.epoch;
        if (h.epoch <= done)
            break; /* committed before the daemon stopped */
        char id[CACHE_ID_MAX], *p = strndup(path, h.path_len);
        memcpy(id, store, h.store_len);
        id[h.store_len] = '\0';
        if (!p)
            rc = -ENOMEM;
        if (!rc && !burnt) {
            burnt = true;
            rc = db_ino_burnt(c); /* a record may make a new file */
        }
        if (!rc)
            rc = apply_record(c, &h, id, p, buf);
        free(p);
        if (!rc)
            ++*n;
        off += need;
    }
    if (open_tx) {
        if (!rc && *n)
            rc = put_epoch(c, key, first);
        if (!rc)
            rc = db_exec(c, "COMMIT");
        if (!rc)
            db_room_back(c);
        if (rc)
            sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        if (burnt)
            db_inos_ended(c, rc == 0);
    }
    if (!rc && first && first > *epoch)
        *epoch = first;
    free(data);
    return rc;
}

/* Ends the epoch of this cache's journal: its records are committed, and
 * the next epoch's are written over them from offset 0. */
static void next_epoch(struct cache *c)
{
    c->jend = 0;
}

/* Removes a journal whose records are all in the database: emptied
 * before its epoch row goes, so there is never a record without it. */
static void remove_journal(struct cache *c, int fd, const char *path, const char *key)
{
    if (ftruncate(fd, 0) == 0 && db_exec_bound(c, "DELETE FROM meta WHERE key = ?1", key) == 0)
        (void)unlink(path);
}

/* Replays and removes one journal no process holds.  0 when it is held
 * (another daemon's) or done; a negative errno when its records could
 * not be applied (the file stays for the next open). */
static int replay_dead(struct cache *c, const char *name)
{
    char path[4200], key[300];
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    snprintf(key, sizeof(key), "journal %s", name);
    char why[512] = "";
    int fd = priv_open(path, O_RDWR, why, sizeof(why));
    if (fd < 0) {
        log_warn("cannot read a journal of closed files; it is left as it is", "file", path,
                 "error", why[0] ? why : strerror(-fd));
        return 0;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return 0; /* a live daemon's */
    }
    uint64_t epoch = 0;
    size_t n = 0;
    int rc = replay_fd(c, fd, key, &epoch, &n);
    if (rc) {
        log_error("cannot apply the journal of closed files; it is kept for the next start",
                  "file", path, "error", strerror(-rc));
    } else {
        if (n) {
            char count[24];
            snprintf(count, sizeof(count), "%zu", n);
            log_info("closed files recovered from the journal", "file", path, "files", count);
        }
        remove_journal(c, fd, path, key);
    }
    close(fd);
    return rc;
}

int db_journal_open(struct cache *c)
{
    c->jfd = -1;
    DIR *d = opendir(c->dir);
    if (!d)
        return -errno;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, J_PREFIX, strlen(J_PREFIX)) == 0)
            rc = replay_dead(c, e->d_name);
    closedir(d);
    return rc;
}

/* Whether fd is still the file at path.  Another process opening the
 * cache between this one's creation of its journal and its lock (a second
 * daemon starting, memstorefs flush) finds an empty journal no one holds,
 * takes it for a dead daemon's and removes it: records written to it then
 * would be in a file no replay ever reads. */
static bool still_named(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && a.st_nlink > 0 && lstat(path, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Makes this cache's own journal, at its first record: a new name again
 * when another process took the one just made (above). */
static bool make_journal(struct cache *c)
{
    if (c->jfd >= 0)
        return true;
    if (c->jfailed)
        return false;
    char name[96], path[4200], why[512] = "";
    int fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        snprintf(name, sizeof(name), J_PREFIX "%ld-%llx", (long)getpid(),
                 (unsigned long long)now.tv_sec * 1000000000ull +
                     (unsigned long long)now.tv_nsec);
        snprintf(path, sizeof(path), "%s/%s", c->dir, name);
        why[0] = '\0';
        fd = priv_open(path, O_RDWR | O_CREAT | O_EXCL, why, sizeof(why));
        if (fd < 0)
            break;
        if (c->journal_made)
            c->journal_made(c, path);
        int locked = flock(fd, LOCK_EX | LOCK_NB);
        if (locked != 0) {
            snprintf(why, sizeof(why), "%s", strerror(errno));
            close(fd);
            (void)unlink(path); /* empty, and this name is ours alone */
            fd = -1;
        } else if (!still_named(fd, path)) {
            snprintf(why, sizeof(why), "another process removed it before its lock");
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        c->jfailed = true;
        log_warn("cannot make the journal of closed files; every close commits to the cache "
                 "database on its own", "file", path, "error", why[0] ? why : strerror(-fd));
        return false;
    }
    c->jfd = fd;
    c->jend = 0;
    c->jsize = 0;
    snprintf(c->jkey, sizeof(c->jkey), "journal %s", name);
    return true;
}

bool db_journal_ready(struct cache *c, size_t len)
{
    return !c->jstuck && c->jend + (off_t)(sizeof(struct jhdr) + len + 4096) <= J_MAX &&
           make_journal(c);
}

int db_journal_begin(struct cache *c, bool *first)
{
    *first = !c->jin_tx;
    if (c->jin_tx)
        return 0;
    int rc = put_epoch(c, c->jkey, c->jepoch + 1);
    if (!rc) {
        c->jepoch++;
        c->jin_tx = true;
    }
    return rc;
}

void db_journal_unbegin(struct cache *c, bool first)
{
    if (first)
        c->jin_tx = false;
}

int db_journal_add(struct cache *c, const struct db_jrec *r)
{
    struct jhdr h = {.magic = J_MAGIC, .len = (uint32_t)r->len, .epoch = c->jepoch,
                     .ino = r->ino, .mtime = r->mtime, .held = r->held,
                     .has_expect = r->expect != NULL};
    size_t sl = strlen(r->store), pl = strlen(r->path);
    if (sl >= CACHE_ID_MAX || pl > UINT16_MAX)
        return -ENAMETOOLONG;
    h.store_len = (uint16_t)sl;
    h.path_len = (uint16_t)pl;
    memcpy(h.sha, r->sha, SHA256_HEX_LEN);
    if (r->expect)
        memcpy(h.expect, r->expect, SHA256_HEX_LEN);
    h.sum = jsum(h, r->store, r->path);
    static const uint32_t stop = 0; /* ends the replay where older bytes follow */
    struct iovec v[5] = {{&h, sizeof(h)}, {(void *)r->store, sl}, {(void *)r->path, pl},
                         {(void *)(r->len ? r->buf : ""), r->len}, {(void *)&stop, sizeof(stop)}};
    size_t want = sizeof(h) + sl + pl + r->len;
    bool older = c->jend + (off_t)want < c->jsize;
    size_t put = want + (older ? sizeof(stop) : 0);
    off_t written = c->jend + (off_t)put;
    ssize_t n = pwritev(c->jfd, v, older ? 5 : 4, c->jend);
    if (n != (ssize_t)put) {
        int e = n < 0 ? errno : ENOSPC;
        log_warn("cannot write the journal of closed files; this close commits to the cache "
                 "database at once", "error", strerror(e));
        /* What a short write left is beyond jend and cannot end the replay
         * well: the size is unknown now, so every later record ends with a
         * zero word. */
        c->jsize = J_MAX;
        return -e;
    }
    c->jend += (off_t)want;
    if (written > c->jsize)
        c->jsize = written;
    return 0;
}

void db_journal_ended(struct cache *c, bool committed)
{
    if (!c->jin_tx)
        return;
    c->jin_tx = false;
    if (!committed) {
        if (!c->jstuck)
            log_error("the cache could not commit files closed in the last moments; they stay "
                      "in its journal and are applied again before any other change");
        c->jstuck = true;
        clock_gettime(CLOCK_MONOTONIC, &c->jstuck_since);
        return;
    }
    next_epoch(c);
}

bool db_journal_due(const struct cache *c)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(now.tv_sec - c->jstuck_since.tv_sec) * 1000 +
                 (now.tv_nsec - c->jstuck_since.tv_nsec) / 1000000;
    return ms >= J_RETRY_MS;
}

int db_journal_retry(struct cache *c)
{
    if (!c->jstuck)
        return 0;
    uint64_t epoch = c->jepoch;
    size_t n = 0, told = c->n_replayed;
    int rc = replay_fd(c, c->jfd, c->jkey, &epoch, &n);
    if (rc) {
        c->n_replayed = told; /* rolled back: nothing changed */
        clock_gettime(CLOCK_MONOTONIC, &c->jstuck_since);
        return rc;
    }
    db_errors_flush(c);
    log_info("files closed before a failed commit are in the cache again");
    /* The saver tells the kernel (saved.c), outside the lock: woken now
     * from an untimed or a timed wait alike. */
    if (c->n_replayed > told && c->saver_running)
        pthread_cond_signal(&c->saved_cond);
    if (c->jtell_lost) {
        c->jtell_lost = false;
        log_warn("cannot note the files put back from the journal (no memory); the kernel may "
                 "show their earlier size and content until it looks again");
    }
    c->jstuck = false;
    c->jepoch = epoch;
    next_epoch(c);
    return 0;
}

void db_journal_close(struct cache *c)
{
    if (c->jfd < 0)
        return;
    if (!c->jstuck && !c->jin_tx) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", c->dir, c->jkey + strlen("journal "));
        remove_journal(c, c->jfd, path, c->jkey);
    }
    close(c->jfd);
    c->jfd = -1;
}

/* A record of the stuck journal: its file's ino, the record's order, its
 * path. */
struct jwait {
    uint64_t ino;
    size_t seq;
    char *path;
};

/* By ino, the last record of each first. */
static int cmp_jwait(const void *a, const void *b)
{
    const struct jwait *x = a, *y = b;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return x->seq > y->seq ? -1 : x->seq < y->seq;
}

static void jwait_free(struct jwait *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].path);
    free(v);
}

/* The files of store's records from offset 0 to jend, sorted by ino, each
 * once with the path of its last record (a file closed twice is one
 * file; a rename between closes moves it): every record there is of the
 * epoch the failed commit rolled back (the invariants above), read header
 * by header as they were written. */
static int waiting_files(struct cache *c, const char *store, struct jwait **out, size_t *n)
{
    struct jwait *v = NULL;
    size_t len = strlen(store), cap = 0;
    int rc = 0;
    *n = 0;
    for (off_t off = 0; off + (off_t)sizeof(struct jhdr) <= c->jend;) {
        struct jhdr h;
        char id[CACHE_ID_MAX];
        if (pread(c->jfd, &h, sizeof(h), off) != (ssize_t)sizeof(h) || h.magic != J_MAGIC ||
            h.store_len >= CACHE_ID_MAX ||
            pread(c->jfd, id, h.store_len, off + (off_t)sizeof(h)) != (ssize_t)h.store_len)
            break;
        off_t at = off + (off_t)(sizeof(h) + h.store_len);
        off += (off_t)(sizeof(h) + h.store_len + h.path_len + h.len);
        if (h.store_len != len || memcmp(id, store, len) != 0)
            continue;
        char *path = malloc((size_t)h.path_len + 1);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        if (pread(c->jfd, path, h.path_len, at) != (ssize_t)h.path_len) {
            free(path);
            break;
        }
        path[h.path_len] = '\0';
        if (*n == cap) {
            struct jwait *w = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*w));
            if (!w) {
                free(path);
                rc = -ENOMEM;
                break;
            }
            v = w;
        }
        v[*n] = (struct jwait){h.ino, *n, path};
        ++*n;
    }
    if (rc) {
        jwait_free(v, *n);
        *n = 0;
        return rc;
    }
    if (*n)
        qsort(v, *n, sizeof(*v), cmp_jwait);
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        if (k && v[k - 1].ino == v[i].ino)
            free(v[i].path); /* an earlier record of the same file */
        else
            v[k++] = v[i];
    }
    *n = k;
    *out = v;
    return 0;
}

int db_journal_waiting(struct cache *c, const char *store, size_t *n, size_t *n_new,
                       struct cache_jfile **files)
{
    *n = *n_new = 0;
    if (files)
        *files = NULL;
    if (!c->jstuck || c->jfd < 0)
        return 0;
    struct jwait *v = NULL;
    size_t k = 0;
    int rc = waiting_files(c, store, &v, &k);
    /* What the other counts have already (cache_store_pending): a dirty or
     * refused row is a change left either way; a row an open made and no
     * close has saved (unsaved 1) is counted as never closed, wrongly:
     * cache_store_stats moves it here.  A removed one places nothing. */
    sqlite3_stmt *st = NULL;
    if (!rc && k)
        rc = db_prepare(c, "SELECT state, unsaved, unlinked FROM nodes WHERE ino = ?", &st);
    size_t kept = 0, i = 0;
    for (; !rc && i < k; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, (sqlite3_int64)v[i].ino);
        int step = sqlite3_step(st);
        bool only_here = false;
        if (step == SQLITE_DONE) {
            only_here = true; /* its create was rolled back too */
        } else if (step != SQLITE_ROW) {
            rc = db_fail(c, step, "journal waiting");
        } else if (sqlite3_column_int(st, 2)) {
            only_here = false;
        } else if (sqlite3_column_int(st, 1) == CACHE_NEW) {
            only_here = true;
            ++*n_new;
        } else {
            only_here = sqlite3_column_int(st, 0) == CNODE_CLEAN;
        }
        if (only_here) {
            ++*n;
            v[kept++] = v[i];
        } else {
            free(v[i].path);
        }
    }
    db_finish(c, st);
    if (!rc && files && kept) {
        /* The kept ones, in ino order still: the caller's files. */
        struct cache_jfile *f = malloc(kept * sizeof(*f));
        if (!f) {
            rc = -ENOMEM;
        } else {
            for (size_t j = 0; j < kept; j++) {
                f[j] = (struct cache_jfile){v[j].ino, v[j].path};
                v[j].path = NULL;
            }
            *files = f;
        }
    }
    for (size_t j = 0; j < kept; j++) /* NULL once handed over */
        free(v[j].path);
    for (; i < k; i++) /* not looked at: a failed read */
        free(v[i].path);
    free(v);
    return rc;
}
