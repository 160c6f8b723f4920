#!/usr/bin/env python3
"""Writes src/model/tokenizer_tables.h: the character classes HF `tokenizers` uses for BERT.

HF's BertNormalizer / BertPreTokenizer classify characters with tables frozen in its Rust
dependencies, each from a different Unicode version (categories: an old one; lowercasing: the
Rust standard library's; NFD: the normalization crate's). utf8proc follows whatever Unicode
version it was built with, so using its categories directly disagrees with HF on hundreds of
code points, and differently on each machine. This script asks the installed `tokenizers`
package itself how it treats every code point and writes the answers as range tables, so the C
tokenizer reproduces HF exactly whatever utf8proc is installed (utf8proc still supplies the
decompositions themselves).

Usage: python tools/golden/gen_tokenizer_tables.py [--out src/model/tokenizer_tables.h]
Needs only the `tokenizers` package (no model files).
"""
import argparse
import sys

from tokenizers import normalizers as N
from tokenizers import pre_tokenizers as P

MAX_CP = 0x110000


def code_points():
    for c in range(MAX_CP):
        if not 0xD800 <= c <= 0xDFFF:
            yield c


def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def probe():
    clean = N.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                             lowercase=False)
    strip = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                             lowercase=False)
    lower = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                             lowercase=True)
    nfd = N.NFD()
    pre = P.BertPreTokenizer()

    other, mark, punct, decomp, lowmap = [], [], [], [], {}
    for c in code_points():
        s = chr(c)
        if c not in (0, 0xFFFD) and clean.normalize_str(s) == '':
            other.append(c)
        if nfd.normalize_str(s) != s:
            decomp.append(c)
        elif strip.normalize_str(s) == '':
            mark.append(c)
        if c >= 0x80 and len(pre.pre_tokenize_str('a' + s + 'a')) == 3:
            punct.append(c)
        lo = lower.normalize_str(s)
        if lo != s:
            lowmap[c] = [ord(x) for x in lo]

    # Combining classes as HF's NFD sees them, found from how it reorders a mark against
    # reference marks R_w of every class w: "R_w X" becomes "X R_w" exactly when
    # 0 < ccc(X) < w, and "X R_w" becomes "R_w X" exactly when 0 < w < ccc(X).
    import unicodedata

    def swaps(first, second):
        return first != second and nfd.normalize_str('a' + first + second) == 'a' + second + first

    refs = {}
    for c in range(0x300, 0x20000):
        v = unicodedata.combining(chr(c))
        if not v or v in refs or nfd.normalize_str(chr(c)) != chr(c):
            continue
        # Only a mark HF knows reorders against U+0301 (230) or U+0345 (240).
        r = chr(c)
        known = swaps('\u0345', r) if v < 240 else swaps(r, '\u0301')
        if v == 230:
            known = swaps('\u0345', r)
        if known:
            refs[v] = r
    values = sorted(refs)
    ccc = {}
    for c in code_points():
        s = chr(c)
        if not unicodedata.combining(s) or nfd.normalize_str(s) != s:
            continue
        before = {w for w in values if swaps(refs[w], s)}
        after = {w for w in values if swaps(s, refs[w])}
        if not before and not after:
            continue  # a starter to HF (a mark from a later Unicode version)
        fits = [v for v in values if v not in before and v not in after and
                all(w > v for w in before) and all(w < v for w in after)]
        if len(fits) != 1:
            sys.exit('cannot place U+%04X among combining classes: before %s after %s refs %s' % (c, sorted(before), sorted(after), {v: hex(ord(r)) for v, r in refs.items()}))
        ccc[c] = fits[0]
    return other, mark, punct, decomp, lowmap, ccc


def c_ranges(name, cps, comment):
    rs = ranges(cps)
    lines = ['/* %s (%d code points) */' % (comment, len(cps)),
             'static const struct hs__cp_range %s[] = {' % name]
    row = []
    for a, b in rs:
        row.append('{0x%X, 0x%X}' % (a, b))
        if len(row) == 5:
            lines.append('    ' + ', '.join(row) + ',')
            row = []
    if row:
        lines.append('    ' + ', '.join(row) + ',')
    lines.append('};')
    return '\n'.join(lines)


def c_valued(name, items, comment):
    """items: sorted (cp, value) pairs; runs of consecutive cps with equal value merge."""
    rs = []
    for c, v in items:
        if rs and rs[-1][1] == c - 1 and rs[-1][2] == v:
            rs[-1][1] = c
        else:
            rs.append([c, c, v])
    lines = ['/* %s (%d code points) */' % (comment, len(items)),
             'static const struct hs__cp_value %s[] = {' % name]
    row = []
    for a, b, v in rs:
        row.append('{0x%X, 0x%X, %d}' % (a, b, v))
        if len(row) == 4:
            lines.append('    ' + ', '.join(row) + ',')
            row = []
    if row:
        lines.append('    ' + ', '.join(row) + ',')
    lines.append('};')
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', default='src/model/tokenizer_tables.h')
    args = ap.parse_args()
    import tokenizers
    other, mark, punct, decomp, lowmap, ccc = probe()

    multi = {c: v for c, v in lowmap.items() if len(v) != 1}
    # Lowercase as (start, end, delta) runs: one run per stretch of consecutive code points
    # that map with the same delta; alternating upper/lower pairs become stride-2 runs.
    single = sorted((c, v[0] - c) for c, v in lowmap.items() if len(v) == 1)
    lruns = []
    for c, d in single:
        if lruns and lruns[-1][2] == d and lruns[-1][3] in (0, c - lruns[-1][1]) and \
                c - lruns[-1][1] in (1, 2):
            lruns[-1][3] = c - lruns[-1][1]
            lruns[-1][1] = c
        else:
            lruns.append([c, c, d, 0])
    for prev, nxt in zip(lruns, lruns[1:]):
        if nxt[0] <= prev[1]:
            sys.exit('overlapping lowercase runs at U+%04X' % nxt[0])
    low_lines = ['/* Lowercase mappings to one code point (%d code points): runs of code points'
                 ' start..end,\n * every `step`-th one, mapping to itself + delta. */' % len(single),
                 'static const struct hs__cp_lower hs__lower_table[] = {']
    row = []
    for a, b, d, st in lruns:
        row.append('{0x%X, 0x%X, %d, %d}' % (a, b, d, st or 1))
        if len(row) == 4:
            low_lines.append('    ' + ', '.join(row) + ',')
            row = []
    if row:
        low_lines.append('    ' + ', '.join(row) + ',')
    low_lines.append('};')

    if set(multi) != {0x130} or multi[0x130] != [0x69, 0x307]:
        sys.exit('unexpected multi-code-point lowercase mappings: %r' % multi)

    parts = [
        '/* Generated by tools/golden/gen_tokenizer_tables.py from HF tokenizers %s; do not edit.'
        % tokenizers.__version__,
        ' * Character classes exactly as HF BertNormalizer / BertPreTokenizer apply them;',
        ' * only src/model/tokenizer.c includes this file. Ranges are inclusive and sorted. */',
        '#ifndef HS_MODEL_TOKENIZER_TABLES_H',
        '#define HS_MODEL_TOKENIZER_TABLES_H',
        '',
        '#include <stdint.h>',
        '',
        '/* clang-format off */',
        'struct hs__cp_range { int32_t lo, hi; };',
        'struct hs__cp_value { int32_t lo, hi; int32_t value; };',
        'struct hs__cp_lower { int32_t lo, hi; int32_t delta; int32_t step; };',
        '',
        c_ranges('hs__other_table', other,
                 'Removed by text cleaning: HF\'s "other" class (Cc, Cf, Co), besides U+0000 and'
                 ' U+FFFD'),
        '',
        c_ranges('hs__mark_table', mark, 'Nonspacing marks (Mn), dropped when stripping accents'),
        '',
        c_ranges('hs__punct_table', punct,
                 'Non-ASCII punctuation (P*), split off as words of their own'),
        '',
        c_ranges('hs__decomp_table', decomp,
                 'Code points with a canonical decomposition that HF\'s NFD applies'),
        '',
        c_valued('hs__ccc_table', sorted(ccc.items()),
                 'Canonical combining classes that HF\'s NFD orders by'),
        '',
        '\n'.join(low_lines),
        '/* clang-format on */',
        '',
        '#endif',
        '',
    ]
    with open(args.out, 'w', encoding='utf-8') as f:
        f.write('\n'.join(parts))
    print('wrote %s: other %d, marks %d, punct %d, decomp %d, ccc %d, lower %d runs' %
          (args.out, len(other), len(mark), len(punct), len(decomp), len(ccc), len(lruns)))


if __name__ == '__main__':
    main()
