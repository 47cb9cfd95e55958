/* main.c - memstored: a local HTTP server of the Memory Stores API.
 *
 * Owns: the command line (team CONTRACTS.md "contrib/memstored command
 * line"), start-up order and shutdown:
 *   parse options -> block SIGINT/SIGTERM (every thread inherits the mask)
 *   -> open the db -> --seed imports (one "seeded ..." line each) -> start
 *   the server -> print "listening url=http://HOST:PORT" -> sigwait ->
 *   stop the server (waits for connection threads) -> close the db -> 0.
 * stdout carries only those lines, each flushed; logs go to stderr. */
#include "msd.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct options {
    char listen_host[256];
    int port;
    const char *db_file;
    const char *admin_key;
    char **seeds;
    size_t n_seeds;
    long max_memories;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memstored [--listen HOST:PORT] [--db FILE] [--api-key KEY]...\n"
            "                 [--admin-key KEY] [--seed NAME=DIR]... [--max-memories N]\n"
            "                 [--log-level error|warn|info|debug] [--allow-remote]\n"
            "HOST must be a loopback address (127.0.0.1, ::1, localhost) unless\n"
            "--allow-remote is given: memstored has no TLS.\n"
            "API keys may also come from MEMSTORED_API_KEYS=k1,k2 and the admin key\n"
            "from MEMSTORED_ADMIN_KEY.  At least one API key is required.\n");
}

static int push(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 1) * sizeof(**v));
    if (!nv)
        return -ENOMEM;
    *v = nv;
    if (!(nv[*n] = strdup(s)))
        return -ENOMEM;
    (*n)++;
    return 0;
}

static int parse_listen(const char *s, struct options *o)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return -EINVAL;
    const char *h = s;
    size_t hn = (size_t)(colon - s);
    if (h[0] == '[' && hn >= 2 && h[hn - 1] == ']')
        h++, hn -= 2;
    if (hn == 0 || hn >= sizeof(o->listen_host))
        return -EINVAL;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 0 || p > 65535)
        return -EINVAL;
    memcpy(o->listen_host, h, hn);
    o->listen_host[hn] = '\0';
    o->port = (int)p;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o, struct msd *srv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"db", required_argument, NULL, 'd'},
        {"api-key", required_argument, NULL, 'k'},
        {"admin-key", required_argument, NULL, 'a'},
        {"seed", required_argument, NULL, 's'},
        {"max-memories", required_argument, NULL, 'm'},
        {"log-level", required_argument, NULL, 'L'},
        {"allow-remote", no_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        enum log_level lvl;
        switch (c) {
        case 'l':
            if (parse_listen(optarg, o)) {
                fprintf(stderr, "memstored: --listen wants HOST:PORT, got %s\n", optarg);
                return -EINVAL;
            }
            break;
        case 'd':
            o->db_file = optarg;
            break;
        case 'k':
            if (!*optarg) {
                fprintf(stderr, "memstored: --api-key must not be empty\n");
                return -EINVAL;
            }
            if (push(&srv->api_keys, &srv->n_api_keys, optarg))
                return -ENOMEM;
            break;
        case 'a':
            o->admin_key = optarg;
            break;
        case 's':
            if (!strchr(optarg, '=') || optarg[0] == '=') {
                fprintf(stderr, "memstored: --seed wants NAME=DIR, got %s\n", optarg);
                return -EINVAL;
            }
            if (push(&o->seeds, &o->n_seeds, optarg))
                return -ENOMEM;
            break;
        case 'm':
            errno = 0;
            o->max_memories = strtol(optarg, &end, 10);
            if (!*optarg || *end || errno || o->max_memories < 0) {
                fprintf(stderr, "memstored: --max-memories wants a number, got %s\n", optarg);
                return -EINVAL;
            }
            break;
        case 'L':
            if (log_parse_level(optarg, &lvl)) {
                fprintf(stderr, "memstored: unknown log level %s\n", optarg);
                return -EINVAL;
            }
            log_set_level(lvl);
            break;
        case 'R':
            srv->allow_remote = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "memstored: unexpected argument %s\n", argv[optind]);
        return -EINVAL;
    }
    const char *env = getenv("MEMSTORED_API_KEYS");
    if (env) {
        char *copy = strdup(env), *save = NULL;
        if (!copy)
            return -ENOMEM;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ')
                t++;
            size_t n = strlen(t);
            while (n && t[n - 1] == ' ')
                t[--n] = '\0';
            if (n && push(&srv->api_keys, &srv->n_api_keys, t)) {
                free(copy);
                return -ENOMEM;
            }
        }
        free(copy);
    }
    if (!o->admin_key) {
        const char *a = getenv("MEMSTORED_ADMIN_KEY");
        if (a && *a)
            o->admin_key = a;
    }
    if (srv->n_api_keys == 0) {
        fprintf(stderr, "memstored: at least one API key is required "
                        "(--api-key KEY or MEMSTORED_API_KEYS)\n");
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o = {.listen_host = "127.0.0.1", .port = 8788,
                        .db_file = "./memstored.db", .max_memories = 10000};
    struct msd srv = {0};
    struct server *server = NULL;
    int rc, exit_code = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    log_set_tag("memstored");
    if (parse_args(argc, argv, &o, &srv))
        goto out;
    srv.admin_key = o.admin_key;
    srv.max_memories = o.max_memories;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((rc = faults_new(&srv.faults)))
        goto out;
    if ((rc = db_open(o.db_file, &srv.db)))
        goto out;
    for (size_t i = 0; i < o.n_seeds; i++) {
        char *eq = strchr(o.seeds[i], '=');
        *eq = '\0';
        if ((rc = seed_store(&srv, o.seeds[i], eq + 1)))
            goto out;
    }
    int port;
    if ((rc = server_start(&srv, o.listen_host, o.port, &server, &port)))
        goto out;
    bool v6 = strchr(o.listen_host, ':') != NULL;
    printf("listening url=http://%s%s%s:%d\n", v6 ? "[" : "", o.listen_host, v6 ? "]" : "",
           port);
    fflush(stdout);
    log_info("memstored listening", "host", o.listen_host, "db", o.db_file);

    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    log_info("memstored stopping", "signal", sig == SIGINT ? "SIGINT" : "SIGTERM");
    exit_code = 0;
out:
    faults_stop(srv.faults); /* latency sleeps end: the server's threads can */
    server_stop(&server);
    db_close(&srv.db);
    faults_free(&srv.faults);
    for (size_t i = 0; i < srv.n_api_keys; i++)
        free(srv.api_keys[i]);
    free(srv.api_keys);
    for (size_t i = 0; i < o.n_seeds; i++)
        free(o.seeds[i]);
    free(o.seeds);
    return exit_code;
}
