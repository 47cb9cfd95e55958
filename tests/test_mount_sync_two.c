/* test_mount_sync_two.c - two daemons (separate cache and runtime
 * directories, as two sandboxes would have) mount the same store and edit
 * overlapping files at the same time.  When they stop, both mounts
 * converge to the store, and every file's last local edit on each side
 * either landed (it is a version of that memory) or lost to the store and
 * is a conflict record in that daemon's cache: no edit vanishes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"
#include "test_mount_sync.h"

#define N_FILES 8
#define N_EDITS 40

static struct mnt_env E2; /* the second daemon: run2, cache2, mount MNT/t */

static void setup(void)
{
    const char *seed[2 * N_FILES + 1];
    static char paths[N_FILES][32], contents[N_FILES][32];
    for (int i = 0; i < N_FILES; i++) {
        snprintf(paths[i], sizeof(paths[i]), "/f%d.md", i);
        snprintf(contents[i], sizeof(contents[i]), "seed %d\n", i);
        seed[2 * i] = paths[i];
        seed[2 * i + 1] = contents[i];
    }
    seed[2 * N_FILES] = NULL;
    sy_start(seed);
    E2 = E;
    snprintf(E2.run, sizeof(E2.run), "%s/run2", E.root);
    snprintf(E2.cache, sizeof(E2.cache), "%s/cache2", E.root);
    cr_assert_eq(mkdir(E2.run, 0700), 0);
}

static void teardown(void)
{
    if (E2.root[0])
        mnt_stop_daemons(&E2);
    sy_stop();
}

TestSuite(mount_sync_two, .init = setup, .fini = teardown, .timeout = 300);

struct side {
    const char *dir;        /* the mount point */
    int who;
    unsigned seed;
    char last[N_FILES][64]; /* the last content this side wrote, "" if none */
    int done;               /* edits written and closed */
};

static void *edit(void *arg)
{
    struct side *sd = arg;
    for (int k = 0; k < N_EDITS; k++) {
        int f = rand_r(&sd->seed) % N_FILES;
        char path[600], content[64];
        snprintf(path, sizeof(path), "%s/f%d.md", sd->dir, f);
        snprintf(content, sizeof(content), "side %d edit %d\n", sd->who, k);
        int fd = open(path, O_WRONLY | O_TRUNC);
        if (fd >= 0) {
            bool whole = write(fd, content, strlen(content)) == (ssize_t)strlen(content);
            if (close(fd) == 0 && whole) {
                snprintf(sd->last[f], sizeof(sd->last[f]), "%s", content);
                sd->done++;
            }
        }
        usleep((200 + rand_r(&sd->seed) % 600) * 1000);
    }
    return NULL;
}

/* "name=content|..." of a mount's files. */
static char *state_of(const char *dir)
{
    const char *v[2 * N_FILES + 1];
    char *owned[N_FILES];
    char names[N_FILES][32];
    for (int i = 0; i < N_FILES; i++) {
        char path[600];
        snprintf(names[i], sizeof(names[i]), "/f%d.md", i);
        snprintf(path, sizeof(path), "%s/f%d.md", dir, i);
        owned[i] = mnt_read(path, NULL);
        v[2 * i] = names[i];
        v[2 * i + 1] = owned[i] ? owned[i] : "(missing)";
    }
    v[2 * N_FILES] = NULL;
    char *s = sy_expect_state(v);
    for (int i = 0; i < N_FILES; i++)
        free(owned[i]);
    return s;
}

/* Whether a cache directory holds a conflict record of content. */
static bool has_record(const char *cache, const char *content)
{
    char db[400], sha[SHA256_HEX_LEN + 1];
    snprintf(db, sizeof(db), "%s/cache.db", cache);
    sha256_hex(content, strlen(content), sha);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT 1 FROM conflicts WHERE local_sha = ?", -1, &st,
                                    NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, sha, -1, SQLITE_STATIC);
    bool found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    sqlite3_close(h);
    return found;
}

/* Whether memory id ever held content (a version of it). */
static bool landed(const char *id, const char *content)
{
    cJSON *l = NULL;
    char q[400];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memory_versions?limit=20&view=full&memory_id=%s",
             store, id);
    long err = 0;
    l = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(l, "cannot list versions: %ld", err);
    bool found = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const char *c = tj_str(it, "content");
        found |= c && strcmp(c, content) == 0;
    }
    cJSON_Delete(l);
    return found;
}

Test(mount_sync_two, two_daemons_on_one_store_lose_no_edit_and_converge)
{
    sy_mount(false, "");
    char *out = NULL;
    int rc = mnt_mount(&E2, store, "t", false, "", &out);
    cr_assert_eq(rc, 0, "the second mount failed: %s", out);
    free(out);
    sy_after_sync();

    char t_dir[400];
    snprintf(t_dir, sizeof(t_dir), "%s/t", E.mnt);
    static struct side a, b;
    a = (struct side){.dir = mnt, .who = 1, .seed = 11};
    b = (struct side){.dir = t_dir, .who = 2, .seed = 22};
    pthread_t ta, tb;
    cr_assert_eq(pthread_create(&ta, NULL, edit, &a), 0);
    cr_assert_eq(pthread_create(&tb, NULL, edit, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    /* Every edit was made: a side whose edits all failed would leave the
     * checks below nothing to check. */
    cr_expect_eq(a.done, N_EDITS, "the first mount took %d of %d edits", a.done, N_EDITS);
    cr_expect_eq(b.done, N_EDITS, "the second mount took %d of %d edits", b.done, N_EDITS);

    /* Both mounts converge to the store. */
    bool ok = false;
    char *srv = NULL, *sa = NULL, *sb = NULL;
    for (int i = 0; i < 60 && !ok; i++) {
        free(srv);
        free(sa);
        free(sb);
        srv = sy_server_state();
        sa = state_of(mnt);
        sb = state_of(t_dir);
        ok = strcmp(srv, sa) == 0 && strcmp(srv, sb) == 0;
        if (!ok)
            sleep(1);
    }
    cr_expect(ok, "the mounts did not converge:\nstore %s\nfirst %s\nsecond %s", srv, sa, sb);
    free(srv);
    free(sa);
    free(sb);

    /* Each side's last edit of each file landed or is a conflict record. */
    struct side *sides[2] = {&a, &b};
    const char *caches[2] = {E.cache, E2.cache};
    for (int s = 0; s < 2; s++)
        for (int f = 0; f < N_FILES; f++) {
            const char *c = sides[s]->last[f];
            if (!c[0])
                continue;
            char path[32];
            snprintf(path, sizeof(path), "/f%d.md", f);
            char *id = sy_id(path);
            cr_assert_not_null(id, "%s is gone from the store", path);
            cr_expect(landed(id, c) || has_record(caches[s], c),
                      "side %d's last edit of %s (%s) neither landed nor was kept", s + 1, path,
                      c);
            free(id);
        }
}
