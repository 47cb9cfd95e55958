/* test_memstored_security.c - memstored on a shared host: it refuses to
 * listen on an address other hosts can reach unless --allow-remote is
 * given (and then warns that it has no TLS), its database and the WAL/SHM
 * files are 0600 whatever the umask, and a key is accepted only when it
 * is exactly right (keys are compared in constant time: no prefix, longer
 * or shorter key passes). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "msd.h"

static struct msd srv;
static char dir[256];

static void down(void)
{
    msd_stop(&srv);
    if (dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        (void)!system(cmd);
    }
    dir[0] = '\0';
}

TestSuite(msd_security, .fini = down, .timeout = 60);

/* Runs memstored with args (a shell fragment) and returns its exit status
 * and output; for runs that end by themselves. */
static int run_msd(char **out, const char *args)
{
    snprintf(dir, sizeof(dir), "/tmp/msd-sec-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char *cmd = NULL;
    const char *bin = getenv("MEMSTORED_BIN");
    cr_assert(asprintf(&cmd, "timeout 20 '%s' --db '%s/m.db' --api-key k %s 2>&1",
                       bin && *bin ? bin : MEMSTORED_BIN, dir, args) > 0);
    FILE *p = popen(cmd, "r");
    free(cmd);
    cr_assert_not_null(p);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[1024];
    size_t r;
    while ((r = fread(chunk, 1, sizeof(chunk), p)) > 0)
        fwrite(chunk, 1, r, m);
    fclose(m);
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(msd_security, non_loopback_address_is_refused)
{
    static const char *const hosts[] = {"0.0.0.0:0", "[::]:0"};
    for (size_t i = 0; i < 2; i++) {
        char *out = NULL;
        char args[64];
        snprintf(args, sizeof(args), "--listen '%s'", hosts[i]);
        int rc = run_msd(&out, args);
        cr_expect_eq(rc, 1, "memstored --listen %s exited %d: %s", hosts[i], rc, out);
        cr_expect(strstr(out, "--allow-remote") && strstr(out, "TLS"),
                  "the refusal does not say why and what to do: %s", out);
        cr_expect(!strstr(out, "listening url="), "%s", out);
        free(out);
        down();
    }
}

Test(msd_security, allow_remote_listens_with_a_warning)
{
    const char *args[] = {"--db", "m.db", "--api-key", "k", "--listen", "0.0.0.0:0",
                          "--allow-remote", NULL};
    snprintf(dir, sizeof(dir), "/tmp/msd-sec-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char db[300];
    snprintf(db, sizeof(db), "%s/m.db", dir);
    args[1] = db;
    cr_assert_eq(msd_start_raw(&srv, NULL, args, NULL), 0, "--allow-remote did not start");
    char log[400];
    snprintf(log, sizeof(log), "%s/stderr.log", srv.dir);
    char *text = NULL;
    for (int i = 0; i < 50; i++) {
        FILE *f = fopen(log, "r");
        size_t n = 0;
        free(text);
        text = NULL;
        if (f) {
            (void)!getdelim(&text, &n, '\0', f);
            fclose(f);
        }
        if (text && strstr(text, "no TLS"))
            break;
        usleep(100 * 1000);
    }
    cr_expect(text && strstr(text, "level=warn") && strstr(text, "no TLS"),
              "no warning that memstored has no TLS: %s", text ? text : "(no stderr)");
    free(text);
}

Test(msd_security, loopback_names_are_accepted)
{
    const char *args[] = {"--api-key", "k", "--listen", "localhost:0", NULL};
    cr_assert_eq(msd_start_raw(&srv, NULL, args, NULL), 0, "localhost was refused");
}

Test(msd_security, database_is_private_whatever_the_umask)
{
    mode_t old = umask(0);
    int rc = msd_start(&srv, NULL);
    umask(old);
    cr_assert_eq(rc, 0);
    free(t_create_store(&srv, "private"));
    static const char *const files[] = {"memstored.db", "memstored.db-wal", "memstored.db-shm"};
    for (size_t i = 0; i < 3; i++) {
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", srv.dir, files[i]);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0, "%s is missing", path);
        cr_expect_eq(st.st_mode & 07777, 0600, "%s has mode %o", files[i],
                     st.st_mode & 07777);
    }
}

Test(msd_security, only_the_exact_key_is_accepted)
{
    cr_assert_eq(msd_start(&srv, NULL), 0);
    static const char *const wrong[] = {"test-ke", "test-key-", "test-kez", "TEST-KEY", "t", ""};
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
        char h[64];
        snprintf(h, sizeof(h), "x-api-key: %s", wrong[i]);
        const char *hdrs[] = {h, "anthropic-beta: agent-memory-2026-07-22", NULL};
        char url[128];
        snprintf(url, sizeof(url), "%s/v1/memory_stores", srv.url);
        struct tresp r;
        cr_assert_eq(t_http("GET", url, NULL, hdrs, &r), 0);
        cr_expect_eq(r.status, 401, "key '%s' was accepted", wrong[i]);
        tresp_free(&r);
    }
    struct tresp r;
    cr_assert_eq(t_api(&srv, "GET", "/v1/memory_stores", NULL, &r), 0);
    cr_expect_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
}
