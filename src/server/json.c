#include "server/json.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

void hs_buf_init(struct hs_buf *b, struct hs_arena *arena, size_t reserve)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->arena = arena;
    b->oom = false;
    if (reserve) hs_buf_reserve(b, reserve);
}

bool hs_buf_reserve(struct hs_buf *b, size_t n)
{
    if (b->oom) return false;
    if (b->cap - b->len > n) return true; /* keep one byte for a terminator */
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= n) cap *= 2;
    char *d;
    if (b->arena) {
        d = hs_arena_alloc(b->arena, cap);
        if (d && b->len) memcpy(d, b->data, b->len);
    } else {
        d = hs_realloc(b->data, cap);
    }
    if (!d) {
        b->oom = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void hs_buf_put(struct hs_buf *b, const char *s, size_t n)
{
    if (!hs_buf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void hs_buf_puts(struct hs_buf *b, const char *s)
{
    hs_buf_put(b, s, strlen(s));
}

void hs_buf_putc(struct hs_buf *b, char c)
{
    if (!hs_buf_reserve(b, 1)) return;
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void hs_buf_printf(struct hs_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        hs_buf_put(b, tmp, (size_t)n);
        return;
    }
    if (!hs_buf_reserve(b, (size_t)n + 1)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length (1-4) of the valid UTF-8 sequence at s[0..n), 0 when there is none (RFC 3629: no
 * overlong forms, surrogates or code points above U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    size_t need;
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        need = 1;
    } else if (c < 0xF0) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c < 0xF5) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n <= need || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k <= need; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return need + 1;
}

void hs_buf_json_str(struct hs_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    if (!hs_buf_reserve(b, n + 2)) return;
    hs_buf_putc(b, '"');
    size_t run = 0; /* start of the bytes to copy verbatim in one go */
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        if (c >= 0x80) {
            size_t k = utf8_seq(u + i, n - i);
            if (k) {
                i += k;
                continue;
            }
            /* Not UTF-8 (a message cut inside a character, bytes quoted from a bad request):
             * JSON text must be UTF-8, so the byte becomes U+FFFD. */
            hs_buf_put(b, s + run, i - run);
            hs_buf_put(b, "\\ufffd", 6);
            run = ++i;
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        hs_buf_put(b, s + run, i - run);
        run = ++i;
        char esc[6] = {'\\', 0};
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            hs_buf_put(b, esc, 6);
            continue;
        }
        hs_buf_put(b, esc, 2);
    }
    hs_buf_put(b, s + run, n - run);
    hs_buf_putc(b, '"');
}

/* 10^k for k in [-POW_LO, POW_HI], as doubles (each within half an ulp). */
#define POW_LO 60
#define POW_HI 60
static double pow10_tab[POW_LO + POW_HI + 1];
static int pow10_ready;
static pthread_once_t pow10_once = PTHREAD_ONCE_INIT;

static void pow10_fill(void)
{
    /* Exact for k >= 0 up to 22; the rest are correctly rounded by the C library. */
    for (int k = -POW_LO; k <= POW_HI; k++) pow10_tab[k + POW_LO] = pow(10.0, k);
    __atomic_store_n(&pow10_ready, 1, __ATOMIC_RELEASE);
}

static void pow10_init(void)
{
    pthread_once(&pow10_once, pow10_fill);
}

static inline double p10(int k)
{
    return pow10_tab[k + POW_LO];
}

int hs_json_float(char *p, float f)
{
    if (!__atomic_load_n(&pow10_ready, __ATOMIC_ACQUIRE)) pow10_init();
    char *s = p;
    if (!isfinite(f)) {
        memcpy(p, "null", 4);
        return 4;
    }
    double d = f;
    if (signbit(f)) {
        *p++ = '-';
        d = -d;
    }
    if (d == 0) {
        *p++ = '0';
        return (int)(p - s);
    }
    /* Decimal exponent from the binary one, corrected by one comparison each way. */
    int e2;
    frexp(d, &e2);
    int e10 = (int)floor((e2 - 1) * 0.30102999566398120);
    if (d >= p10(e10 + 1)) e10++;
    if (d < p10(e10)) e10--;
    /* Nine significant digits: [1e8, 1e9). The scaling multiply is exact to ~1e-16 relative,
     * far inside the 5e-9 that rounding to nine digits allows, so the digits round-trip. */
    double m = e10 <= 8 ? d * p10(8 - e10) : d / p10(e10 - 8);
    uint64_t dig = (uint64_t)(m + 0.5);
    if (dig >= 1000000000ull) {
        dig /= 10;
        e10++;
    }
    char buf[9];
    for (int i = 8; i >= 0; i--) {
        buf[i] = (char)('0' + dig % 10);
        dig /= 10;
    }
    int nd = 9;
    while (nd > 1 && buf[nd - 1] == '0') nd--;
    if (e10 >= -5 && e10 < 0) {
        /* 0.000ddd */
        *p++ = '0';
        *p++ = '.';
        for (int i = -1; i > e10; i--) *p++ = '0';
        memcpy(p, buf, (size_t)nd);
        p += nd;
    } else if (e10 >= 0 && e10 < 9) {
        /* ddd.ddd */
        int ip = e10 + 1;
        for (int i = 0; i < ip; i++) *p++ = i < nd ? buf[i] : '0';
        if (nd > ip) {
            *p++ = '.';
            memcpy(p, buf + ip, (size_t)(nd - ip));
            p += nd - ip;
        }
    } else {
        /* d.ddde-XX */
        *p++ = buf[0];
        if (nd > 1) {
            *p++ = '.';
            memcpy(p, buf + 1, (size_t)(nd - 1));
            p += nd - 1;
        }
        *p++ = 'e';
        int ae = e10;
        if (ae < 0) {
            *p++ = '-';
            ae = -ae;
        }
        if (ae >= 10) *p++ = (char)('0' + ae / 10);
        *p++ = (char)('0' + ae % 10);
    }
    return (int)(p - s);
}

void hs_buf_json_floats(struct hs_buf *b, const float *v, size_t n)
{
    if (!hs_buf_reserve(b, n * (HS_JSON_FLOAT_MAX + 1) + 2)) return;
    char *p = b->data + b->len;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i) *p++ = ',';
        p += hs_json_float(p, v[i]);
    }
    *p++ = ']';
    *p = '\0';
    b->len = (size_t)(p - b->data);
}

void hs_buf_base64(struct hs_buf *b, const void *data, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t out = (n + 2) / 3 * 4;
    if (!hs_buf_reserve(b, out)) return;
    const unsigned char *s = data;
    char *p = b->data + b->len;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *p++ = tab[v >> 18];
        *p++ = tab[(v >> 12) & 63];
        *p++ = tab[(v >> 6) & 63];
        *p++ = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *p++ = tab[v >> 18];
        *p++ = tab[(v >> 12) & 63];
        *p++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *p++ = '=';
    }
    *p = '\0';
    b->len = (size_t)(p - b->data);
}

static int b64v(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

long long hs_base64_decode(const char *in, size_t n, uint8_t *out)
{
    uint32_t acc = 0;
    int bits = 0;
    long long o = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)in[i];
        if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
        const int v = b64v(c);
        if (v < 0) return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return o;
}

void hs_buf_free(struct hs_buf *b)
{
    if (!b->arena) hs_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void hs_json_error(struct hs_buf *b, const char *message, const char *type, int http_status)
{
    hs_buf_puts(b, "{\"error\":{\"message\":");
    hs_buf_json_str(b, message, strlen(message));
    hs_buf_puts(b, ",\"type\":");
    hs_buf_json_str(b, type, strlen(type));
    hs_buf_printf(b, ",\"code\":%d}}", http_status);
}
