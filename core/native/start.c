/* What the native client settles before it reads anything: its standard descriptors, the
 * locale the Python client would decode the environment with, its own path, and which
 * entries of the environment a call carries (the first of each name, as os.environ keeps).
 *
 * Written by hand with client.c (see native.h for why the client is C). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "native.h"

extern char **environ;

void steady_fds(void) {
    /* A closed 0, 1 or 2 would be taken by the next descriptor opened, the server's socket
     * among them: a command's output written to "stdout" would then land in the control
     * channel as frames of its own. Each one closed reads and writes /dev/null instead. */
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int null = open("/dev/null", O_RDWR);
        if (null >= 0 && null != fd) {
            dup2(null, fd);
            close(null);
        }
    }
}

int locale_like_python(void) {
    /* The Python client decodes names and values by the locale's encoding (its file system
     * encoding), and withholds a name whose upper case holds a secret's word: under a
     * non-UTF-8 locale the same bytes read otherwise (ISO-8859-1's 0xDF is ß, upper SS), so
     * this client could send a variable the Python client withholds. There: hand over. */
    const char *utf8 = getenv("PYTHONUTF8");
    if (utf8 && strcmp(utf8, "1") == 0) return 1;
    const char *name = setlocale(LC_CTYPE, "");
    int like = 1;
    if (name && strcmp(name, "C") != 0 && strcmp(name, "POSIX") != 0) {
        const char *codeset = nl_langinfo(CODESET);
        like = codeset && (strcasecmp(codeset, "UTF-8") == 0 || strcasecmp(codeset, "utf8") == 0);
    }
    setlocale(LC_CTYPE, "C");
    return like;
}

int find_self(char *self, size_t size) {
    ssize_t n = readlink("/proc/self/exe", self, size - 1);
    if (n > 0) {
        self[n] = '\0';
        return 0;
    }
    /* No /proc (a chroot, a mount namespace without it): the path the program was started
     * by, resolved as /proc/self/exe would give it. */
    const char *started = (const char *)getauxval(AT_EXECFN);
    char real[PATH_MAX];
    if (started && strchr(started, '/') && realpath(started, real) && strlen(real) < size) {
        strcpy(self, real);
        return 0;
    }
    self[0] = '\0';
    return -1;
}

struct named {
    const char *name;
    size_t n, index;
};

static int by_name(const void *a, const void *b) {
    const struct named *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

unsigned char *env_firsts(size_t *count) {
    size_t total = 0;
    while (environ[total]) total++;
    *count = total;
    unsigned char *first = calloc(total + 1, 1);
    struct named *all = malloc((total + 1) * sizeof *all);
    if (!first || !all) abort();
    size_t named = 0;
    for (size_t i = 0; i < total; i++) {
        const char *eq = strchr(environ[i], '=');
        if (eq) all[named++] = (struct named){environ[i], (size_t)(eq - environ[i]), i};
    }
    qsort(all, named, sizeof *all, by_name);
    for (size_t i = 0; i < named; i++)
        first[all[i].index] = i == 0 || all[i - 1].n != all[i].n ||
                              memcmp(all[i - 1].name, all[i].name, all[i].n) != 0;
    free(all);
    return first;
}
