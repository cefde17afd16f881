/* JSON for the native client: the text the Python client's protocol.dumps writes, and a
 * strict reader of the frames the server sends. Written by hand: see native.h. */
#include <stdlib.h>
#include <string.h>

#include "native.h"

void buf_put(struct buf *b, const void *data, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) abort(); /* out of memory: nothing sensible is left to do */
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_puts(struct buf *b, const char *s) { buf_put(b, s, strlen(s)); }
void buf_putc(struct buf *b, char c) { buf_put(b, &c, 1); }

void buf_free(struct buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int32_t utf8_next(const unsigned char *s, size_t n, size_t *len, int surrogates) {
    unsigned char c = s[0];
    *len = 1;
    if (c < 0x80) return c;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    int32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED && !surrogates) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n || s[i] < lo || s[i] > hi) {
            *len = (size_t)i; /* the maximal subpart: the lead and the good bytes after it */
            return -1;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
        lo = 0x80, hi = 0xBF;
    }
    *len = (size_t)need + 1;
    return cp;
}

static void put_u(struct buf *b, uint32_t unit) {
    static const char hex[] = "0123456789abcdef";
    char out[6] = {'\\', 'u', hex[(unit >> 12) & 15], hex[(unit >> 8) & 15],
                   hex[(unit >> 4) & 15], hex[unit & 15]};
    buf_put(b, out, 6);
}

void json_codepoint(struct buf *b, uint32_t cp) {
    switch (cp) {
    case '"': buf_puts(b, "\\\""); return;
    case '\\': buf_puts(b, "\\\\"); return;
    case '\n': buf_puts(b, "\\n"); return;
    case '\r': buf_puts(b, "\\r"); return;
    case '\t': buf_puts(b, "\\t"); return;
    case '\b': buf_puts(b, "\\b"); return;
    case '\f': buf_puts(b, "\\f"); return;
    default: break;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
        buf_putc(b, (char)cp);
    } else if (cp >= 0x10000) { /* a surrogate pair, as Python's ASCII encoder writes it */
        cp -= 0x10000;
        put_u(b, 0xD800 | (cp >> 10));
        put_u(b, 0xDC00 | (cp & 0x3FF));
    } else {
        put_u(b, cp);
    }
}

void json_bytes(struct buf *b, const char *s, size_t n, int replace) {
    const unsigned char *u = (const unsigned char *)s;
    buf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        size_t len;
        int32_t cp = utf8_next(u + i, n - i, &len, 0);
        if (cp >= 0) {
            json_codepoint(b, (uint32_t)cp);
        } else if (replace) {
            json_codepoint(b, 0xFFFD);
        } else {
            for (size_t k = 0; k < len; k++) json_codepoint(b, 0xDC00 | u[i + k]);
        }
        i += len;
    }
    buf_putc(b, '"');
}

/* --- reading ------------------------------------------------------------------------- */

#define MAX_DEPTH 900 /* Python's scanner fails at its recursion limit, about 1,000 */

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int hex4(const char *p, const char *e, uint32_t *out) {
    if (e - p < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* The next code point of a string whose opening quote is behind *p; -1 at the closing
 * quote (consumed), -2 for text that is not JSON. Escaped surrogate pairs are joined. */
static int32_t str_next(const char **p, const char *e) {
    if (*p >= e) return -2;
    unsigned char c = (unsigned char)**p;
    if (c == '"') return (*p)++, -1;
    if (c < 0x20) return -2;
    if (c != '\\') {
        size_t len;
        int32_t cp = utf8_next((const unsigned char *)*p, (size_t)(e - *p), &len, 1);
        if (cp < 0) return -2;
        *p += len;
        return cp;
    }
    if (e - *p < 2) return -2;
    char k = (*p)[1];
    *p += 2;
    switch (k) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'u': break;
    default: return -2;
    }
    uint32_t unit, low;
    if (hex4(*p, e, &unit)) return -2;
    *p += 4;
    if (unit >= 0xD800 && unit <= 0xDBFF && e - *p >= 6 && (*p)[0] == '\\' && (*p)[1] == 'u' &&
        hex4(*p + 2, e, &low) == 0 && low >= 0xDC00 && low <= 0xDFFF) {
        *p += 6;
        return (int32_t)(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
    }
    return (int32_t)unit;
}

static const char *value(const char *p, const char *e, int depth);

static const char *string(const char *p, const char *e) {
    if (p >= e || *p != '"') return NULL;
    p++;
    for (;;) {
        int32_t cp = str_next(&p, e);
        if (cp == -1) return p;
        if (cp == -2) return NULL;
    }
}

static const char *number(const char *p, const char *e) {
    if (p < e && *p == '-') p++;
    if (p >= e || *p < '0' || *p > '9') return NULL;
    if (*p == '0') p++;
    else while (p < e && *p >= '0' && *p <= '9') p++;
    if (p < e && *p == '.') {
        const char *digits = ++p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == digits) return NULL;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == digits) return NULL;
    }
    return p;
}

static const char *word(const char *p, const char *e, const char *w) {
    size_t n = strlen(w);
    return (size_t)(e - p) >= n && memcmp(p, w, n) == 0 ? p + n : NULL;
}

static const char *container(const char *p, const char *e, int depth, char close) {
    p = ws(p + 1, e);
    if (p < e && *p == close) return p + 1;
    for (;;) {
        if (close == '}') {
            p = string(p, e);
            if (!p) return NULL;
            p = ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = ws(p + 1, e);
        }
        p = value(p, e, depth + 1);
        if (!p) return NULL;
        p = ws(p, e);
        if (p < e && *p == close) return p + 1;
        if (p >= e || *p != ',') return NULL;
        p = ws(p + 1, e);
    }
}

static const char *value(const char *p, const char *e, int depth) {
    if (p >= e || depth > MAX_DEPTH) return NULL;
    switch (*p) {
    case '{': return container(p, e, depth, '}');
    case '[': return container(p, e, depth, ']');
    case '"': return string(p, e);
    case 't': return word(p, e, "true");
    case 'f': return word(p, e, "false");
    case 'n': return word(p, e, "null");
    default: return number(p, e);
    }
}

int json_check_object(const char *body, size_t n) {
    const char *e = body + n, *p = ws(body, e);
    if (p >= e || *p != '{') return -1;
    p = value(p, e, 0);
    return p && ws(p, e) == e ? 0 : -1;
}

int jv_equals(const struct jv *v, const char *s) {
    if (!jv_is_string(v)) return 0;
    const char *p = v->p + 1;
    for (;;) {
        int32_t cp = str_next(&p, v->e);
        if (cp < 0) return *s == '\0';
        if (*s == '\0' || cp != (unsigned char)*s) return 0;
        s++;
    }
}

int json_get(const char *body, size_t n, const char *key, struct jv *out) {
    const char *e = body + n, *p = ws(ws(body, e) + 1, e);
    int found = -1;
    while (p < e && *p == '"') {
        struct jv k = {p, string(p, e)};
        p = ws(ws(k.e, e) + 1, e); /* past the ':' */
        struct jv v = {p, value(p, e, 1)};
        if (jv_equals(&k, key)) *out = v, found = 0;
        p = ws(v.e, e);
        if (p < e && *p == ',') p = ws(p + 1, e);
    }
    return found;
}

int jv_is_string(const struct jv *v) { return v->p < v->e && *v->p == '"'; }

void jv_string_bytes(const struct jv *v, struct buf *out, int *lone) {
    const char *p = v->p + 1;
    int32_t cp;
    while ((cp = str_next(&p, v->e)) >= 0) {
        unsigned char u[4];
        size_t n;
        if (cp < 0x80) {
            u[0] = (unsigned char)cp, n = 1;
        } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
            u[0] = (unsigned char)(cp & 0xFF), n = 1; /* surrogateescape: the byte itself */
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
            u[0] = '?', n = 1, *lone = 1;
        } else if (cp < 0x800) {
            u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 0x3F));
            n = 2;
        } else if (cp < 0x10000) {
            u[0] = (unsigned char)(0xE0 | cp >> 12);
            u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
        } else {
            u[0] = (unsigned char)(0xF0 | cp >> 18);
            u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            u[3] = (unsigned char)(0x80 | (cp & 0x3F)), n = 4;
        }
        buf_put(out, u, n);
    }
}

void jv_string_json(const struct jv *v, struct buf *out) {
    const char *p = v->p + 1;
    int32_t cp;
    buf_putc(out, '"');
    while ((cp = str_next(&p, v->e)) >= 0) json_codepoint(out, (uint32_t)cp);
    buf_putc(out, '"');
}

int jv_int(const struct jv *v, long *out) {
    if (word(v->p, v->e, "true") == v->e) return *out = 1, 0;
    if (word(v->p, v->e, "false") == v->e) return *out = 0, 0;
    const char *p = v->p;
    int negative = p < v->e && *p == '-';
    long n = 0;
    for (p += negative; p < v->e; p++) {
        if (*p < '0' || *p > '9') return -1; /* a float is not an int */
        n = n * 10 + (*p - '0');
        if (n > 0x7FFFFFFFL) return -1;
    }
    *out = negative ? -n : n;
    return p > v->p + negative ? 0 : -1;
}

int jv_is_one(const struct jv *v) {
    if (word(v->p, v->e, "true") == v->e) return 1;
    if (v->p >= v->e || !(*v->p == '-' || (*v->p >= '0' && *v->p <= '9'))) return 0;
    char text[64];
    size_t n = (size_t)(v->e - v->p);
    if (n >= sizeof text) return 0;
    memcpy(text, v->p, n);
    text[n] = '\0';
    return strtod(text, NULL) == 1.0;
}

int jv_str(const struct jv *v, struct buf *out) {
    int lone = 0;
    if (jv_is_string(v)) return jv_string_bytes(v, out, &lone), 0;
    if (word(v->p, v->e, "true") == v->e) return buf_puts(out, "True"), 0;
    if (word(v->p, v->e, "false") == v->e) return buf_puts(out, "False"), 0;
    if (word(v->p, v->e, "null") == v->e) return buf_puts(out, "None"), 0;
    long n;
    if (jv_int(v, &n) == 0) return buf_put(out, v->p, (size_t)(v->e - v->p)), 0;
    return -1; /* a float, an array or an object: Python's str() of it is not worth copying */
}
