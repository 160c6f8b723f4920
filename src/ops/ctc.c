/* CTC greedy decoding (see ctc.h). */
#include "ops/ctc.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"

/* true when s[n] is well-formed UTF-8 */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned char c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] >> 6) != 2) return false;
        i += k;
    }
    return true;
}

hs_status hs_ctc_dict_parse(const char *text, size_t len, bool use_space, struct hs_ctc_dict *d,
                            struct hs_error *err)
{
    *d = (struct hs_ctc_dict){0};
    if (!utf8_ok((const unsigned char *)text, len))
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "dictionary is not UTF-8");
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (len && text[len - 1] != '\n') lines++;
    if (!lines) return hs_error_set(err, HS_STATUS_INVALID_INPUT, "dictionary has no tokens");
    if (lines > 1000000)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "dictionary of %zu lines", lines);
    const size_t n = lines + 1 + (use_space ? 1 : 0);
    d->tok = hs_calloc(n, sizeof *d->tok);
    d->storage = hs_malloc(len + n + 2);
    if (!d->tok || !d->storage) {
        hs_ctc_dict_free(d);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "no memory for a dictionary");
    }
    char *o = d->storage;
    *o = 0;
    d->tok[0] = o++;
    int k = 1;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t e = j;
        /* Python's strip("\n").strip("\r\n"): the line's ends lose CR and LF */
        while (e > i && (text[e - 1] == '\r' || text[e - 1] == '\n')) e--;
        size_t b = i;
        while (b < e && (text[b] == '\r' || text[b] == '\n')) b++;
        d->tok[k++] = o;
        memcpy(o, text + b, e - b);
        o += e - b;
        *o++ = 0;
        i = j + 1;
    }
    if (use_space) {
        d->tok[k++] = o;
        *o++ = ' ';
        *o++ = 0;
    }
    d->n = k;
    return HS_STATUS_OK;
}

hs_status hs_ctc_dict_load(const char *path, bool use_space, struct hs_ctc_dict *d,
                           struct hs_error *err)
{
    size_t len = 0;
    char *text = NULL;
    hs_status s = hs_read_file(path, 64u << 20, &text, &len, err);
    if (s) return s;
    s = hs_ctc_dict_parse(text, len, use_space, d, err);
    if (s && err) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        hs_error_set(err, s, "%s: %s", path, m);
    }
    hs_free(text);
    return s;
}

void hs_ctc_dict_free(struct hs_ctc_dict *d)
{
    if (!d) return;
    hs_free(d->tok);
    hs_free(d->storage);
    *d = (struct hs_ctc_dict){0};
}

hs_status hs_ctc_decode(const float *probs, int t_len, int n_classes, const struct hs_ctc_dict *d,
                        char *out, size_t cap, float *score, struct hs_error *err)
{
    if (n_classes != d->n)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                            "recognizer has %d classes, its dictionary %d (blank and space "
                            "included)",
                            n_classes, d->n);
    if (cap < 1) return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "no room for the text");
    size_t len = 0;
    double sum = 0;
    int kept = 0, prev = -1;
    out[0] = 0;
    for (int t = 0; t < t_len; t++) {
        const float *p = probs + (size_t)t * n_classes;
        int best = 0;
        for (int c = 1; c < n_classes; c++)
            if (p[c] > p[best]) best = c;
        const int rep = best == prev;
        prev = best;
        if (rep || best == 0) continue;
        const size_t l = strlen(d->tok[best]);
        if (len + l + 1 > cap)
            return hs_error_set(err, HS_STATUS_TOO_LONG, "recognized text over %zu bytes", cap);
        memcpy(out + len, d->tok[best], l + 1);
        len += l;
        sum += p[best];
        kept++;
    }
    *score = kept ? (float)(sum / kept) : 0.0f;
    return HS_STATUS_OK;
}
