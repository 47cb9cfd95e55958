/* seed.c - --seed NAME=DIR: import a directory tree as a memory store.
 *
 * Runs before the server listens, in one write transaction per store.  The
 * store is the newest live store named NAME, or a new one.  Every regular
 * file under DIR becomes the memory "/" + its relative path, created or
 * rewritten when its bytes differ (one version each, as through the API).
 * Skipped with a warning: names failing the path rules, the marker name
 * .anthropic-memory-store, symlinks and other non-regular files, content
 * that is too large, not UTF-8 or holds a NUL byte, path overlaps, and
 * files past the store's memory cap.  Directory order is sorted so a seed
 * is deterministic.  Prints "seeded name=... id=... memories=N" where N is
 * the number of files the store now mirrors. */
#include "msd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "rules.h"

struct seed {
    struct msd *srv;
    const char *store;
    const char *actor;
    long imported;
};

/* Reads a regular file of at most MEM_CONTENT_MAX_BYTES (+1 to detect
 * overflow).  Returns a malloc'd buffer (caller frees) or NULL with errno. */
static char *read_file(const char *file, size_t *n)
{
    int fd = open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *buf = malloc(MEM_CONTENT_MAX_BYTES + 2);
    size_t len = 0;
    if (!buf) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    for (;;) {
        ssize_t got = read(fd, buf + len, MEM_CONTENT_MAX_BYTES + 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            errno = e;
            return NULL;
        }
        if (got == 0 || (len += (size_t)got) > MEM_CONTENT_MAX_BYTES)
            break;
    }
    close(fd);
    buf[len] = '\0';
    *n = len;
    return buf;
}

static int seed_file(struct seed *sd, const char *file, const char *path)
{
    const char *why = NULL;
    if (rules_check_path(path, strlen(path), &why)) {
        log_warn("seed: skipping a file whose path breaks the memory path rules", "path", path,
                 "reason", why);
        return 0;
    }
    size_t n = 0;
    char *content = read_file(file, &n);
    if (!content) {
        log_warn("seed: cannot read file", "file", file, "error", strerror(errno));
        return 0;
    }
    int rc = 0;
    if (rules_check_content(content, n, &why)) {
        log_warn("seed: skipping file", "path", path, "reason", why);
    } else if (memchr(content, '\0', n)) {
        log_warn("seed: skipping file", "path", path, "reason", "content holds a NUL byte");
    } else {
        rc = memories_put_locked(sd->srv, sd->store, path, content, n, sd->actor);
        if (rc == -EEXIST)
            log_warn("seed: skipping file", "path", path,
                     "reason", "the path overlaps another memory");
        else if (rc == -ENOSPC)
            log_warn("seed: skipping file", "path", path, "reason", "the memory store is full");
        else if (!rc)
            sd->imported++;
        if (rc == -EEXIST || rc == -ENOSPC)
            rc = 0;
    }
    free(content);
    return rc;
}

/* Walks dir (the memory path prefix is rel, "" at the root). */
static int seed_dir(struct seed *sd, const char *dir, const char *rel, int depth)
{
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0) {
        log_warn("seed: cannot read directory", "dir", dir, "error", strerror(errno));
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        char *file = NULL, *path = NULL;
        const char *why = NULL;
        struct stat stbuf;
        if (rc || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            goto next;
        if (asprintf(&file, "%s/%s", dir, name) < 0 || asprintf(&path, "%s/%s", rel, name) < 0) {
            rc = -ENOMEM;
            goto next;
        }
        if (strcmp(name, MEM_MARKER_NAME) == 0) {
            log_warn("seed: skipping the marker name", "path", path);
            goto next;
        }
        if (rules_check_segment(name, &why)) {
            log_warn("seed: skipping a name that breaks the memory path rules", "path", path,
                     "reason", why);
            goto next;
        }
        if (lstat(file, &stbuf)) {
            log_warn("seed: cannot stat", "file", file, "error", strerror(errno));
        } else if (S_ISDIR(stbuf.st_mode)) {
            if (depth >= MEM_PATH_MAX_SEGMENTS)
                log_warn("seed: skipping a directory nested too deep", "path", path);
            else
                rc = seed_dir(sd, file, path, depth + 1);
        } else if (S_ISREG(stbuf.st_mode)) {
            rc = seed_file(sd, file, path);
        } else {
            log_warn("seed: skipping a file that is not a regular file", "path", path);
        }
    next:
        free(file);
        free(path);
        free(ents[i]);
    }
    free(ents);
    return rc;
}

/* Inside the transaction: the newest live store named name, or -ENOENT. */
static int find_store(struct db *db, const char *name, char out[MSD_ID_MAX])
{
    sqlite3_stmt *st;
    int rc = db_prepare(db,
                        "SELECT id FROM stores WHERE name=?1 AND archived_at IS NULL"
                        " ORDER BY created_at DESC, id DESC LIMIT 1",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW)
        snprintf(out, MSD_ID_MAX, "%s", sqlite3_column_text(st, 0));
    rc = s == SQLITE_ROW ? 0 : s == SQLITE_DONE ? -ENOENT : db_errno(s);
    sqlite3_finalize(st);
    return rc;
}

int seed_store(struct msd *srv, const char *name, const char *dir)
{
    size_t chars = utf8_chars(name);
    if (!rules_utf8_valid(name, strlen(name)) || chars < 1 || chars > 255 ||
        has_control_chars(name)) {
        log_error("seed: the store name must be 1 to 255 characters without control characters",
                  "name", name);
        return -EINVAL;
    }
    struct stat stbuf;
    if (stat(dir, &stbuf) || !S_ISDIR(stbuf.st_mode)) {
        log_error("seed: not a directory", "dir", dir);
        return -ENOTDIR;
    }
    char actor[MSD_ID_MAX], id[MSD_ID_MAX];
    api_key_id(srv->api_keys[0], actor);
    struct seed sd = {.srv = srv, .store = id, .actor = actor};
    int rc = db_begin(srv->db, true);
    if (rc)
        return rc;
    rc = find_store(srv->db, name, id);
    if (rc == -ENOENT)
        rc = stores_insert(srv->db, name, "", "{}", id);
    if (!rc)
        rc = seed_dir(&sd, dir, "", 1);
    int crc = db_end(srv->db, rc == 0);
    if (!rc)
        rc = crc;
    if (rc) {
        log_error("seed failed", "name", name, "dir", dir, "error", strerror(-rc));
        return rc;
    }
    printf("seeded name=%s id=%s memories=%ld\n", name, id, sd.imported);
    fflush(stdout);
    return 0;
}
