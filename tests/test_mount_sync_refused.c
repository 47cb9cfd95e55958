/* test_mount_sync_refused.c - files the store cannot hold: content that is
 * not UTF-8 (refused before sending) and content the server refuses (a NUL
 * byte: memstored answers 400) stay local and readable, are recorded as
 * refused in the cache with the reason, are not retried at every sync,
 * are retried once they change, and do not hold back any other file. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reconcile.h"
#include "test_mount_sync.h"

static const char *const seed[] = {"/seeded.md", "seed\n", NULL};

static void setup(void)
{
    sy_start(seed);
    sy_mount(false, "");
}

/* A test's holder of a file (mnt_hold_open's child), stopped by its pid. */
static pid_t holder;

static void teardown(void)
{
    if (holder > 0) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        holder = 0;
    }
    sy_stop();
}

TestSuite(mount_sync_refused, .init = setup, .fini = teardown, .timeout = 120);

#define CREATE_ROUTE "POST /v1/memory_stores/{id}/memories"

/* The mount again, its syncs an hour apart: only `sync --wait` pushes. */
static void remount_hourly(void)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount '%s'", mnt), 0, "%s", out);
    free(out);
    sy_mount(false, "--sync-interval 3600");
}

Test(mount_sync_refused, refused_files_stay_local_and_do_not_block_others)
{
    sy_after_sync();
    int rc = sy_run(NULL, "printf '\\377\\376' > bin.dat && printf 'a\\000b\\n' > nul.md && "
                          "echo fine > ok.md");
    cr_assert_eq(rc, 0);

    /* The good file goes through in the same sync. */
    const char *const want[] = {"/seeded.md", "seed\n", "/ok.md", "fine\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want, WITHIN, &last), "ok.md did not reach the store: %s", last);
    free(last);

    /* Both refused files are recorded with a reason and stay readable. */
    bool both = false;
    for (int i = 0; i < WITHIN * 4 && !both; i++) {
        char *n = mnt_q(&E, "SELECT count(*) FROM nodes WHERE state = 2 AND unlinked = 0");
        both = strcmp(n, "2") == 0;
        free(n);
        if (!both)
            usleep(250 * 1000);
    }
    cr_assert(both, "the files are not recorded as refused");
    char *why_bin = mnt_q(&E, "SELECT refused_why FROM nodes WHERE path = '/bin.dat' AND state = 2");
    char *why_nul = mnt_q(&E, "SELECT refused_why FROM nodes WHERE path = '/nul.md' AND state = 2");
    cr_expect(why_bin[0] != '\0', "bin.dat: no reason recorded");
    cr_expect(why_nul[0] != '\0', "nul.md: no reason recorded");
    /* The API refuses NUL bytes: refused locally, before any request. */
    cr_expect(strstr(why_nul, "NUL byte") != NULL, "nul.md: not refused for its NUL byte: %s",
              why_nul);
    free(why_bin);
    free(why_nul);
    cr_expect_eq(sy_run(NULL, "test \"$(od -An -tx1 bin.dat | tr -d ' ')\" = fffe && "
                              "test \"$(od -An -tx1 nul.md | tr -d ' ')\" = 6100620a"), 0,
                 "the refused files are not readable as written");
    cr_expect(sy_log_count(REC_MSG_REFUSED, "path=/bin.dat") == 1, "bin.dat: not warned once");
    cr_expect(sy_log_count(REC_MSG_REFUSED, "path=/nul.md") == 1, "nul.md: not warned once");

    /* Not retried while unchanged: two more syncs send no create. */
    sy_after_sync();
    sy_reset_stats();
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(t_route_count(&E.msd, CREATE_ROUTE), 0, "a refused file was sent again");
    cr_expect(sy_log_count(REC_MSG_REFUSED, "path=/nul.md") == 1, "nul.md: warned again");

    /* `sync --wait` names each refused file once, with the server's
     * reason (it also listed them as "changed locally" once the sync
     * decided refused files). */
    char *lines = NULL;
    sy_run(&lines, "$MFS sync --wait . | grep -c 'nul.md'");
    cr_expect_str_eq(lines, "1\n", "nul.md is not listed once as not pushed");
    free(lines);

    /* `memstorefs status` shows them, when it lists refused files. */
    char *out = NULL;
    mnt_sh(&E, &out, "$MFS status");
    if (strstr(out, "refused") && !strstr(out, "0 refused"))
        cr_expect(strstr(out, "nul.md") && strstr(out, "bin.dat"),
                  "status does not name the refused files: %s", out);
    free(out);

    /* Changed, they are tried again (and now accepted). */
    cr_assert_eq(sy_run(NULL, "printf 'ab\\n' > nul.md && printf 'text\\n' > bin.dat"), 0);
    const char *const fixed[] = {"/seeded.md", "seed\n", "/ok.md", "fine\n", "/nul.md", "ab\n",
                                 "/bin.dat", "text\n", NULL};
    cr_assert(sy_wait_server(fixed, WITHIN, &last), "the fixed files were not pushed: %s", last);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    char *n = mnt_q(&E, "SELECT count(*) FROM nodes WHERE state = 2");
    cr_expect_str_eq(n, "0", "still recorded as refused");
    free(n);
}

Test(mount_sync_refused, an_edit_refused_by_the_server_keeps_the_memory)
{
    char *id = sy_id("/seeded.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'x\\000y\\n' > seeded.md"), 0);
    cr_assert(sy_wait_log(REC_MSG_REFUSED, "path=/seeded.md", 1, WITHIN), "no refusal logged");
    sy_after_sync();
    char *c = sy_content("/seeded.md");
    cr_expect_str_eq(c ? c : "(none)", "seed\n", "the memory changed");
    free(c);
    cr_expect_eq(sy_run(NULL, "test \"$(od -An -tx1 seeded.md | tr -d ' ')\" = 7800790a"), 0,
                 "the local bytes changed");
    char *st = mnt_q(&E, "SELECT state || ' ' || memory_id FROM nodes WHERE path = '/seeded.md'"
                    " AND unlinked = 0");
    char want[200];
    snprintf(want, sizeof(want), "2 %s", id);
    cr_expect_str_eq(st, want, "not refused, or lost its memory");
    free(st);
    /* A remote listing does not overwrite the refused local edit. */
    cr_expect_eq(sy_count_versions(id, NULL), 1);
    /* Fixed: an update of the same memory. */
    cr_assert_eq(sy_run(NULL, "printf 'xy\\n' > seeded.md"), 0);
    const char *const want2[] = {"/seeded.md", "xy\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want2, WITHIN, &last), "%s", last);
    free(last);
    char *nid = sy_id("/seeded.md");
    cr_expect_str_eq(nid ? nid : "(none)", id);
    free(nid);
    free(id);
}

/* A write past 100 KiB is refused (EFBIG) after `>` emptied the file and
 * the first 100 KiB went in: saving that buffer pushed a cut memory over
 * the one the file had.  Now the file keeps its last synced content, the
 * cut edit is a conflict record and the close fails too.  Before the fix both files read 102,400 bytes (the first 100 KiB of
 * each write) and both were pushed so: "the store holds /new.md=1 2 3 ...". */
Test(mount_sync_refused, a_write_past_the_limit_leaves_the_file_as_it_was)
{
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "{ head -c 150000 /dev/zero | tr '\\0' a > seeded.md; "
                          "seq 1 30000 > new.md; } 2>&1; echo; cat seeded.md; wc -c < new.md");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "File too large"), "no EFBIG: %s", out);
    cr_expect(out && strstr(out, "\nseed\n0\n"), "the files changed: %s", out);
    free(out);
    sy_after_sync();
    const char *const want[] = {"/seeded.md", "seed\n", "/new.md", "", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
    /* the cut edits are kept, byte for byte */
    rc = mnt_sh(&E, &out, "$MFS conflicts --json --cache-dir \"$CACHE\" | "
                          "grep -c '\"kind\":\"cut_at_size_limit\"'");
    cr_expect_str_eq(out, "2\n", "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "for id in $($MFS conflicts --json --cache-dir \"$CACHE\" | "
                          "sed -n 's/.*\"id\":\\([0-9]*\\),.*/\\1/p'); do "
                          "$MFS conflicts show $id --cache-dir \"$CACHE\" | wc -c; done | sort");
    cr_expect_str_eq(out, "102400\n102400\n", "%s", out);
    free(out);
    cr_expect_eq(sy_log_count("a write past the size limit was refused", NULL), 2, "%s",
                 sy_log_grep("size limit"));
    /* written again within the limit, as usual */
    cr_assert_eq(sy_run(NULL, "echo small > seeded.md"), 0);
    const char *const want2[] = {"/seeded.md", "small\n", "/new.md", "", NULL};
    cr_expect(sy_wait_server(want2, WITHIN, &last), "the store holds %s", last);
    free(last);
    /* one write past the limit right after `>` (dd, or cat of a big file:
     * 128 KiB at once) writes nothing; the shell had saved the emptied file
     * already (its descriptor's copy closed), which was pushed ("the store
     * holds /seeded.md=") before the fix */
    rc = sy_run(&out, "{ dd if=/dev/zero bs=150000 count=1 status=none > seeded.md; } 2>&1; "
                      "echo; cat seeded.md");
    cr_expect(out && strstr(out, "File too large") && strstr(out, "\nsmall\n"), "%s", out);
    free(out);
    sy_after_sync();
    cr_expect(sy_wait_server(want2, WITHIN, &last), "the store holds %s", last);
    free(last);
    cr_expect_eq(sy_log_count("a write past the size limit was refused", NULL), 3, "%s",
                 sy_log_grep("size limit"));
}

/* A refused edit loses to a later edit in the store, as any local edit
 * does when both sides changed: the store's version replaces the file and
 * the refused bytes are kept as a record.  Before the fix the sync left
 * refused files out of its decisions: the file kept its refused bytes,
 * the store's edit never reached the mount, and every later sync listed
 * the store in full to decide a file it then left out again. */
Test(mount_sync_refused, a_refused_edit_loses_to_a_remote_edit)
{
    char *id = sy_id("/seeded.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'x\\000y\\n' > seeded.md"), 0);
    cr_assert(sy_wait_log(REC_MSG_REFUSED, "path=/seeded.md", 1, WITHIN), "no refusal logged");
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"the store's edit\\n\"}"), 200);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat seeded.md");
    cr_expect_str_eq(out, "the store's edit\n", "the store's edit did not reach the file");
    free(out);
    char *k = mnt_q(&E, "SELECT hex(data) FROM conflicts JOIN blobs ON sha = local_sha"
                       " WHERE path = '/seeded.md'");
    cr_expect_str_eq(k, "7800790A", "the refused bytes are not kept as a record");
    free(k);
    char *st = mnt_q(&E, "SELECT state FROM nodes WHERE path = '/seeded.md' AND unlinked = 0");
    cr_expect_str_eq(st, "0", "the file is not clean at the store's version");
    free(st);
    /* Settled: the next syncs read the feed only. */
    sy_reset_stats();
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories"), 0,
                 "the syncs after it still list the store in full");
    free(id);
}

/* The shared steps of the two tests below: an unpushed edit of a new file
 * and of a synced one, each rewritten with `>` past the size limit, with
 * a reader holding both open (reader) or not. */
static void cut_rewrites_keep_the_unpushed_edits(bool reader)
{
    char *out = NULL;
    remount_hourly();
    cr_assert_eq(sy_run(NULL, "echo important > fresh.md && echo mine > seeded.md"), 0);
    if (reader) {
        char fresh[PATH_MAX], seeded[PATH_MAX];
        snprintf(fresh, sizeof(fresh), "%s/fresh.md", mnt);
        snprintf(seeded, sizeof(seeded), "%s/seeded.md", mnt);
        holder = mnt_hold_open((const char *const[]){fresh, seeded}, 2, O_RDONLY, NULL);
    }
    int rc = sy_run(&out, "{ head -c 150000 /dev/zero | tr '\\0' a > fresh.md; "
                          "head -c 150000 /dev/zero | tr '\\0' a > seeded.md; } 2>&1; echo; "
                          "cat fresh.md seeded.md");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "File too large"), "no EFBIG: %s", out);
    cr_expect(out && strstr(out, "\nimportant\nmine\n"), "the earlier edits are gone: %s", out);
    free(out);
    cr_assert_eq(sy_run(&out, "$MFS sync --wait ."), 0, "%s", out);
    free(out);
    const char *const want[] = {"/seeded.md", "mine\n", "/fresh.md", "important\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
}

/* A write past the limit after `>` puts back what the file held before
 * that edit, an unpushed local edit too: a new file's first content, a
 * synced file's newer one.  The shell's `>` saves the emptied file at
 * once, which freed that content from the cache; before the fix the file
 * went back to the store's version (empty for the new file) and the
 * earlier edit was gone, in no record. */
Test(mount_sync_refused, a_write_past_the_limit_keeps_the_unpushed_edit_before_it)
{
    cut_rewrites_keep_the_unpushed_edits(false);
}

/* A descriptor whose edit a write past the limit cut short, and whose
 * close put the file back, writes no more: in `{ dd bs=150000 count=1;
 * echo done | dd; } > f` the shell's descriptor, still open, laid "done" over
 * the start of the text the file went back to, and that mix, which
 * nobody wrote, was saved and pushed.  Before the fix: the second write
 * went in, the file and the store read "done\n" then the old text from
 * its sixth byte.
 * A new descriptor opened after the give-up writes as usual, even while
 * the cut one's release (asynchronous) is still to come: `cat big > f;
 * echo ok >> f` appends. */
Test(mount_sync_refused, a_descriptor_whose_cut_edit_went_back_writes_no_more)
{
    cr_assert_eq(sy_run(NULL, "echo 'the text before the edit' > kept.md"), 0);
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "{ { dd if=/dev/zero bs=150000 count=1 status=none; "
                          "echo done | dd status=none; } > kept.md; } 2>&1; echo; cat kept.md");
    cr_expect_eq(rc, 0, "%s", out);
    const char *efbig = "dd: error writing 'standard output': File too large";
    const char *first = out ? strstr(out, efbig) : NULL;
    cr_expect(first && strstr(first + 1, efbig),
              "the old descriptor's second write was not refused with EFBIG: %s", out);
    cr_expect(out && strstr(out, "\nthe text before the edit\n"), "the file is a mix: %s", out);
    free(out);
    sy_after_sync();
    const char *const want[] = {"/seeded.md", "seed\n", "/kept.md", "the text before the edit\n",
                                NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);

    rc = sy_run(&out, "{ b=$(mktemp); head -c 150000 /dev/zero > $b; cat $b > kept.md; "
                      "echo ok >> kept.md; rm $b; } 2>&1; echo; cat kept.md");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "File too large") &&
                  strstr(out, "\nthe text before the edit\nok\n"),
              "the new descriptor's append did not go in: %s", out);
    free(out);
    sy_after_sync();
    const char *const want2[] = {"/seeded.md", "seed\n", "/kept.md",
                                 "the text before the edit\nok\n", NULL};
    cr_expect(sy_wait_server(want2, WITHIN, &last), "the store holds %s", last);
    free(last);
}

/* Another process opens for writing a file whose edit a write past the
 * limit cut short while its writer still holds it (`echo B > f`, an O_TRUNC
 * open; `truncate -s 0 f`, an open then an ftruncate): the cut edit is
 * given up then, as its writer's close would have, kept as a record; the
 * writer's later writes are refused, and what the other process wrote is
 * the file's content.  Before the fix the new writer joined the cut edit
 * and its emptying cleared the cut mark: the 100 KiB edits were in no
 * record, the first writer's next writes went in ("tail went in") and were
 * saved ("tail" over "B"; over the emptied cut.md).  The other process is
 * started before the writer opens the files: a process forked after would
 * close a copy of the descriptors at exec, and that close gives the cut
 * edits up itself. */
Test(mount_sync_refused, another_process_emptying_a_cut_file_keeps_the_cut_edit)
{
    char *out = NULL;
    remount_hourly();
    cr_assert_eq(sy_run(&out, "for f in kept.md cut.md; do echo 'the text before the edit' > $f; "
                              "done && $MFS sync --wait . >/dev/null"), 0, "%s", out);
    free(out);
    /* kept.md emptied by an O_TRUNC open, cut.md by a truncate by path. */
    int rc = sy_run(&out, "python3 - 2>&1 <<'PY'\n"
                          "import errno, os, subprocess\n"
                          "b = subprocess.Popen(['sh', '-c', 'read go && echo B > kept.md && '\n"
                          "                      'truncate -s 0 cut.md'], stdin=subprocess.PIPE)\n"
                          "fds = {n: os.open(n, os.O_WRONLY) for n in ('kept.md', 'cut.md')}\n"
                          "for n, fd in fds.items():\n"
                          "    os.write(fd, b'a' * 102400)\n"
                          "    try:\n"
                          "        os.write(fd, b'b' * 20480); print(n, 'no EFBIG')\n"
                          "    except OSError as e:\n"
                          "        print(n, 'cut', errno.errorcode[e.errno])\n"
                          "b.communicate(b'go\\n')\n"
                          "assert b.returncode == 0, b.returncode\n"
                          "for n, fd in fds.items():\n"
                          "    os.lseek(fd, 0, 0)\n"
                          "    for what, data in (('tail', b'tail\\n'), ('past', b'x' * 150000)):\n"
                          "        try:\n"
                          "            os.write(fd, data); print(n, what, 'went in')\n"
                          "        except OSError as e:\n"
                          "            print(n, what, 'refused', errno.errorcode[e.errno])\n"
                          "    os.close(fd)\n"
                          "    print(n, 'content', repr(open(n, 'rb').read()))\n"
                          "PY");
    cr_expect_eq(rc, 0, "%s", out);
    const char *const lines[] = {"kept.md cut EFBIG\n", "cut.md cut EFBIG\n",
                                 "kept.md tail refused EFBIG\n", "kept.md past refused EFBIG\n",
                                 "cut.md tail refused EFBIG\n", "cut.md past refused EFBIG\n",
                                 "kept.md content b'B\\n'\n", "cut.md content b''\n", NULL};
    for (size_t i = 0; lines[i]; i++)
        cr_expect(out && strstr(out, lines[i]), "no line %s in: %s", lines[i], out);
    free(out);
    rc = sy_run(&out, "$MFS sync --wait .");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    const char *const want[] = {"/seeded.md", "seed\n", "/kept.md", "B\n", "/cut.md", "", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
    /* Each cut edit is one record, byte for byte; nothing else is. */
    char *k = mnt_q(&E, "SELECT group_concat(path || ' ' || length(data) || ' ' || "
                       "length(replace(CAST(data AS TEXT), 'a', '')), ',') FROM "
                       "(SELECT path, data FROM conflicts JOIN blobs ON sha = local_sha "
                       "ORDER BY path)");
    cr_expect_str_eq(k, "/cut.md 102400 0,/kept.md 102400 0",
                     "the records (path, size, bytes other than the cut edit's a)");
    free(k);
    cr_expect_eq(sy_log_count("a write past the size limit was refused", NULL), 2, "%s",
                 sy_log_grep("size limit"));
}

/* A descriptor that only held the file open (an appender that has not
 * written yet) when a cut edit was given up is ended with that edit, and
 * counts as a writer no more: the edit of a writer after it is pushed
 * once that writer closes it.  Before the fix the ended descriptor still
 * counted, so that edit stayed held, pushed only by the unmount's final
 * sync: `sync --wait` exited 3 ("changed locally, open for writing") and
 * the store kept "before". */
Test(mount_sync_refused, a_descriptor_ended_with_a_cut_edit_holds_back_no_later_edit)
{
    char *out = NULL;
    remount_hourly();
    cr_assert_eq(sy_run(&out, "echo before > kept.md && $MFS sync --wait . >/dev/null"), 0,
                 "%s", out);
    free(out);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/kept.md", mnt);
    holder = mnt_hold_open((const char *const[]){path}, 1, O_WRONLY | O_APPEND, NULL);
    int rc = sy_run(&out, "{ head -c 150000 /dev/zero > kept.md; } 2>&1; echo ok >> kept.md; "
                          "echo; cat kept.md");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "File too large") && strstr(out, "\nbefore\nok\n"),
              "the cut or the append: %s", out);
    free(out);
    rc = sy_run(&out, "$MFS sync --wait . 2>&1");
    cr_expect_eq(rc, 0, "sync --wait: %s", out);
    free(out);
    const char *const want[] = {"/seeded.md", "seed\n", "/kept.md", "before\nok\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
}

/* A rewrite cut at the size limit puts back the unpushed edit before it
 * also while a reader holds the file open (`less`, `tail -f`, an agent's
 * open descriptor): the open file's buffer, kept by the reader, still
 * holds that edit, and the rewrite's O_TRUNC open did not note that the
 * content it replaced was a local edit the store lacks, so the cut went
 * back to the store's version (the seed, empty for a new file) and the
 * edit was in no record.  Before the fix: "seed" and "" instead of
 * "mine" and "important". */
Test(mount_sync_refused, a_cut_rewrite_keeps_the_unpushed_edit_before_it_while_a_reader_holds_it)
{
    cut_rewrites_keep_the_unpushed_edits(true);
}
