/* Where the native client finds its server, and its check of that server before it sends
 * anything. Written by hand: see native.h.
 *
 * The Python client names a server by a digest of where its own code lives, which this
 * program cannot know. So when the Python client has connected to (or started) a verified
 * server for a call this program handed over, it leaves a card for it (stockade.server.card):
 *
 *     <realpath(state)>/server/native-<FNV-1a 64 of KEY, 16 hex>
 *
 * holding KEY, then the protocol's version, the socket's path and the secret's path, each
 * ending in a NUL. KEY is "stockade-card/1", the uid, the state folder (real path), HOME,
 * the runtime folder as the Python client takes it ("" when it does not) and this
 * program's real path, each ending in a NUL. A card whose KEY is not this call's, that is
 * not a regular file of this user's, or that others may write, is not read. What it names is
 * then checked as stockade.server.trust checks it: a forged card can only point at a socket
 * that passes the same checks as the Python client's own. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "place.h"

#define CARD_MAX 65536
#define MAX_SUN_PATH 100 /* paths.py's _MAX_SUN_PATH: longer ones go through /proc/self/fd */

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h;
}

static void put_field(struct buf *b, const char *s) { buf_put(b, s, strlen(s) + 1); }

/* The runtime folder as paths.Place takes it: XDG_RUNTIME_DIR when it is absolute and a
 * folder (stat, links followed) of this user's; "" otherwise. */
static const char *runtime_folder(void) {
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    struct stat info;
    if (!runtime || runtime[0] != '/' || stat(runtime, &info) != 0) return "";
    return S_ISDIR(info.st_mode) && info.st_uid == getuid() ? runtime : "";
}

int read_card(const char *self, struct card *card) {
    /* config/dirs.py's state_dir: XDG_STATE_HOME, else HOME/.local/state */
    const char *home = getenv("HOME"), *xdg = getenv("XDG_STATE_HOME");
    char base[PATH_MAX], state[PATH_MAX];
    int n;
    if (xdg && *xdg) n = snprintf(base, sizeof base, "%s/stockade", xdg);
    else if (home && *home) n = snprintf(base, sizeof base, "%s/.local/state/stockade", home);
    else return -1; /* the password database's home: the Python client finds it */
    if (n < 0 || (size_t)n >= sizeof base || !realpath(base, state)) return -1;

    struct buf key = {0};
    char uid[32];
    snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
    put_field(&key, "stockade-card/1");
    put_field(&key, uid);
    put_field(&key, state);
    put_field(&key, home ? home : "");
    put_field(&key, runtime_folder());
    put_field(&key, self);
    char path[PATH_MAX];
    n = snprintf(path, sizeof path, "%s/server/native-%016llx", state,
                 (unsigned long long)fnv1a(key.data, key.len));
    int fd = n > 0 && (size_t)n < sizeof path
                 ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) : -1;
    struct stat info;
    char *text = malloc(CARD_MAX);
    ssize_t got = -1;
    if (fd >= 0 && text && fstat(fd, &info) == 0 && S_ISREG(info.st_mode) &&
        info.st_uid == getuid() && !(info.st_mode & (S_IWGRP | S_IWOTH)))
        got = read(fd, text, CARD_MAX);
    if (fd >= 0) close(fd);
    int ok = -1;
    if (got > 0 && got < CARD_MAX && (size_t)got > key.len &&
        memcmp(text, key.data, key.len) == 0 && text[got - 1] == '\0') {
        char *fields[3], *p = text + key.len, *end = text + got;
        int count = 0;
        while (p < end && count < 3) fields[count++] = p, p += strlen(p) + 1;
        if (count == 3 && p == end && strlen(fields[0]) < sizeof card->version &&
            strlen(fields[1]) < sizeof card->socket && strlen(fields[2]) < sizeof card->token &&
            fields[1][0] == '/') {
            strcpy(card->version, fields[0]);
            strcpy(card->socket, fields[1]);
            strcpy(card->token, fields[2]);
            ok = 0;
        }
    }
    free(text);
    buf_free(&key);
    return ok;
}

/* trust.py's _problem for one folder on the way from the socket up to "/". */
static int folder_bad(const struct stat *info, uid_t uid, int socket_folder) {
    if (S_ISLNK(info->st_mode) || !S_ISDIR(info->st_mode)) return 1;
    if (info->st_uid != uid && (socket_folder || info->st_uid != 0)) return 1;
    int writable = (info->st_mode & (S_IWGRP | S_IWOTH)) != 0;
    return writable && (socket_folder || !(info->st_mode & S_ISVTX));
}

int folder_trusted(const char *socket_path) {
    char path[PATH_MAX];
    if (strlen(socket_path) >= sizeof path) return -1;
    strcpy(path, socket_path);
    char *slash = strrchr(path, '/');
    if (!slash) return -1;
    if (slash == path) slash[1] = '\0'; else *slash = '\0'; /* the socket's folder */
    uid_t uid = getuid();
    for (int first = 1;; first = 0) {
        struct stat info;
        if (lstat(path, &info) == 0) {
            if (folder_bad(&info, uid, first)) return -1;
        } else if (errno != ENOENT && errno != ENOTDIR) {
            return -1;
        }
        if (strcmp(path, "/") == 0) return 0;
        slash = strrchr(path, '/');
        if (slash == path) slash[1] = '\0'; else *slash = '\0';
    }
}

int connect_trusted(const char *socket_path) {
    if (folder_trusted(socket_path) != 0) return -1;
    int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (conn < 0) return -1;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    int folder = -1;
    const char *name = strrchr(socket_path, '/') + 1;
    if (strlen(socket_path) <= MAX_SUN_PATH) {
        strcpy(address.sun_path, socket_path);
    } else {
        char dir[PATH_MAX];
        size_t len = (size_t)(name - socket_path - 1);
        memcpy(dir, socket_path, len ? len : 1);
        dir[len ? len : 1] = '\0';
        folder = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        int n = folder < 0 ? -1
                : snprintf(address.sun_path, sizeof address.sun_path, "/proc/self/fd/%d/%s",
                           folder, name);
        if (n < 0 || (size_t)n >= sizeof address.sun_path) {
            if (folder >= 0) close(folder);
            close(conn);
            return -1;
        }
    }
    int done;
    do done = connect(conn, (struct sockaddr *)&address, sizeof address);
    while (done != 0 && errno == EINTR);
    if (folder >= 0) close(folder);
    struct ucred peer;
    socklen_t size = sizeof peer;
    if (done != 0 || getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
        size != sizeof peer || peer.uid != getuid()) {
        close(conn);
        return -1;
    }
    return conn;
}
