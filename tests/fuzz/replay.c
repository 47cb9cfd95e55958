/* replay.c - runs a fuzz target's LLVMFuzzerTestOneInput over files, so
 * that the seed corpus (and every input a fuzzer found, added to it) is a
 * regression test of the ordinary build, with any compiler, without
 * libFuzzer: tests/CMakeLists.txt registers one test per target, given
 * its corpus directory.  A target reports a finding by crashing or
 * aborting, which fails the test.  Prints "N passed, 0 failed". */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, r, m);
    fclose(f);
    fclose(m);
    /* An exact-size copy, so that reading past the input is caught. */
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            n++;
            continue;
        }
        struct dirent **names = NULL;
        int k = scandir(argv[i], &names, NULL, alphasort);
        for (int j = 0; j < k; j++) {
            if (names[j]->d_name[0] != '.') {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name);
                printf("replay %s\n", path);
                fflush(stdout);
                if (run_file(path) != 0)
                    return 1;
                n++;
            }
            free(names[j]);
        }
        free(names);
    }
    printf("%d passed, 0 failed\n", n);
    return n ? 0 : 1;
}
