/* hetserve — internals of the tokenizer.json pipeline (only src/model/tokenizer/ includes this).
 *
 * A text moves through the pipeline as "splits": pieces of normalized text, each a code point
 * array with, per code point, the byte range of the original text it came from (HF's
 * NormalizedString alignments, kept per code point: HF gives every byte of a char the same
 * range). Every transformation is expressed as HF expresses it, a stream of (char, change)
 * pairs (change 0: replaces the next char, 1: inserted, -n: replaces it and removes n more),
 * applied by tk_transform, so the alignments come out exactly as HF's.
 */
#ifndef HS_MODEL_TOKENIZER_TOK_IMPL_H
#define HS_MODEL_TOKENIZER_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>

#include "model/tokenizer/tok.h"
#include "model/tokenizer/unicode.h"

/* ---- per-encode arena ------------------------------------------------------------------ */
struct tk_arena {
    struct tk_chunk *head;
    bool failed;
    char *first; /* optional caller's buffer (a stack array), used before any chunk */
    size_t first_used, first_cap;
};
void *tk_alloc(struct tk_arena *a, size_t bytes);
void tk_arena_free(struct tk_arena *a);
/* Room for one more item in an arena array v of n items (size bytes each) and *cap allocated:
 * v itself while there is, else a copy twice as large (first items the first time), with *cap
 * updated; NULL, *cap unchanged, when there is no memory. */
void *tk_grow(struct tk_arena *a, void *v, size_t n, size_t *cap, size_t size, size_t first);

/* ---- normalized strings ---------------------------------------------------------------- */
struct tk_nstr {
    int32_t *cp;
    uint32_t *as, *ae; /* original byte range of each code point */
    size_t n;
    uint32_t shift; /* original offset of the piece (HF original_shift) */
};

struct tk_token {
    int32_t id;
    uint32_t s, e; /* code point range within the split */
};

struct tk_split {
    struct tk_nstr ns;
    int32_t added; /* id of the added token this split is, or -1 */
    struct tk_token *toks;
    size_t ntok;
};

struct tk_splits {
    struct tk_split *v;
    size_t n, cap;
};

struct tk_change {
    int32_t c;
    int32_t change;
};

/* Applies a change stream to ns (HF transform_range over the whole string; initial = chars
 * removed at the start). */
hs_status tk_transform(struct tk_arena *a, struct tk_nstr *ns, const struct tk_change *ch,
                       size_t nch, size_t initial);
hs_status tk_splits_push(struct tk_arena *a, struct tk_splits *s, const struct tk_nstr *ns,
                         int32_t added);
/* The sub-piece [b, e) of ns (HF slice). */
struct tk_nstr tk_slice(const struct tk_nstr *ns, size_t b, size_t e);

/* A pattern's matches over a piece: (b, e, is_match) covering it, as HF Pattern::find_matches. */
struct tk_match {
    uint32_t b, e;
    bool m;
};
struct tk_matches {
    struct tk_match *v;
    size_t n, cap;
};
hs_status tk_matches_push(struct tk_arena *a, struct tk_matches *m, size_t b, size_t e, bool is);

enum tk_behavior {
    TK_REMOVED,
    TK_ISOLATED,
    TK_MERGED_PREV,
    TK_MERGED_NEXT,
    TK_CONTIGUOUS,
};

/* A pattern: a literal string, a regex, or a char predicate. */
struct tk_pattern {
    pcre2_code *re; /* NULL: literal (lit, nlit code points) or predicate */
    int32_t *lit;
    size_t nlit;
    bool (*pred)(int32_t c);
    bool invert;
};
hs_status tk_pattern_find(struct tk_arena *a, const struct tk_pattern *p, const struct tk_nstr *ns,
                          struct tk_matches *out);
/* Splits ns by pattern with a behavior, appending the non-empty pieces to out. */
hs_status tk_split_by(struct tk_arena *a, const struct tk_nstr *ns, const struct tk_pattern *p,
                      enum tk_behavior bh, struct tk_splits *out);
void tk_pattern_release(struct tk_pattern *p);

/* ---- components ------------------------------------------------------------------------ */
struct tk_loader {
    struct hs_error *err;
    char path[256]; /* JSON path of what is being read */
};
/* Error helpers: set err with the current path. */
hs_status tk_fail(struct tk_loader *ld, hs_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reads optional members with type checks (absent/null leaves *out). */
hs_status tk_get_bool(struct tk_loader *ld, json_t *o, const char *key, bool *out);
hs_status tk_get_int(struct tk_loader *ld, json_t *o, const char *key, long long *out);
hs_status tk_get_str(struct tk_loader *ld, json_t *o, const char *key, const char **out);
/* Pushes ".key" / "[i]" onto the path; pop restores the length. */
size_t tk_path_push(struct tk_loader *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tk_path_pop(struct tk_loader *ld, size_t len);
/* Decodes a JSON string (UTF-8) into code points (hs_malloc'd). */
hs_status tk_str_cps(struct tk_loader *ld, const char *s, int32_t **out, size_t *n);
hs_status tk_regex_compile(struct tk_loader *ld, const char *pattern, bool literal,
                           pcre2_code **out);

struct hs_tok;

/* The row of a component table (n rows of size bytes, each beginning with its name) that o's
 * "type" names; NULL, with *st set through tk_fail, when o is not an object, has no type or
 * names none of them (what: "normalizer", ..., for the message). */
const void *tk_kind_find(struct tk_loader *ld, json_t *o, const void *table, size_t n, size_t size,
                         const char *what, hs_status *st);

/* The status of a row's load; when it failed, frees (with the row's free, if any) what the load
 * had built in *ctx. */
hs_status tk_kind_loaded(hs_status st, void (*free_ctx)(void *ctx), void **ctx);

/* A "Sequence" component (of normalizers, pre-tokenizers, post-processors or decoders): the
 * items of the JSON array .<key>, each loaded by the kind's load (arg passed through). */
struct tk_seq_kind {
    const char *key;
    size_t size; /* of one item */
    hs_status (*load)(struct tk_loader *ld, json_t *o, const void *arg, void *item);
    void (*release)(void *item);
};
struct tk_seq {
    void *v; /* n items of kind->size bytes */
    size_t n;
    const struct tk_seq_kind *kind;
};
hs_status tk_seq_load(struct tk_loader *ld, json_t *o, const struct tk_seq_kind *k, const void *arg,
                      void **ctx);
void tk_seq_free(void *ctx);

struct tk_normalizer {
    const struct tk_normalizer_kind *kind;
    void *ctx;
};
struct tk_normalizer_kind {
    const char *name;
    hs_status (*load)(struct tk_loader *ld, json_t *o, void **ctx);
    hs_status (*run)(const void *ctx, struct tk_arena *a, struct tk_nstr *ns);
    void (*free)(void *ctx);
    unsigned growth; /* bound of output bytes per input byte (for hs_tok_max_tokens) */
};
hs_status tk_normalizer_load(struct tk_loader *ld, json_t *o, struct tk_normalizer *out);
void tk_normalizer_release(struct tk_normalizer *n);
unsigned tk_normalizer_growth(const struct tk_normalizer *n);

struct tk_pretok {
    const struct tk_pretok_kind *kind;
    void *ctx;
};
struct tk_pretok_kind {
    const char *name;
    hs_status (*load)(struct tk_loader *ld, json_t *o, void **ctx);
    /* Replaces the untokenized splits of s by their pieces. */
    hs_status (*run)(const void *ctx, struct tk_arena *a, struct tk_splits *s);
    void (*free)(void *ctx);
};
hs_status tk_pretok_load(struct tk_loader *ld, json_t *o, struct tk_pretok *out);
void tk_pretok_release(struct tk_pretok *p);

/* Vocabulary: token text -> id (open addressing), id -> text. */
struct tk_vocab {
    char **text;
    uint32_t *len;
    int32_t n; /* ids 0..n-1 (holes are NULL) */
    int32_t *table;
    uint32_t *hash; /* per slot: the hash of its entry (a miss rarely compares bytes) */
    uint32_t mask;
};
hs_status tk_vocab_init(struct tk_vocab *v, int32_t n);
hs_status tk_vocab_set(struct tk_vocab *v, int32_t id, const char *s, size_t len);
void tk_vocab_build(struct tk_vocab *v);
int32_t tk_vocab_find(const struct tk_vocab *v, const char *s, size_t len);
void tk_vocab_release(struct tk_vocab *v);

struct tk_model {
    const struct tk_model_kind *kind;
    void *ctx;
    struct tk_vocab *vocab; /* owned by ctx */
};
struct tk_model_kind {
    const char *name;
    hs_status (*load)(struct tk_loader *ld, json_t *o, void **ctx, struct tk_vocab **vocab);
    /* Tokenizes one split (its ns) into s->toks. */
    hs_status (*run)(const void *ctx, struct tk_arena *a, struct tk_split *s);
    void (*free)(void *ctx);
};
hs_status tk_model_load(struct tk_loader *ld, json_t *o, struct tk_model *out);
void tk_model_release(struct tk_model *m);

/* An encoding under construction (arena memory). */
struct tk_enc {
    int32_t *ids, *type_ids;
    uint8_t *special, *seq;
    uint32_t *start, *end;
    int32_t *ws; /* leading << 16 | trailing spaces of an added token's text, -1: its vocab text */
    size_t n, cap;
};
hs_status tk_enc_push(struct tk_arena *a, struct tk_enc *e, int32_t id, int32_t type_id,
                      uint8_t special, uint8_t seq, uint32_t s, uint32_t end);

struct tk_post {
    const struct tk_post_kind *kind;
    void *ctx;
};
struct tk_post_kind; /* post.c */
hs_status tk_post_load(struct tk_loader *ld, json_t *o, const struct tk_vocab *vocab,
                       struct tk_post *out);
void tk_post_release(struct tk_post *p);
/* Truncates (t may be NULL) and post-processes a and b (NULL) into out. */
hs_status tk_post_apply(const struct hs_tok *tok, struct tk_arena *ar, struct tk_enc *a,
                        struct tk_enc *b, const struct hs_tok_trunc *t, bool add,
                        struct tk_enc *out, struct hs_error *err);

struct tk_decoder {
    const struct tk_decoder_kind *kind;
    void *ctx;
};
/* Decoders work on a list of token strings (HF decode_chain). */
struct tk_strs {
    char **s;
    size_t *len;
    size_t n;
};
struct tk_decoder_kind {
    const char *name;
    hs_status (*load)(struct tk_loader *ld, json_t *o, void **ctx);
    hs_status (*run)(const void *ctx, struct tk_arena *a, struct tk_strs *t);
    void (*free)(void *ctx);
};
hs_status tk_decoder_load(struct tk_loader *ld, json_t *o, struct tk_decoder *out);
void tk_decoder_release(struct tk_decoder *d);

/* An added token of the file. */
struct tk_added {
    int32_t id;
    char *content;
    size_t len;
    char *norm; /* content after the normalizer (normalized tokens), else == content */
    size_t norm_len;
    bool single_word, lstrip, rstrip, normalized, special;
};

struct hs_tok {
    struct tk_normalizer normalizer; /* kind NULL = none */
    struct tk_pretok pretok;
    struct tk_model model;
    struct tk_post post;
    struct tk_decoder decoder;
    struct tk_added *added;
    size_t n_added;
    bool any_raw, any_norm; /* some added tokens match raw / normalized text */
    uint8_t first[2][256];  /* [normalized][first byte]: some added token may start there */
    bool collide;           /* an added token reuses the id of another vocabulary text */
    struct hs_tok_trunc trunc;
    int32_t pad_id;
    int32_t n_vocab; /* max id + 1 over model and added tokens */
};

/* Token text of an id (model or added), or NULL. */
const char *tk_id_text(const struct hs_tok *tok, int32_t id, size_t *len);

/* GPT-2's byte <-> char map of ByteLevel. */
int32_t tk_byte_char(unsigned b);
int tk_char_byte(int32_t c); /* -1 when not one of the 256 */

#endif
