/* main.c - memstorefs: dispatch of the subcommands (mount, unmount,
 * status, sync, conflicts, flush; log, show, restore: history.c), their
 * --help (help.c), and the mount(8) helper form (helper.c).
 *
 * Every memstorefs process is made non-dumpable before anything else:
 * the daemon, flush and the history commands hold the credential in
 * memory, and a dumpable process of the agent's account would hand it
 * to that account's other processes (/proc/PID/mem, ptrace, a core
 * file).  Root keeps its access; a program the process runs is
 * dumpable again from its execve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "cli.h"
#include "history.h"
#include "log.h"

int main(int argc, char **argv)
{
    log_set_tag("memstorefs");
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        perror("memstorefs: prctl(PR_SET_DUMPABLE)");
        return 1;
    }
    /* A relative runtime directory, made absolute once: a daemon in the
     * background runs from "/" and would find its lock files and socket
     * elsewhere than the commands that made them. */
    const char *rt = getenv("MEMSTOREFS_RUNTIME_DIR");
    if (rt && *rt && rt[0] != '/') {
        char *abs = cli_abs_path(rt);
        if (!abs || setenv("MEMSTOREFS_RUNTIME_DIR", abs, 1) != 0) {
            fprintf(stderr, "memstorefs: MEMSTOREFS_RUNTIME_DIR '%s' cannot be made absolute\n",
                    rt);
            free(abs);
            return 1;
        }
        free(abs);
    }
    if (helper_form(argc, argv))
        return helper_main(argc, argv);
    if (argc < 2) {
        help_overview(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        if (argc >= 3 && strcmp(cmd, "help") == 0) {
            if (help_command(argv[2], stdout) == 0)
                return 0;
            fprintf(stderr, "memstorefs: unknown command '%s'\nTry 'memstorefs --help'.\n",
                    argv[2]);
            return 2;
        }
        help_overview(stdout);
        return 0;
    }
    if (help_asked(argc - 1, argv + 1) && help_command(cmd, stdout) == 0)
        return 0;
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
    if (strcmp(cmd, "sync") == 0)
        return control_sync(argc - 1, argv + 1);
    if (strcmp(cmd, "flush") == 0)
        return flush_main(argc - 1, argv + 1);
    if (strcmp(cmd, "conflicts") == 0)
        return conflicts_main(argc - 1, argv + 1);
    if (strcmp(cmd, "log") == 0)
        return history_log_main(argc - 1, argv + 1);
    if (strcmp(cmd, "show") == 0)
        return history_show_main(argc - 1, argv + 1);
    if (strcmp(cmd, "restore") == 0)
        return history_restore_main(argc - 1, argv + 1);
    fprintf(stderr, "memstorefs: unknown command '%s'\nTry 'memstorefs --help'.\n", cmd);
    return 2;
}
