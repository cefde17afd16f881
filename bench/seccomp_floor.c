/*
 * The floor of a sound seccomp supervisor: what the kernel's user notification costs a
 * create with no interpreter on either side (bench/supervisor.py compiles and runs it).
 *
 * Written in C on purpose: the figure is the mechanism's own price, which a Python
 * supervisor cannot show (its interpreter adds its own). One process, two threads: the
 * main thread creates FILES files in DIR (O_CREAT | O_EXCL, then close, as the bench's
 * build does); a serving thread started before the filter answers its notified opens.
 *
 *   seccomp_floor DIR MODE [PIN]
 *
 * MODE: "plain" (no filter), "continue" (every create notified and let through with
 * SECCOMP_USER_NOTIF_FLAG_CONTINUE: the round trip alone, unsound for a check, since the
 * kernel reads the path again), "addfd" (what a sound supervisor must do at the least:
 * read the path once, make the file itself, hand the descriptor back with
 * SECCOMP_IOCTL_NOTIF_ADDFD and SECCOMP_ADDFD_FLAG_SEND). PIN: "1" keeps both threads on
 * CPU 0 (the wake-ups then never cross CPUs). The filter asks for synchronous wake-ups
 * (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, Linux 6.6) where the kernel has them. Prints one
 * line: "MODE PIN microseconds-per-create".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1UL
#endif

enum { FILES = 10000, ADDFD = 2 };
static int listener = -1, mode, folder = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* The path at ADDRESS in process PID, read once (a page at a time: never past a page's end). */
static int read_path(pid_t pid, unsigned long address, char *out, size_t size) {
    size_t got = 0;
    while (got < size - 1) {
        size_t page = 4096 - (address + got) % 4096, want = page < size - 1 - got ? page : size - 1 - got;
        struct iovec local = {out + got, want}, remote = {(void *)(address + got), want};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n <= 0) return -1;
        if (memchr(out + got, 0, n)) return 0;
        got += n;
    }
    return -1;
}

static void *serve(void *unused) {
    (void)unused;
    pthread_mutex_lock(&lock);
    while (listener < 0) pthread_cond_wait(&ready, &lock);
    pthread_mutex_unlock(&lock);
    static char path[4096];
    for (;;) {
        struct seccomp_notif call;
        struct seccomp_notif_resp answer;
        memset(&call, 0, sizeof call);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &call) < 0) {
            if (errno == EINTR || errno == ENOENT) continue;
            return NULL;
        }
        memset(&answer, 0, sizeof answer);
        answer.id = call.id;
        if (mode != ADDFD) {
            answer.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
            ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &answer);
            continue;
        }
        int fd = -1;
        if (read_path(call.pid, call.data.args[1], path, sizeof path) == 0) {
            const char *slash = strrchr(path, '/');
            fd = openat(folder, slash ? slash + 1 : path, (int)call.data.args[2] | O_CLOEXEC | O_NOFOLLOW,
                        (mode_t)call.data.args[3]);
        }
        if (fd < 0) {
            answer.error = -(errno ? errno : EFAULT);
            ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &answer);
            continue;
        }
        struct seccomp_notif_addfd add = {.id = call.id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = fd};
        ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
        close(fd);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: seccomp_floor DIR plain|continue|addfd [PIN]\n");
        return 2;
    }
    const char *dir = argv[1];
    int filtered = strcmp(argv[2], "plain") != 0, pin = argc > 3 && strcmp(argv[3], "1") == 0;
    mode = strcmp(argv[2], "addfd") == 0 ? ADDFD : 1;
    if (pin) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        sched_setaffinity(0, sizeof one, &one); /* before the thread: it inherits it */
    }
    if (mkdir(dir, 0700) < 0 || (folder = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        perror(dir);
        return 1;
    }
    pthread_t server;
    pthread_create(&server, NULL, serve, NULL);
    if (filtered) {
        struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 3),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
            BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_CREAT, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog program = {sizeof code / sizeof code[0], code};
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        int made = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
        if (made < 0) {
            perror("seccomp");
            return 1;
        }
        ioctl(made, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP); /* best effort */
        pthread_mutex_lock(&lock);
        listener = made;
        pthread_cond_signal(&ready);
        pthread_mutex_unlock(&lock);
    }
    static char name[4200];
    double start = now();
    for (int i = 0; i < FILES; i++) {
        snprintf(name, sizeof name, "%s/f%d", dir, i);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0) {
            perror(name);
            return 1;
        }
        close(fd);
    }
    printf("%s %d %.2f\n", argv[2], pin, (now() - start) / FILES * 1e6);
    return 0;
}
