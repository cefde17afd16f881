/* The native `stockade` client's shared pieces: a growing byte buffer, the JSON text the
 * Python client writes, a strict reader of the frames the server sends.
 *
 * Written by hand, in C with no library, because the point of this client is not to start
 * an interpreter (10 ms of a 20 ms budget) and the protocol is 4 bytes and a small JSON
 * object: a general JSON library would be larger than what is needed here, and it would
 * still have to be taught Python's escaping (surrogateescape, ASCII escapes) byte for byte.
 * See docs/server.md, "The native client". */
#ifndef STOCKADE_NATIVE_H
#define STOCKADE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#define MAX_FRAME (16u * 1024u * 1024u) /* protocol.MAX_FRAME */

struct buf {
    char *data;
    size_t len, cap;
};

void buf_put(struct buf *b, const void *data, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_putc(struct buf *b, char c);
void buf_free(struct buf *b);

/* One code point of UTF-8 at s (n bytes left), as Python's strict decoder reads it: the
 * code point, or -1 for an invalid sequence; *len is what it spans (for -1: the maximal
 * subpart, which Python's error handlers are given). surrogates: encoded surrogates
 * (ED A0..BF) are accepted, as "surrogatepass" does. */
int32_t utf8_next(const unsigned char *s, size_t n, size_t *len, int surrogates);

/* JSON string text (quotes included) for bytes decoded as Python decodes them: with
 * "surrogateescape" (argv, the environment, the folder) or with "replace" (an answer typed
 * at the terminal), then escaped to ASCII as Python's json.dumps does. */
void json_bytes(struct buf *b, const char *s, size_t n, int replace);
void json_codepoint(struct buf *b, uint32_t cp);

/* A value inside a parsed frame: the span of its JSON text. */
struct jv {
    const char *p, *e;
};

/* Checks that body[0..n) is one JSON object, as strictly as Python's json module reads it
 * (no NaN/Infinity, no control characters in strings); 0 when it is, -1 otherwise. */
int json_check_object(const char *body, size_t n);
/* The value of `key` in the object body (the last one when repeated, as Python's dict
 * keeps it); 0 when found. */
int json_get(const char *body, size_t n, const char *key, struct jv *out);
int jv_is_string(const struct jv *v);
/* A string's content as Python writes it to a stream with "surrogateescape": UTF-8, an
 * escaped byte (\udc80..\udcff) as itself; -1 when it holds a surrogate nothing encodes
 * (*lone is then set and '?' stands for it). */
void jv_string_bytes(const struct jv *v, struct buf *out, int *lone);
/* A string's content re-escaped as Python's json.dumps would write the decoded text. */
void jv_string_json(const struct jv *v, struct buf *out);
/* Whether the value equals `s` (a plain ASCII string). */
int jv_equals(const struct jv *v, const char *s);
/* The value as Python's isinstance(x, int) reads it (true, false, or an integer): 0 when it
 * is one that fits an int. */
int jv_int(const struct jv *v, long *out);
/* Whether the value equals 1 as a dict key does (1, 1.0, true): the stdout of `out`. */
int jv_is_one(const struct jv *v);
/* str() of a scalar as the Python client prints it (None, True, a number, a string's
 * bytes); -1 for an array or an object. */
int jv_str(const struct jv *v, struct buf *out);

/* start.c: reopen a closed 0, 1 or 2 on /dev/null; whether the locale decodes the
 * environment as this client does (else hand over); this program's real path (0, or -1);
 * for each entry of environ, whether it is the first of its name (count: how many). */
void steady_fds(void);
int locale_like_python(void);
int find_self(char *self, size_t size);
unsigned char *env_firsts(size_t *count);

#endif
