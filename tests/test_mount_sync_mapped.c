/* test_mount_sync_mapped.c - a shared writable mapping's pages against
 * the store's changes: a page a mapping dirtied reaches the daemon only
 * when the kernel writes it back, and a sync that brings the store's
 * version first has the kernel write those pages before it decides
 * (sync/cycle.c settle_mapped_pages): the store wins over them as over any
 * unsaved edit, the mapping's edit is kept as a conflict record, and no
 * mix of the two versions is ever pushed. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_mount_sync.h"

#define PAGE 4096
#define LEN (2 * PAGE)

/* Two pages: a's, then b's ending with a newline. */
static char two_pages[LEN + 1];

static const char *const seed[] = {
    "/mapped.md", two_pages,
    "/other.md", "untouched\n",
    NULL,
};

static void setup(void)
{
    memset(two_pages, 'a', PAGE);
    memset(two_pages + PAGE, 'b', PAGE - 1);
    two_pages[LEN - 1] = '\n';
    two_pages[LEN] = '\0';
    sy_start(seed);
    sy_mount(false, "");
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_mapped, .init = setup, .fini = teardown, .timeout = 120);

/* mapped.md mapped shared and writable, "LOCAL" written over its first
 * page's start through the mapping (no msync: the page stays dirty in the
 * kernel); *fd the descriptor, the mapping returned. */
static char *map_and_dirty(int *fd)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/mapped.md", mnt);
    *fd = open(path, O_RDWR);
    cr_assert_geq(*fd, 0);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    cr_assert_neq(p, MAP_FAILED);
    cr_assert_eq(memcmp(p, two_pages, LEN), 0, "the mapping does not show the file");
    memcpy(p, "LOCAL", 5);
    return p;
}

/* mapped.md mapped and dirtied (map_and_dirty, *fd), then the store's
 * change (body: an update's JSON; NULL: the memory's deletion) synced
 * while the page is dirty, by `sync --wait`, whose output goes to *said
 * (malloc'd); *id the memory's (malloc'd); the mapping. */
static char *dirty_then_change(const char *body, char **id, int *fd, char **said)
{
    *id = sy_id("/mapped.md");
    cr_assert_not_null(*id);
    sy_after_sync();
    char *p = map_and_dirty(fd);
    cr_assert_eq(body ? sy_remote_update(*id, body) : sy_remote_delete(*id), 200);
    int rc = sy_run(said, "$MFS sync --all --wait"); /* while the page is dirty */
    cr_assert(rc == 0 || rc == 3, "memstorefs sync --wait failed (%d): %s", rc, *said);
    return p;
}

/* The mapping's edit (LOCAL over the a's) must be the file's one
 * conflict record. */
static void expect_the_edit_kept(void)
{
    char want[LEN + 1];
    memcpy(want, two_pages, sizeof(want));
    memcpy(want, "LOCAL", 5);
    char *kept = sy_records_at("/mapped.md");
    cr_expect(kept && strcmp(kept, want) == 0, "the mapping's edit is not kept whole: %.40s",
              kept ? kept : "(no record)");
    free(kept);
}

/* The mapping goes, then a sync; then expect_the_edit_kept. */
static void unmap_and_expect_the_edit_kept(char *p, int fd)
{
    cr_assert_eq(munmap(p, LEN), 0);
    cr_assert_eq(close(fd), 0);
    sy_after_sync(); /* and a later sync pushes nothing over it */
    expect_the_edit_kept();
}

/* Before: the page went over the store's version once the sync had put it
 * in the file (LOCAL and the a's of the old first page, then the store's
 * second page), and that mix was pushed as an edit on the store's
 * version, with no conflict. */
Test(mount_sync_mapped, a_page_dirtied_before_a_remote_change_is_kept_not_mixed_in)
{
    /* The store's version: R's, one byte short of two pages, and a newline. */
    static char remote[LEN + 1], body[LEN + 64];
    memset(remote, 'R', LEN - 1);
    remote[LEN - 1] = '\n';
    snprintf(body, sizeof(body), "{\"content\":\"%.*s\\n\"}", LEN - 1, remote);
    char *id, *said;
    int fd;
    char *p = dirty_then_change(body, &id, &fd, &said);
    /* That sync names the edit as one the store won over, not as one its
     * writer's close will push (it said so until 6 December 2026). */
    char want[800];
    snprintf(want, sizeof(want), "not pushed: %s/mapped.md (open for writing, its edit not saved "
             "yet and the store's version came since: the store wins, and its writer's close or "
             "fsync keeps the edit as a conflict record)", mnt);
    cr_expect(strstr(said, want), "no '%s' in: %s", want, said);
    free(said);
    /* Decided at once, mapped or not (the record comes with the last
     * writer's release): the node is back at its baseline, the store's
     * version, so the next syncs leave the file's pages alone. */
    char *base = mnt_q(&E, "SELECT base_sha FROM nodes WHERE path = '/mapped.md' AND unlinked = 0");
    cr_expect_str_eq(base, t_sha(remote), "the node's baseline is not the store's version");
    free(base);
    unmap_and_expect_the_edit_kept(p, fd);

    char *c = sy_content("/mapped.md");
    cr_expect(c && strcmp(c, remote) == 0, "the store holds %.12s...%s, not its own version",
              c ? c : "(none)", c && strlen(c) > 12 ? c + strlen(c) - 12 : "");
    free(c);
    cr_expect_eq(sy_count_versions(id, "modified"), 1, "the mapping's edit reached the store");
    char *out = NULL;
    sy_run(&out, "cat mapped.md");
    cr_expect(out && strcmp(out, remote) == 0, "the mount shows %.12s..., not the store's version",
              out ? out : "");
    free(out);
    free(id);
}

/* The same against the memory's deletion in the store: the file goes,
 * and the mapping's edit is kept as a conflict record, as an unsaved edit
 * of a descriptor is (test_mount_sync_conflict.c), whether its page comes
 * before the sync decides (now) or after the file is gone (before). */
Test(mount_sync_mapped, a_page_dirtied_before_a_remote_deletion_is_kept)
{
    char *id, *said;
    int fd;
    char *p = dirty_then_change(NULL, &id, &fd, &said);
    free(said);
    unmap_and_expect_the_edit_kept(p, fd);
    char *c = sy_content("/mapped.md");
    cr_expect_null(c, "the deleted memory came back: %.12s", c ? c : "");
    free(c);
    cr_expect_neq(sy_run(NULL, "test -e mapped.md"), 0, "mapped.md is still in the mount");
    free(id);
}

/* A page still dirty when the session ends is an unsaved edit as any:
 * kept as a record, the store keeping the last saved state.  Before: the
 * page was never written back, and went with the connection, in no
 * record. */
Test(mount_sync_mapped, a_page_still_dirty_at_unmount_is_kept)
{
    sy_after_sync();
    int fd;
    char *p = map_and_dirty(&fd);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd / && timeout 60 $MFS unmount '%s'", mnt);
    cr_expect(!mnt_is_mounted(mnt), "still mounted (unmount exit %d: %s)", rc, out);
    free(out);
    munmap(p, LEN); /* the mount is gone: the errors do not matter */
    close(fd);
    expect_the_edit_kept();
    char *c = sy_content("/mapped.md");
    cr_expect(c && strcmp(c, two_pages) == 0, "the store does not hold the last saved state");
    free(c);
}
