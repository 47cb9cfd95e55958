/* conflicts_act.c - conflict records you can act on:
 *   memstorefs conflicts restore ID [--cache-dir DIR]
 *       the record's local content becomes its file's content again, as
 *       a local edit (restore.c), through the daemon that mounts its
 *       store; the record is dropped then (its bytes are the file's)
 *   memstorefs conflicts diff ID [--cache-dir DIR]
 *       the record against the file's current content (diff -u)
 * Record ids are per cache directory.  The record is looked for in the
 * caches of the running daemons (hist-conflict-find; with --cache-dir,
 * only a daemon of that cache), so the caller needs to know neither the
 * cache directory nor a credential.  With no daemon holding it, diff
 * reads the cache that holds it directly (--cache-dir, else those of the
 * runtime directory's mounts and the default one: conflicts_caches.c), as
 * `conflicts show` does; restore needs the daemon, whose mount must see
 * the edit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "history.h"
#include "runtime.h"

int conflict_current(struct cache *c, const char *store_id, const struct cache_conflict *k,
                     char **cur, size_t *cur_len, char *cur_path, size_t pathlen,
                     char other[CACHE_ID_MAX])
{
    *cur = NULL;
    *cur_len = 0;
    cur_path[0] = other[0] = '\0';
    struct cnode n;
    int rc = k->memory_id[0] ? cache_file_of_memory(c, store_id, k->memory_id, &n) : -ENOENT;
    if (rc == -ENOENT) {
        rc = cache_node_at(c, store_id, k->path, &n);
        if (!rc && n.is_dir) {
            cnode_clear(&n);
            rc = -ENOENT;
        }
    }
    if (rc == -ENOENT)
        return 0; /* no file now */
    if (rc)
        return rc;
    snprintf(cur_path, pathlen, "%s", n.path);
    if (n.memory_id[0] && strcmp(n.memory_id, k->memory_id) != 0)
        snprintf(other, CACHE_ID_MAX, "%s", n.memory_id);
    if (!n.sha[0])
        rc = (*cur = strdup("")) ? 0 : -ENOMEM;
    else
        rc = cache_blob_get(c, n.sha, cur, cur_len);
    cnode_clear(&n);
    return rc == -ENOENT ? -ENODATA : rc;
}

void conflict_label(char *buf, size_t len, const char *mount, const char *path,
                    const char *other)
{
    if (other[0])
        snprintf(buf, len, "%s%s (memory %s's file, not the record's: conflicts restore does "
                 "not write into it)", mount, path, other);
    else
        snprintf(buf, len, "%s%s", mount, path);
}

struct daemons {
    pid_t v[64];
    int n;
};

static int add_daemon(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    struct daemons *d = arg;
    for (int i = 0; i < d->n; i++)
        if (d->v[i] == info->pid)
            return 0;
    if (alive && d->n < 64)
        d->v[d->n++] = info->pid;
    return 0;
}

static int write_file(const char *path, const char *buf, size_t len)
{
    FILE *f = fopen(path, "wx");
    if (!f)
        return -errno;
    size_t w = len ? fwrite(buf, 1, len, f) : 0;
    return fclose(f) == 0 && w == len ? 0 : -EIO;
}

/* diff -u of the lost bytes against the current ones (NULL: no file). */
static int show_diff(const char *id, const char *path, const char *lost, size_t lost_len,
                     const char *cur_path, const char *cur, size_t cur_len)
{
    char dir[] = "/tmp/memstorefs-diff-XXXXXX", a[64], b[64], la[4400], lb[4400];
    if (!mkdtemp(dir)) {
        fprintf(stderr, "memstorefs conflicts: cannot make a temporary directory: %s\n",
                strerror(errno));
        return 1;
    }
    snprintf(a, sizeof(a), "%s/lost", dir);
    snprintf(b, sizeof(b), "%s/current", dir);
    snprintf(la, sizeof(la), "%s (conflict %s: the local version that lost)", path, id);
    snprintf(lb, sizeof(lb), "%s (now)", cur ? cur_path : "(no file now)");
    int rc = write_file(a, lost, lost_len);
    if (!rc && cur)
        rc = write_file(b, cur, cur_len);
    int status = 1;
    if (rc) {
        fprintf(stderr, "memstorefs conflicts: cannot write a temporary file: %s\n",
                strerror(-rc));
    } else {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execlp("diff", "diff", "-u", "--label", la, "--label", lb, a, cur ? b : "/dev/null",
                   (char *)NULL);
            fprintf(stderr, "memstorefs conflicts: cannot run diff(1) (diffutils): %s\n",
                    strerror(errno));
            _exit(2);
        }
        int st = 0;
        if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) < 2) {
            status = 0;
            if (WEXITSTATUS(st) == 0 && cur)
                printf("conflict %s is the same as the current content\n", id);
            else if (WEXITSTATUS(st) == 0)
                printf("conflict %s is empty, and there is no file at %s now\n", id, path);
        }
    }
    unlink(a);
    unlink(b);
    rmdir(dir);
    return status;
}

/* diff from an answer: "path P", "current C", data (lost), data (current). */
static int diff_answer(const char *id, const char *out, size_t len)
{
    const char *p = out, *end = out + len, *lost, *cur;
    size_t lost_len, cur_len;
    char path[4400], cur_path[4400];
    const char *nl1 = memchr(p, '\n', len), *nl2 = nl1 ? memchr(nl1 + 1, '\n', end - nl1 - 1) : 0;
    if (!nl2 || strncmp(p, "path ", 5) != 0 || strncmp(nl1 + 1, "current ", 8) != 0) {
        fprintf(stderr, "memstorefs conflicts: the daemon's answer is malformed\n");
        return 1;
    }
    snprintf(path, sizeof(path), "%.*s", (int)(nl1 - p - 5), p + 5);
    snprintf(cur_path, sizeof(cur_path), "%.*s", (int)(nl2 - nl1 - 9), nl1 + 9);
    p = nl2 + 1;
    if (hist_take_data(&p, end, &lost, &lost_len) || hist_take_data(&p, end, &cur, &cur_len)) {
        fprintf(stderr, "memstorefs conflicts: the daemon's answer is malformed\n");
        return 1;
    }
    bool none = strcmp(cur_path, "-") == 0;
    return show_diff(id, path, lost, lost_len, cur_path, none ? NULL : cur, cur_len);
}

/* No daemon has the record: diff straight from the cache directory that
 * holds it (conflict_caches: --cache-dir, else the mounts' and the
 * default one). */
static int diff_from_cache(const char *idstr, long long id, const char *cache_dir)
{
    char **v = NULL;
    size_t n = 0;
    int rc = conflict_caches(cache_dir, &v, &n);
    if (rc)
        return 1;
    struct cache *c = NULL;
    rc = conflict_holder(v, n, id, false, &c, NULL);
    conflict_caches_free(v, n);
    if (rc == -ENOENT)
        fprintf(stderr, "memstorefs conflicts: no conflict %s\n", idstr);
    if (rc)
        return 1;
    struct cache_conflict k = {0};
    char store[CACHE_ID_MAX], cur_path[4200], other[CACHE_ID_MAX], label[4600];
    char *lost = NULL, *cur = NULL;
    size_t lost_len = 0, cur_len = 0;
    int status = 1;
    rc = cache_conflict_get(c, id, store, &k); /* its store and path: the holder found it */
    if (rc)
        fprintf(stderr, "memstorefs conflicts: cannot read conflict %s: %s\n", idstr,
                strerror(-rc));
    if (!rc && (rc = cache_conflict_content(c, id, &lost, &lost_len)))
        fprintf(stderr, "memstorefs conflicts: the content of conflict %s is not in the cache\n",
                idstr);
    if (!rc && (rc = conflict_current(c, store, &k, &cur, &cur_len, cur_path,
                                      sizeof(cur_path), other)))
        fprintf(stderr, "memstorefs conflicts: the current content of %s is not in the cache "
                        "(mount the store to read it)\n", cur_path);
    if (!rc) {
        conflict_label(label, sizeof(label), "", cur_path, other);
        status = show_diff(idstr, k.path, lost, lost_len, label, cur, cur_len);
    }
    free(lost);
    free(cur);
    if (k.path)
        free(k.path);
    cache_close(&c);
    return status;
}

int conflicts_act(const char *cmd, const char *idstr, const char *cache_dir)
{
    long long id;
    if (!conflict_parse_id(idstr, 1, &id)) {
        fprintf(stderr, "memstorefs conflicts: '%s' is not a conflict id\n", idstr);
        return 2;
    }
    bool diff = strcmp(cmd, "diff") == 0;
    struct daemons ds = {.n = 0};
    rt_each_lock(add_daemon, &ds);
    pid_t holder = 0;
    int found = 0;
    char line[4400], holders[1024] = "";
    snprintf(line, sizeof(line), "hist-conflict-find\t%lld\t%s", id, cache_dir ? cache_dir : "");
    for (int i = 0; i < ds.n; i++) {
        char *out;
        size_t len;
        if (hist_ask("conflicts", ds.v[i], line, &out, &len))
            continue;
        if (len > 6 && strncmp(out, "found ", 6) == 0) {
            found++;
            holder = ds.v[i];
            size_t h = strlen(holders);
            snprintf(holders + h, sizeof(holders) - h, "%s%d", h ? ", " : "", (int)ds.v[i]);
        }
        free(out);
    }
    if (found > 1) {
        fprintf(stderr, "memstorefs conflicts: conflict %s is in the caches of several daemons "
                        "(pids %s); give --cache-dir to say which\n", idstr, holders);
        return 1;
    }
    if (!found && diff)
        return diff_from_cache(idstr, id, cache_dir);
    if (!found) {
        fprintf(stderr, "memstorefs conflicts: no running daemon holds conflict %s in its cache "
                        "('memstorefs conflicts' lists the records; a restore goes through the "
                        "daemon that mounts the record's store)\n", idstr);
        return 1;
    }
    snprintf(line, sizeof(line), "hist-conflict-%s\t%lld", diff ? "diff" : "restore", id);
    char *out;
    size_t len;
    if (hist_ask("conflicts", holder, line, &out, &len))
        return 1;
    int status = 0;
    if (diff)
        status = diff_answer(idstr, out, len);
    else
        fwrite(out, 1, len, stdout);
    free(out);
    return fflush(stdout) == 0 ? status : 1;
}
