/* test_cli_help.c - `memstorefs COMMAND --help` for every command (stdout,
 * exit 0, nothing on stderr), and the man pages kept in step with the
 * help: every option that a --help of memstorefs or memstored names
 * appears in the generated man page as a bold option (\fB--name). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "mnt.h"

/* Runs cmd; stdout into *out (malloc'd), stderr into *err; exit status. */
static int run(const char *cmd, char **out, char **err)
{
    char errf[] = "/tmp/mfs-help-err-XXXXXX";
    int efd = mkstemp(errf);
    cr_assert(efd >= 0);
    close(efd);
    char *full = NULL;
    cr_assert(asprintf(&full, "%s 2>%s", cmd, errf) > 0);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof(chunk), p)) > 0)
        fwrite(chunk, 1, r, m);
    fclose(m);
    int st = pclose(p);
    free(full);
    *out = buf;
    *err = mnt_read(errf, NULL);
    unlink(errf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *const commands[] = {"mount", "unmount", "status", "conflicts", "flush",
                                        "log",   "show",    "restore"};

Test(cli_help, every_command_has_help_on_stdout)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        const char *forms[] = {"%s %s --help", "%s %s -h", "%s help %s"};
        for (size_t f = 0; f < 3; f++) {
            char cmd[600], want[100], *out, *err;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
            snprintf(cmd, sizeof(cmd), forms[f], MEMSTOREFS_BIN, commands[i]);
#pragma GCC diagnostic pop
            int rc = run(cmd, &out, &err);
            cr_expect_eq(rc, 0, "'%s' exited %d: %s%s", cmd, rc, out, err);
            snprintf(want, sizeof(want), "usage: memstorefs %s", commands[i]);
            cr_expect(strncmp(out, want, strlen(want)) == 0, "'%s' printed: %s", cmd, out);
            cr_expect_str_eq(err, "", "'%s' wrote to stderr: %s", cmd, err);
            free(out);
            free(err);
        }
    }
}

Test(cli_help, overview_and_unknown_command)
{
    char *out, *err;
    cr_expect_eq(run(MEMSTOREFS_BIN " --help", &out, &err), 0);
    cr_expect(strstr(out, "COMMAND --help"), "%s", out);
    free(out);
    free(err);
    cr_expect_eq(run(MEMSTOREFS_BIN " help nosuch", &out, &err), 2);
    cr_expect(strstr(err, "unknown command 'nosuch'"), "%s", err);
    free(out);
    free(err);
}

/* The options named in a help text: "-x" or "--name" after a blank or
 * one of ",([|". */
static size_t options_of(const char *text, char opts[][64], size_t max)
{
    size_t n = 0;
    for (const char *p = text; *p && n < max; p++) {
        if (*p != '-' || (p > text && !strchr(" \t\n,([|", p[-1])))
            continue;
        const char *s = p;
        size_t dashes = p[1] == '-' ? 2 : 1;
        const char *q = p + dashes;
        if (!isalpha((unsigned char)*q))
            continue;
        while (isalnum((unsigned char)*q) || *q == '-')
            q++;
        if (dashes == 1 && q - s != 2)
            continue; /* "-f", not a word with a dash */
        size_t len = (size_t)(q - s);
        bool seen = false;
        for (size_t k = 0; k < n; k++)
            seen = seen || (strlen(opts[k]) == len && strncmp(opts[k], s, len) == 0);
        if (!seen && len < 64) {
            memcpy(opts[n], s, len);
            opts[n++][len] = '\0';
        }
        p = q - 1;
    }
    return n;
}

static void expect_in_man(const char *help_cmd, const char *page)
{
    char *help, *err, path[600];
    cr_assert_eq(run(help_cmd, &help, &err), 0, "%s failed: %s", help_cmd, err);
    snprintf(path, sizeof(path), "%s/%s", MFS_MAN_DIR, page);
    char *man = mnt_read(path, NULL);
    cr_assert_not_null(man, "the man page %s was not generated", path);
    char opts[128][64];
    size_t n = options_of(help, opts, 128);
    cr_assert_gt(n, 0, "no option found in: %s", help);
    for (size_t i = 0; i < n; i++) {
        char bold[80];
        snprintf(bold, sizeof(bold), "\\fB%s", opts[i]);
        cr_expect(strstr(man, bold), "'%s' names %s, which %s does not document", help_cmd,
                  opts[i], page);
    }
    free(help);
    free(err);
    free(man);
}

Test(cli_help, every_option_of_the_help_is_in_the_man_page)
{
    expect_in_man(MEMSTOREFS_BIN " --help", "memstorefs.1");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "%s %s --help", MEMSTOREFS_BIN, commands[i]);
        expect_in_man(cmd, "memstorefs.1");
    }
    expect_in_man(MEMSTORED_BIN " --help", "memstored.1");
}

/* A relative MEMSTOREFS_CACHE_DIR is made absolute; when the working
 * directory cannot be read (removed), each command says so, not "out of
 * memory" or a cache at "?". */
Test(cli_help, a_relative_cache_dir_in_a_removed_directory_is_explained)
{
    const char *const cmds[] = {"mount --store memstore_x:/tmp/mfs-none", "conflicts", "flush"};
    for (size_t i = 0; i < 3; i++) {
        char cmd[700], *out, *err;
        snprintf(cmd, sizeof(cmd), "d=$(mktemp -d) && cd \"$d\" && rmdir \"$d\" && "
                 "MEMSTOREFS_CACHE_DIR=rel ANTHROPIC_API_KEY=k %s %s", mnt_bin(), cmds[i]);
        int rc = run(cmd, &out, &err);
        cr_expect_neq(rc, 0, "%s: exit 0", cmds[i]);
        cr_expect(strstr(err, "MEMSTOREFS_CACHE_DIR 'rel': the working directory cannot be read"),
                  "%s: %s", cmds[i], err);
        cr_expect_null(strstr(err, "out of memory"), "%s: %s", cmds[i], err);
        free(out);
        free(err);
    }
}

/* An empty --cache-dir is a usage error (it used to become the working
 * directory once paths were made absolute), for mount and conflicts. */
Test(cli_help, an_empty_cache_dir_is_refused)
{
    const char *const cmds[] = {"%s mount --store memstore_x:/tmp/mfs-none --cache-dir ''",
                                "%s conflicts --cache-dir ''"};
    for (size_t i = 0; i < 2; i++) {
        char cmd[600], *out, *err;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(cmd, sizeof(cmd), cmds[i], mnt_bin());
#pragma GCC diagnostic pop
        int rc = run(cmd, &out, &err);
        cr_expect_eq(rc, 2, "%s: exit %d, %s", cmd, rc, err);
        cr_expect(strstr(err, "--cache-dir needs a directory"), "%s: %s", cmd, err);
        free(out);
        free(err);
    }
}

/* --fetch-timeout takes whole seconds from 1 to 3600, as --flush-timeout
 * does; anything else is a usage error naming the value. */
Test(cli_help, a_bad_fetch_timeout_is_refused)
{
    const char *const bad[] = {"0", "3601", "-5", "1.5", "soon", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cmd[600], *out, *err;
        snprintf(cmd, sizeof(cmd),
                 "ANTHROPIC_API_KEY=k %s mount --store memstore_x:/tmp/mfs-none "
                 "--fetch-timeout '%s'", mnt_bin(), bad[i]);
        int rc = run(cmd, &out, &err);
        cr_expect_eq(rc, 2, "%s: exit %d, %s", bad[i], rc, err);
        char want[120];
        snprintf(want, sizeof(want), "--fetch-timeout must be a number of seconds from 1 to 3600, "
                 "got '%s'", bad[i]);
        cr_expect(strstr(err, want), "%s: %s", bad[i], err);
        free(out);
        free(err);
    }
}

/* --cache-reserve takes a size from 0 to 1G; anything else is a usage
 * error naming the value, and nothing is mounted. */
Test(cli_help, a_bad_cache_reserve_is_refused)
{
    const char *const bad[] = {"2G", "1025M", "-1", "lots", "16X", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cmd[600], *out, *err;
        snprintf(cmd, sizeof(cmd),
                 "ANTHROPIC_API_KEY=k %s mount --store memstore_x:/tmp/mfs-none "
                 "--cache-reserve '%s'", mnt_bin(), bad[i]);
        int rc = run(cmd, &out, &err);
        cr_expect_eq(rc, 2, "%s: exit %d, %s", bad[i], rc, err);
        char want[120];
        snprintf(want, sizeof(want), "--cache-reserve must be a size from 0 (none) to 1G such as "
                 "16M, got '%s'", bad[i]);
        cr_expect(strstr(err, want), "%s: %s", bad[i], err);
        free(out);
        free(err);
    }
}
