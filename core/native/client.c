/* `stockade`, the native client: the hot commands through the warm server, every other
 * call handed to the Python client installed beside it (`stockade-py`).
 *
 * Written by hand, in C with no library: a Python client spends 10 ms starting its
 * interpreter and 4 ms importing, most of the 20 ms a warm call may take (issue 34). This
 * program does what stockade.cli.client does on its fast path and nothing else: it finds the
 * server by the card the Python client left (place.c), checks it as stockade.server.trust
 * does, says hello, sends the call frame the Python client would send (byte for byte), and
 * prints the `out` frames as the Python client prints them. Whatever it cannot do that way
 * (no card, a stale one, a server that refuses it, a cold start, another command,
 * STOCKADE_NO_SERVER) it hands to the Python client by execv before it has sent anything
 * but the hello, so the Python client's own rules decide: start, replace, refuse, in-process. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native.h"
#include "place.h"

extern char **environ;

#define EXIT_LOST 125
#define EXIT_BROKEN_PIPE 141
#define NATIVE_ENV "STOCKADE_NATIVE_CLIENT" /* this program's real path, for the card */
#define LOST_TEXT                                                                          \
    "stockade: error[server_lost]: the server went away before the command ended; "        \
    "`stockade replay` shows what the record says of it\n"

static char self[PATH_MAX];
static int conn = -1;

/* --- handing over ------------------------------------------------------------------------ */

static void hand_over(char **argv) __attribute__((noreturn));
static void hand_over(char **argv) {
    char python[PATH_MAX + 16];
    char *slash = strrchr(self, '/');
    if (conn >= 0) close(conn);
    if (slash && (size_t)(slash - self) + 13 < sizeof python) {
        snprintf(python, sizeof python, "%.*s/stockade-py", (int)(slash - self), self);
        setenv(NATIVE_ENV, self, 1);
        argv[0] = python;
        execv(python, argv);
    }
    fprintf(stderr,
            "stockade: error[client]: cannot start the Python client beside %s (%s); "
            "reinstall stockade, or run `python -m stockade.cli`\n",
            self[0] ? self : "this program", strerror(errno));
    _exit(EXIT_LOST);
}

/* protocol.command_of: whether `stockade ARGV` is a command the server runs. */
static int hot(int argc, char **argv) {
    static const char *const commands[] = {"run",  "pending", "approve", "decline",
                                           "start", "read",   "kill",    "tasks"};
    for (int i = 1; i < argc;) {
        const char *arg = argv[i];
        if (strcmp(arg, "--config") == 0) {
            i += 2;
        } else if (strncmp(arg, "--config=", 9) == 0) {
            i += 1;
        } else if (arg[0] == '-') {
            return 0;
        } else {
            int known = 0;
            for (size_t k = 0; k < sizeof commands / sizeof *commands; k++)
                known |= strcmp(arg, commands[k]) == 0;
            for (int j = i + 1; known && j < argc && strcmp(argv[j], "--") != 0; j++)
                if (strcmp(argv[j], "-h") == 0 || strcmp(argv[j], "--help") == 0) known = 0;
            return known;
        }
    }
    return 0;
}

/* What Python does to the environment as it starts (PEP 538): in the C locale, with
 * LC_ALL unset, it sets LC_CTYPE to a UTF-8 locale, and the Python client sends that. */
static void coerce_locale(void) {
    const char *all = getenv("LC_ALL"), *coerce = getenv("PYTHONCOERCECLOCALE");
    if ((all && *all) || (coerce && strcmp(coerce, "0") == 0)) return;
    setlocale(LC_CTYPE, "");
    const char *now = setlocale(LC_CTYPE, NULL);
    if (!now || strcmp(now, "C") != 0) return;
    static const char *const targets[] = {"C.UTF-8", "C.utf8", "UTF-8"};
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        if (setlocale(LC_CTYPE, targets[i])) {
            setenv("LC_CTYPE", targets[i], 1);
            break;
        }
    }
    setlocale(LC_CTYPE, "C");
}

/* --- the environment a call carries (client.needed_env, client.withheld) ----------------- */

/* Code points whose str.upper() holds ASCII letters (0x01: a character that is not); a
 * test walks every code point against Python's own str.upper. */
static const struct {
    uint32_t cp;
    const char *upper;
} SPECIAL_UPPER[] = {
    {0xDF, "SS"},      {0x131, "I"},      {0x149, "\x01N"},  {0x17F, "S"},
    {0x1F0, "J\x01"},  {0x1E96, "H\x01"}, {0x1E97, "T\x01"}, {0x1E98, "W\x01"},
    {0x1E99, "Y\x01"}, {0x1E9A, "A\x01"}, {0xFB00, "FF"},    {0xFB01, "FI"},
    {0xFB02, "FL"},    {0xFB03, "FFI"},   {0xFB04, "FFL"},   {0xFB05, "ST"},
    {0xFB06, "ST"},
};

static int withheld(const char *name, size_t n) {
    if (n >= 9 && memcmp(name, "STOCKADE_", 9) == 0) return 0;
    struct buf upper = {0};
    for (size_t i = 0; i < n;) {
        size_t len;
        int32_t cp = utf8_next((const unsigned char *)name + i, n - i, &len, 0);
        const char *mapped = NULL;
        for (size_t k = 0; cp >= 0x80 && k < sizeof SPECIAL_UPPER / sizeof *SPECIAL_UPPER; k++)
            if (SPECIAL_UPPER[k].cp == (uint32_t)cp) mapped = SPECIAL_UPPER[k].upper;
        if (cp >= 'a' && cp <= 'z') buf_putc(&upper, (char)(cp - 32));
        else if (cp >= 0 && cp < 0x80) buf_putc(&upper, (char)cp);
        else buf_puts(&upper, mapped ? mapped : "\x01");
        i += len;
    }
    static const char *const words[] = {"KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD",
                                        "CREDENTIAL"};
    int found = 0;
    for (size_t k = 0; upper.len && k < sizeof words / sizeof *words; k++)
        found |= memmem(upper.data, upper.len, words[k], strlen(words[k])) != NULL;
    buf_free(&upper);
    return found;
}

/* The first entry of environ named name[0..n) (os.environ keeps the first), or NULL. */
static const char *env_entry(const char *name, size_t n) {
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq && (size_t)(eq - *e) == n && memcmp(*e, name, n) == 0) return eq + 1;
    }
    return NULL;
}

/* --- frames --------------------------------------------------------------------------------- */

static sigset_t interrupts;

static int send_all(const char *data, size_t n) {
    sigset_t old;
    sigprocmask(SIG_BLOCK, &interrupts, &old); /* a `signal` frame never lands inside */
    int ok = 0;
    while (n > 0) {
        ssize_t sent = send(conn, data, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) {
            ok = -1;
            break;
        }
        data += sent, n -= (size_t)sent;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return ok;
}

static int send_frame(struct buf *body) {
    unsigned char header[4] = {(unsigned char)(body->len >> 24), (unsigned char)(body->len >> 16),
                               (unsigned char)(body->len >> 8), (unsigned char)body->len};
    return body->len > MAX_FRAME || send_all((const char *)header, 4) || send_all(body->data, body->len)
               ? -1 : 0;
}

static int recv_all(char *data, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(conn, data + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* The next frame into body: 0, or -1 when the connection closed or the frame is not one
 * (protocol.receive's cases: truncated, too large, not a JSON object with a string type). */
static int recv_frame(struct buf *body) {
    unsigned char header[4];
    if (recv_all((char *)header, 4)) return -1;
    size_t size = (size_t)header[0] << 24 | (size_t)header[1] << 16 | (size_t)header[2] << 8 |
                  header[3];
    if (size > MAX_FRAME) return -1;
    if (body->cap < size + 1) {
        char *grown = realloc(body->data, size + 1);
        if (!grown) abort();
        body->data = grown;
        body->cap = size + 1;
    }
    if (recv_all(body->data, size)) return -1;
    body->len = size;
    body->data[size] = '\0';
    struct jv type;
    return json_check_object(body->data, size) == 0 &&
                   json_get(body->data, size, "type", &type) == 0 && jv_is_string(&type)
               ? 0 : -1;
}

/* --- the call ------------------------------------------------------------------------------ */

static int terminal(void) {
    if (!isatty(0)) return 0;
    int tty = open("/dev/tty", O_RDWR | O_NOCTTY);
    if (tty < 0) return 0;
    close(tty);
    return 1;
}

static int call_frame(int argc, char **argv, struct buf *call) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    buf_puts(call, "{\"type\":\"call\",\"argv\":[");
    for (int i = 1; i < argc; i++) {
        if (i > 1) buf_putc(call, ',');
        json_bytes(call, argv[i], strlen(argv[i]), 0);
    }
    buf_puts(call, "],\"cwd\":");
    json_bytes(call, cwd, strlen(cwd), 0);
    buf_puts(call, ",\"env\":{");
    int first = 1;
    size_t count;
    unsigned char *firsts = env_firsts(&count);
    for (size_t i = 0; i < count; i++) {
        char **e = environ + i;
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : 0;
        if (!eq || !firsts[i] || withheld(*e, n)) continue;
        if (!first) buf_putc(call, ',');
        first = 0;
        json_bytes(call, *e, n, 0);
        buf_putc(call, ':');
        json_bytes(call, eq + 1, strlen(eq + 1), 0);
    }
    free(firsts);
    buf_puts(call, terminal() ? "},\"tty\":true}" : "},\"tty\":false}");
    return call->len > MAX_FRAME ? -1 : 0;
}

/* The secret, as the Python client reads it: the file's text, whitespace stripped. */
static int read_token(const char *path, char *token, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, token, size - 1);
    close(fd);
    if (n < 0 || (size_t)n == size - 1) return -1;
    size_t start = 0, end = (size_t)n;
#define SPACE(c) ((c) == ' ' || ((c) >= '\t' && (c) <= '\r') || ((c) >= 0x1c && (c) <= 0x1f))
    while (start < end && SPACE(token[start])) start++;
    while (end > start && SPACE(token[end - 1])) end--;
    for (size_t i = start; i < end; i++)
        if ((unsigned char)token[i] >= 0x80) return -1;
    memmove(token, token + start, end - start);
    token[end - start] = '\0';
    return 0;
}

static void interrupted(int sig) {
    (void)sig;
    static const char frame[] = "\0\0\0\x11{\"type\":\"signal\"}";
    int saved = errno;
    if (send(conn, frame, sizeof frame - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the server is gone: the conversation says so */
    }
    errno = saved;
}

/* Write to fd 1 or 2; EXIT_BROKEN_PIPE when its reader went away, as the Python client. */
static int write_out(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EPIPE) return EXIT_BROKEN_PIPE;
        if (w < 0) {
            fprintf(stderr, "stockade: error[client]: cannot write the output: %s\n",
                    strerror(errno));
            return 1;
        }
        data += w, n -= (size_t)w;
    }
    return 0;
}

/* ask_terminal: the question to /dev/tty, the line typed after it (or "" without one). */
static void ask(const struct jv *text, struct buf *reply) {
    struct buf question = {0}, answer = {0};
    int lone = 0;
    if (jv_is_string(text)) jv_string_bytes(text, &question, &lone);
    int tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tty >= 0) {
        if (write(tty, question.data ? question.data : "", question.len) < 0) {
            /* as the Python client, the line is read all the same */
        }
        char chunk[1024];
        while (answer.len == 0 || answer.data[answer.len - 1] != '\n') {
            ssize_t r = read(tty, chunk, sizeof chunk);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            buf_put(&answer, chunk, (size_t)r);
        }
        close(tty);
    }
    buf_puts(reply, "{\"type\":\"answer\",\"text\":");
    json_bytes(reply, answer.data ? answer.data : "", answer.len, 1);
    buf_putc(reply, '}');
    buf_free(&question);
    buf_free(&answer);
}

/* env_answer: the withheld variable the server names, or null. */
static void env_reply(const struct jv *name, int has_name, struct buf *reply) {
    buf_puts(reply, "{\"type\":\"env\",\"name\":");
    if (!has_name || !jv_is_string(name)) {
        buf_puts(reply, "\"\",\"value\":null}");
        return;
    }
    jv_string_json(name, reply);
    struct buf bytes = {0};
    int lone = 0;
    jv_string_bytes(name, &bytes, &lone);
    const char *value = NULL;
    if (!lone && !memchr(bytes.data ? bytes.data : "", '=', bytes.len) &&
        withheld(bytes.data ? bytes.data : "", bytes.len))
        value = env_entry(bytes.data ? bytes.data : "", bytes.len);
    buf_puts(reply, ",\"value\":");
    if (value) json_bytes(reply, value, strlen(value), 0);
    else buf_puts(reply, "null");
    buf_putc(reply, '}');
    buf_free(&bytes);
}

/* client.converse: print what comes back until the exit status. */
static int converse(void) {
    struct buf body = {0}, text = {0}, reply = {0};
    for (;;) {
        struct jv type, field = {0}; /* a missing "text" reads as no text */
        if (recv_frame(&body)) break;
        const char *b = body.data;
        size_t n = body.len;
        json_get(b, n, "type", &type);
        text.len = reply.len = 0;
        if (jv_equals(&type, "out")) {
            int has_text = json_get(b, n, "text", &field) == 0, lone = 0;
            if (has_text && !jv_is_string(&field)) break;
            if (has_text) jv_string_bytes(&field, &text, &lone);
            int fd = json_get(b, n, "fd", &field) == 0 && jv_is_one(&field) ? 1 : 2;
            int status = write_out(fd, text.data, text.len);
            if (status) return status;
        } else if (jv_equals(&type, "ask")) {
            if (json_get(b, n, "text", &field) == 0 && !jv_is_string(&field)) break;
            ask(&field, &reply);
            if (send_frame(&reply)) break;
        } else if (jv_equals(&type, "env")) {
            int has_name = json_get(b, n, "name", &field) == 0;
            env_reply(&field, has_name, &reply);
            if (send_frame(&reply)) break;
        } else if (jv_equals(&type, "exit")) {
            long status = 1; /* isinstance(status, int) or 1, as the Python client */
            if (json_get(b, n, "status", &field) != 0 || jv_int(&field, &status) != 0) status = 1;
            return (int)status;
        } else if (jv_equals(&type, "refused")) {
            buf_puts(&text, "stockade: error[server]: ");
            if (json_get(b, n, "code", &field) != 0) buf_puts(&text, "None");
            else if (jv_str(&field, &text)) break;
            buf_puts(&text, ": ");
            if (json_get(b, n, "message", &field) != 0) buf_puts(&text, "None");
            else if (jv_str(&field, &text)) break;
            buf_putc(&text, '\n');
            int status = write_out(2, text.data, text.len);
            return status ? status : EXIT_LOST;
        } else {
            break;
        }
    }
    int status = write_out(2, LOST_TEXT, sizeof LOST_TEXT - 1);
    return status ? status : EXIT_LOST;
}

int main(int argc, char **argv) {
    steady_fds(); /* before any descriptor is opened: the socket is never 0, 1 or 2 */
    int found = find_self(self, sizeof self);
    const char *off = getenv("STOCKADE_NO_SERVER");
    if ((off && *off && strcmp(off, "0") != 0) || !hot(argc, argv) || found != 0 ||
        !locale_like_python())
        hand_over(argv);
    coerce_locale();

    struct card card;
    struct buf call = {0}, hello = {0}, reply = {0};
    char token[256];
    if (read_card(self, &card) || call_frame(argc, argv, &call)) hand_over(argv);
    conn = connect_trusted(card.socket);
    if (conn < 0 || read_token(card.token, token, sizeof token)) hand_over(argv);
    buf_puts(&hello, "{\"type\":\"hello\",\"version\":");
    json_bytes(&hello, card.version, strlen(card.version), 0);
    buf_puts(&hello, ",\"token\":");
    json_bytes(&hello, token, strlen(token), 0);
    buf_puts(&hello, ",\"op\":\"call\"}");
    struct jv type;
    if (send_frame(&hello) || recv_frame(&reply) ||
        json_get(reply.data, reply.len, "type", &type) || !jv_equals(&type, "welcome"))
        hand_over(argv); /* the Python client replaces a server of another version */

    sigemptyset(&interrupts);
    sigaddset(&interrupts, SIGINT);
    sigaddset(&interrupts, SIGTERM);
    sigaddset(&interrupts, SIGHUP);
    if (send_frame(&call)) {
        fputs(LOST_TEXT, stderr);
        return EXIT_LOST;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is EPIPE, as in Python: 141 */
    struct sigaction action = {.sa_handler = interrupted, .sa_flags = SA_RESTART};
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGHUP, &action, NULL);
    return converse();
}
