#!/usr/bin/env python3
"""Generates the tokenizer golden corpus: tests/golden/tokens.jsonl.

Every line is one JSON object {"text": ..., "ids": [...]}: the ids HF `tokenizers` produces for
the text with the model's own tokenizer.json, [CLS] and [SEP] included, without truncation or
padding. Lines with an "opts" member ({"do_lower_case", "strip_accents",
"tokenize_chinese_chars"}, in the meaning of struct hs_tokenizer_opts) were produced with the
BERT normalizer reconfigured that way instead of the model's settings.

The corpus is deterministic (fixed seed): English of many kinds, CJK, other scripts, accents
precomposed and combining, emoji, control and space characters, long words, numbers, URLs,
code, punctuation, empty and whitespace-only strings, special-token literals, texts of several
hundred tokens, random mixtures of all of these, and a sweep over the code points of planes
0, 1 and 14 (one character per word).

Usage: python tools/golden/gen_tokens.py [--model-dir models/all-MiniLM-L6-v2]
                                         [--out tests/golden/tokens.jsonl]
"""
import argparse
import json
import os
import random
import sys

from tokenizers import Tokenizer
from tokenizers import normalizers

SEED = 20240229

# --- English ----------------------------------------------------------------------------------

NOUNS = """time person year way day thing man world life hand part child eye woman place work week
case point government company number group problem fact model server engine request token
network kernel matrix vector embedding sentence encoder batch queue latency throughput cache
memory thread socket packet router database index query table column row graph tree node edge
weather coffee mountain river city village ocean forest garden window door kitchen teacher
student doctor patient lawyer engineer scientist artist musician painter writer reader book
library museum hospital airport station bridge road car bicycle train plane ship island""".split()
VERBS = """be have do say get make go know take see come think look want give use find tell ask
work seem feel try leave call run compute encode decode tokenize serve route batch schedule
measure compare evaluate deploy build test debug optimize allocate release restart monitor
walk swim read write sing paint cook bake travel explore discover remember forget believe""".split()
ADJS = """good new first last long great little own other old right big high different small large
next early young important few public bad same able fast slow quick lazy brown red blue green
heterogeneous asynchronous deterministic concurrent robust efficient scalable naive
beautiful ancient modern quiet noisy bright dark happy sad strange familiar""".split()
ADVS = "quickly slowly carefully rarely often never always sometimes barely nearly".split()
NAMES = """Alice Bob Carol Dave Eve Mallory Trent Peggy Victor Walter Zoë José François Björn Łukasz
Søren Ahmed Priya Chen Yuki Olga Dmitri Nguyễn Müller O'Brien McDonald""".split()
CONTRACTIONS = "don't can't won't isn't it's I'm you're they've we'd she'll o'clock y'all".split()


def english_sentence(r):
    kind = r.randrange(12)
    n1, n2 = r.choice(NOUNS), r.choice(NOUNS)
    a1 = r.choice(ADJS)
    v = r.choice(VERBS)
    name = r.choice(NAMES)
    if kind == 0:
        s = 'The %s %s %s the %s %s.' % (a1, n1, v + 's', r.choice(ADJS), n2)
    elif kind == 1:
        s = 'Why does %s %s the %s?' % (name, v, n1)
    elif kind == 2:
        s = '%s! %s %s %s the %s!!' % (r.choice(['Wow', 'Oh no', 'Hey', 'Yes']), name, r.choice(ADVS),
                                      v + 'ed', n2)
    elif kind == 3:
        s = '%s said, "%s %s the %s," and left.' % (name, r.choice(CONTRACTIONS).capitalize(), v, n1)
    elif kind == 4:
        s = ' '.join(r.choice(NOUNS + VERBS + ADJS).upper() for _ in range(r.randrange(2, 8)))
    elif kind == 5:
        s = ' '.join(w.capitalize() for w in [a1, n1, 'of', 'the', r.choice(ADJS), n2])
    elif kind == 6:
        s = '@%s check #%s%s: %s %s %s' % (name.lower(), n1, r.randrange(100), r.choice(CONTRACTIONS),
                                           v, n2)
    elif kind == 7:
        s = '%s (%s) — %s; %s: %s…' % (n1, a1, n2, v, r.choice(ADVS))
    elif kind == 8:
        s = "It's %d:%02d on %d/%d/%d and the %s costs $%d.%02d (%d%% off)." % (
            r.randrange(24), r.randrange(60), r.randrange(1, 13), r.randrange(1, 29),
            r.randrange(1900, 2100), n1, r.randrange(1000), r.randrange(100), r.randrange(100))
    elif kind == 9:
        s = '- %s\n- %s %s\n- %s' % (n1, a1, n2, v)
    elif kind == 10:
        s = 'e.g. the U.S.A., i.e. Mr. %s vs. Dr. %s et al. (pp. %d–%d)' % (
            name, r.choice(NAMES), r.randrange(1, 50), r.randrange(50, 500))
    else:
        s = ' '.join(r.choice(NOUNS + VERBS + ADJS + ADVS) for _ in range(r.randrange(3, 25)))
        s = s[0].upper() + s[1:] + r.choice(['.', '?', '!', '...', ''])
    return s


FIXED_ENGLISH = [
    'Hello, world!', 'hello world', 'HELLO WORLD', 'The quick brown fox jumps over the lazy dog.',
    'unaffable', 'Unbelievably, the tokenizer handled it.', 'A sentence-transformer embeds text.',
    "Rock 'n' roll isn't dead.", 'state-of-the-art', 'co-operate re-enter pre-trained',
    'GPUs, TPUs and CPUs', 'all-MiniLM-L6-v2', 'x', 'I', 'a b c d e f g', 'antidisestablishmentarianism',
    'pneumonoultramicroscopicsilicovolcanoconiosis', 'supercalifragilisticexpialidocious',
    'The year 2024 had 366 days.', "Don't stop believin'", 'Smart “quotes” and ‘single’ ones',
    'Ellipsis… and em—dash and en–dash', 'tab\tseparated\tvalues', 'line one\nline two\r\nline three',
    'trailing space ', ' leading space', '  many   inner    spaces  ', 'UPPER lower MiXeD cAsE',
]

# --- other scripts ----------------------------------------------------------------------------

CJK = [
    '你好，世界！', '我爱自然语言处理。', '今天天气很好，我们去公园散步吧。', '北京是中国的首都',
    '機器學習與深度學習', '中文字符应该被单独切分', '他说：“这是一个测试。”', '一二三四五六七八九十',
    'こんにちは、世界！', '日本語のテキストを処理します。', 'カタカナとひらがなと漢字', 'ｶﾀｶﾅ ﾃｽﾄ',
    '東京タワーに行きました', 'すもももももももものうち', '안녕하세요, 세계!', '한국어 자연어 처리',
    '서울은 대한민국의 수도입니다.', '감사합니다', 'ＡＢＣ　ｆｕｌｌｗｉｄｔｈ　１２３', '「括弧」『二重』【隅付き】',
    '𠀀𠀁𪚥 rare CJK extension B', '㐀㐁 extension A', '豈 更 車 compatibility ideographs', '丽 丸 乁',
    '中文English混合text', '〇〡〢〣', '⺀⺁ radicals ⼀⼁', 'ㄅㄆㄇ bopomofo', 'ㄱㄴㄷ compatibility jamo',
]
SCRIPTS = [
    'Привет, мир! Как дела?', 'Съешь же ещё этих мягких французских булок.', 'Київ — столиця України, ї є ґ',
    'Γειά σου Κόσμε! Καλημέρα.', 'ΟΔΥΣΣΕΥΣ ΣΊΣΥΦΟΣ σίσυφος ς', 'Ἀρχὴ ἥμισυ παντός', 'ΐ ΰ ϊ ϋ ᾂ ᾷ',
    'مرحبا بالعالم', 'اللُّغَةُ العَرَبِيَّةُ', 'كتـــاب with tatweel', '١٢٣٤٥٦٧٨٩٠ ۱۲۳',
    'שלום עולם', 'עִבְרִית עִם נִקּוּד', 'नमस्ते दुनिया', 'हिन्दी भाषा में पाठ।', 'क्षत्रिय ज्ञान',
    'สวัสดีชาวโลก', 'ภาษาไทยไม่มีช่องว่างระหว่างคำ', 'გამარჯობა მსოფლიო', 'Բարեւ աշխարհ',
    'Tiếng Việt có nhiều dấu: ệ ố ữ ặ', 'İstanbul ıstakoz I ı İ i', 'Straße STRASSE ẞ ß',
    'ﬁnance ﬂow ﬀ ﬃ', 'Łódź Gdańsk Kraków', 'Ærøskøbing Åland', 'ǅ ǈ ǋ titlecase digraphs',
    'বাংলা ভাষা', 'தமிழ் மொழி', 'తెలుగు', 'ಕನ್ನಡ', 'മലയാളം', 'ગુજરાતી', 'ਪੰਜਾਬੀ', 'සිංහල',
    'ພາສາລາວ', 'ភាសាខ្មែរ', 'မြန်မာဘာသာ', 'བོད་ཡིག', 'ᐃᓄᒃᑎᑐᑦ', 'ᚠᚢᚦᚨᚱᚲ', 'ⴰⵎⴰⵣⵉⵖ', 'አማርኛ',
    'Ꭰ Ꭱ Ꭲ Cherokee ꭰ', 'Ⰰ Ⰱ glagolitic', '𐐀𐐁 deseret 𐐨', 'ᏸ ᏹ', 'Ꞵ ꞵ Ꟑ ꟑ', 'ᲀ ᲁ Ა Ბ',
]
ACCENTS_PRE = ['café', 'naïve', 'résumé', 'Ångström', 'piñata', 'jalapeño', 'façade', 'über', 'Crème brûlée',
               'São Paulo', 'Zürich', 'Dvořák', 'Éclair', 'ÀÁÂÃÄÅ àáâãäå', 'ÇÈÉÊË', 'ÑÒÓÔÕÖ', 'ǖǘǚǜ']


def combining_form(s):
    import unicodedata
    return unicodedata.normalize('NFD', s)


ACCENTS_COMB = [combining_form(s) for s in ACCENTS_PRE] + [
    'a\u0301\u0323\u0302', 'e\u0323\u0301', 'e\u0301\u0323', '\u0301start with a mark', 'mark after space \u0301x',
    'punct.\u0301', '中\u0301文', 'Z\u0351\u0352\u0353a\u0354\u0355\u0356l\u0357\u0358\u0359g\u035a\u035bo',
    'q\u0307\u0323', 'x\u0338', 'i\u0307', 'I\u0307', 'A\u030A', 'o\u0308\u0304', 'a\u0345\u0301',
    'ᄀ\u1161\u11a8 conjoining jamo', '\u1100\u1161', 'n\u0303 vs ñ', 'c\u0327',
    'stem\U0001D165\U0001D16D\U0001D165', '\U0001D15E\U0001D15F', 'e\u20dd enclosing', '1\u20e3',
]
EMOJI = [
    '😀 😃 😄 😁', '👍', '👍🏻👍🏼👍🏽👍🏾👍🏿', '👨‍👩‍👧‍👦 family', '👩‍💻 coding', '🏳️‍🌈', '🇺🇸 🇯🇵 🇩🇪 🇫🇷',
    '❤️ ❤ ♥', '1️⃣ 2️⃣ #️⃣', '🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F scotland', 'hi😀there',
    '🤷‍♀️🤦🏽‍♂️', '🥰 🫠 🫨 🪿', '☕️ coffee', '©️ ®️ ™', '🎉🎉🎉 party!!!', ':) :-( ;P <3', '(╯°□°）╯︵ ┻━┻',
]
CONTROLS = [
    'a\x00b', '\x00', '\x01\x02\x03', 'del\x7fete', 'esc\x1b[31mred\x1b[0m', 'zero\u200bwidth', 'zw\u200cnj\u200dj',
    '\ufeffBOM at start', 'replacement\ufffdchar', '\ufffd', 'tab\there', 'new\nline', 'cr\rlf\r\n', 'vt\x0bff\x0c',
    'nel\x85x', 'nb\u00a0sp', 'ogham\u1680space', 'en\u2002em\u2003thin\u2009hair\u200a', 'ls\u2028ps\u2029',
    'nnbsp\u202fmmsp\u205fideo\u3000sp', 'soft\u00adhyphen', 'bidi\u202aLRE\u202eRLO\u202c', 'iso\u2066x\u2069',
    'private\ue000use\uf8ff', 'plane15\U000F0000x\U0010FFFD', 'nonchar\ufffe\uffff', 'unassigned\u0378\U0003FFFF',
    'word joiner\u2060here', 'mongolian\u180evs', 'arabic\u0600number', 'syriac\u070fabbr', 'interlinear\ufff9x\ufffb',
    'shorthand\U0001BCA0fmt', 'music\U0001D173fmt', 'tag\U000E0001x\U000E0020y', 'vs\uFE0Fsel\U000E0100',
    'hangul filler\u3164x', 'braille\u2800blank', 'combining grapheme joiner\u034fx',
]
PUNCT = [
    '!!!???...', '----', '(((())))', '@#$%^&*', '…', '——', '«quote»', '„German“', '¿Qué? ¡Sí!', '!?!?',
    '...', '. . .', '[]{}<>', '~`|\\', '"\'"', '+-=/*', '§¶†‡•', '※‼⁇⁈', '〜～', '、。・', '‹›', '¦¬',
    '_under_score_', '__init__', '::', '=>', '->', '<=>', '&&||', '0.0.0.0:8080', '$$$', '100%', '#1',
    '\u2010\u2011\u2012\u2013\u2014\u2015', '\u00b4\u02dd', '^_^', '°C', '£€¥₹₽', '±×÷√∞≠≤≥',
]
NUMBERS = [
    '0', '42', '-17', '3.14159', '1,000,000', '1.5e-10', '6.022E23', '+1 (555) 123-4567', '192.168.1.1',
    'v1.2.3', '0xFF 0b1010 0o777', '1/2 ½ ¼ ¾', 'x² y³ 10⁻⁶', 'H₂O CO₂', 'Ⅻ ⅻ Ⅳ', '١٢٣ ४५६ ๑๒๓',
    '１２３４５', '2024-02-29T12:34:56Z', '12:00pm', '$1,234.56', '€99,99', '1st 2nd 3rd 4th',
    '3.0.0-rc.1+build.5', '000123', '9' * 40, '12345678901234567890123456789',
]
URLS_CODE = [
    'https://www.example.com/path/to/page?query=1&x=y#frag', 'http://localhost:8080/v1/embed',
    'mailto:alice@example.org', 'ftp://files.example.net/pub/file.tar.gz', 'user.name+tag@sub.domain.co.uk',
    '/usr/local/bin/hetserve --model models/x', 'C:\\Program Files\\App\\app.exe', 'www.ünicode.de',
    'def f(x):\n    return x ** 2  # square', 'int main(void) { return 0; }', 'for (i = 0; i < n; i++) a[i] += b[i];',
    '{"key": [1, 2, 3], "nested": {"a": null}}', '<div class="x">Hello &amp; bye</div>',
    'SELECT * FROM users WHERE id = 42;', 'git commit -m "fix: tokenizer"', '$ echo $HOME && ls -la',
    'camelCaseIdentifier snake_case_identifier SCREAMING_CASE', 'std::vector<int> v{1,2,3};',
    'lambda x: x if x else None', '```python\nprint("hi")\n```', '**bold** _italic_ `code`',
    'E = mc^2', 'f(x) = ∑_{i=0}^{n} x_i', 'a.b.c.d.e.f', 'rm -rf ./build/* # no', '\\n\\t\\r escaped',
]
EMPTYISH = ['', ' ', '  ', '\t', '\n', '\r\n', ' \t\n\r ', '\u3000', '\u00a0', '\u2003\u2002', '\x00',
            '\u200b', '\ufeff', '\u200b\ufeff\u200d', '\x00\x01\x7f', '\ufffd', '\u0301', '\u0301\u0302']
SPECIALS = [
    '[CLS]', '[SEP]', '[UNK]', '[PAD]', '[MASK]', 'hello [MASK] world', 'a[SEP]b', '[CLS][SEP]',
    '[cls] [sep] lower case is not special', '[[SEP]]', '[SEP', 'SEP]', '[ SEP ]', 'x[UNK]y[PAD]z',
    '[MASK][MASK][MASK]', 'The capital of France is [MASK].', '[MASK]\u0301', 'é[SEP]é', '[CLS]中[SEP]',
]


def long_words(r):
    out = []
    for n in (99, 100, 101, 102, 150, 200, 500):
        out.append('a' * n)
        out.append('x' + 'ab' * (n // 2))
        out.append(''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(n)))
        out.append('word ' + 'é' * n + ' end')
        out.append('ü' * n)
        out.append(combining_form('é' * n))
        out.append('ñ' * (n - 1) + '\u0303')
        out.append('İ' * n)
        out.append('Σ' * n)
        out.append('ß' * n)
        out.append('ﬀ' * n)
        out.append('д' * n)
    # 100 characters once normalized but more before (marks are stripped), and the reverse.
    out.append('a\u0301' * 100)
    out.append('a\u0301' * 101)
    out.append('a' * 100 + '\u200b' + 'a')
    out.append('a' * 99 + '\u00ad' + 'aa')
    out.append('un' + 'believ' * 15 + 'able')
    out.append('hyper' * 20)
    out.append('hyper' * 20 + 'x')
    return out


def long_texts(r):
    out = []
    for n in (60, 120, 200, 300, 500):
        out.append(' '.join(english_sentence(r) for _ in range(n // 6)))
    out.append(' '.join(r.choice(NOUNS) for _ in range(255)))
    out.append(' '.join(r.choice(NOUNS) for _ in range(254)))
    out.append(' '.join(r.choice(NOUNS) for _ in range(256)))
    out.append('中' * 300)
    out.append('. ' * 400)
    out.append('😀' * 300)
    out.append(' '.join(r.choice(CJK + SCRIPTS) for _ in range(40)))
    out.append('unbelievable ' * 300)
    return out


def pools():
    """Character pools for random mixtures."""
    ascii_ = [chr(c) for c in range(32, 127)]
    letters = list('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ')
    spaces = [' ', '\t', '\n', '\r', '\u00a0', '\u3000', '\u2009', '\u1680', '\u2028', '\x0b', '\x85']
    controls = ['\x00', '\x01', '\x1f', '\x7f', '\u200b', '\u200d', '\ufeff', '\ufffd', '\u00ad', '\ue000',
                '\U000E0041', '\u2066']
    marks = [chr(c) for c in list(range(0x300, 0x370)) + [0x483, 0x591, 0x5B0, 0x64B, 0x93C, 0x94D, 0xE31,
                                                          0xE48, 0x1AB0, 0x1DC0, 0x20D0, 0x20E3, 0xFE0F,
                                                          0x302A, 0x3099, 0x1D165, 0x1D16D]]
    accented = [chr(c) for c in range(0xC0, 0x250)] + ['ệ', 'ố', 'ǖ', 'Ǻ', 'ḗ', 'ṩ', 'ΐ', 'ᾂ', 'Ω', 'Å', 'K']
    cjk = [chr(c) for c in list(range(0x4E00, 0x4E80)) + list(range(0x3040, 0x3100)) +
           list(range(0xAC00, 0xAC80)) + list(range(0xF900, 0xF910)) + [0x20000, 0x2A700, 0x2F800, 0x3000,
                                                                         0x3001, 0x3002, 0xFF01, 0xFF21]]
    other = [chr(c) for c in list(range(0x400, 0x460)) + list(range(0x391, 0x3CA)) + list(range(0x600, 0x660))
             + list(range(0x5D0, 0x5EB)) + list(range(0x900, 0x970)) + list(range(0xE01, 0xE5B))]
    emoji = ['😀', '👍', '🏽', '\u200d', '👩', '💻', '🇺', '🇸', '❤', '\ufe0f', '🫠', '\u20e3']
    punct = list('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~') + ['…', '—', '–', '«', '»', '“', '”', '¿', '¡', '、', '。',
                                                        '・', '※', '§', '¶', '‼', '\u2010', '\u00b7', '\u037e']
    return [(letters, 30), (ascii_, 10), (spaces, 8), (controls, 4), (marks, 5), (accented, 8), (cjk, 8),
            (other, 8), (emoji, 5), (punct, 10)]


def random_mix(r, pool_list):
    weights = [w for _, w in pool_list]
    n = r.choice([1, 2, 3, 5, 8, 13, 21, 40, 80, 150])
    out = []
    for _ in range(n):
        chars, _ = r.choices(pool_list, weights)[0]
        out.append(r.choice(chars))
        if r.random() < 0.3:
            out.append(' ')
    return ''.join(out)


def random_words(r):
    """Random letter strings: exercises WordPiece's longest-match splitting."""
    alpha = 'etaoinshrdlcumwfgypbvkjxqz'
    return ' '.join(''.join(r.choice(alpha) for _ in range(r.randrange(1, 18)))
                    for _ in range(r.randrange(1, 12)))


def sweep(step_plane0=1):
    """Every code point of the BMP (CJK and Hangul blocks sampled), plane 1 and the tag/selector
    block of plane 14, 256 to a line, separated by spaces."""
    cps = []
    for c in range(0x80, 0x30000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        if 0x3400 <= c <= 0x9FFF or 0xAC00 <= c <= 0xD7A3 or 0xE000 <= c <= 0xF8FF or 0x20000 <= c:
            if c % 61:
                continue
        cps.append(c)
    cps += list(range(0xE0000, 0xE0200))
    cps += [0xF0000, 0xFFFFD, 0x100000, 0x10FFFD, 0x10FFFF]
    lines = []
    for i in range(0, len(cps), 256):
        lines.append(' '.join(chr(c) for c in cps[i:i + 256]))
    return lines


def load_tokenizer(model_dir):
    path = os.path.join(model_dir, 'tokenizer.json')
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(model_dir, 'tokenizer_config.json'), encoding='utf-8') as f:
        cfg = json.load(f)
    norm = json.loads(tok.to_str())['normalizer']
    # The C tokenizer is configured from tokenizer_config.json; make sure tokenizer.json agrees.
    want = {'type': 'BertNormalizer', 'clean_text': True, 'handle_chinese_chars': cfg.get('tokenize_chinese_chars', True),
            'strip_accents': cfg.get('strip_accents'), 'lowercase': cfg.get('do_lower_case', True)}
    if norm != want:
        sys.exit('tokenizer.json normalizer %r does not match tokenizer_config.json %r' % (norm, want))
    # ...and that vocab.txt, which the C side loads, has the same ids.
    with open(os.path.join(model_dir, 'vocab.txt'), encoding='utf-8') as f:
        vocab = [line.rstrip() for line in f]
    for i, t in enumerate(vocab):
        if tok.token_to_id(t) != i:
            sys.exit('vocab.txt line %d (%r) is id %r in tokenizer.json' % (i, t, tok.token_to_id(t)))
    return tok, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--model-dir', default='models/all-MiniLM-L6-v2')
    ap.add_argument('--out', default='tests/golden/tokens.jsonl')
    args = ap.parse_args()

    tok, cfg = load_tokenizer(args.model_dir)
    r = random.Random(SEED)
    pool_list = pools()

    texts = []
    texts += FIXED_ENGLISH
    texts += [english_sentence(r) for _ in range(700)]
    texts += CJK + SCRIPTS + ACCENTS_PRE + ACCENTS_COMB + EMOJI + CONTROLS + PUNCT + NUMBERS + URLS_CODE
    texts += EMPTYISH + SPECIALS
    texts += long_words(r) + long_texts(r)
    texts += [random_words(r) for _ in range(200)]
    # Mixtures: a sentence with other-script, emoji, control or accent material spliced in.
    for _ in range(300):
        a = english_sentence(r)
        b = r.choice(CJK + SCRIPTS + EMOJI + CONTROLS + ACCENTS_COMB + PUNCT + NUMBERS + SPECIALS)
        k = r.randrange(len(a) + 1)
        texts.append(a[:k] + r.choice(['', ' ']) + b + r.choice(['', ' ']) + a[k:])
    texts += [random_mix(r, pool_list) for _ in range(700)]
    texts += sweep()

    variants = [
        {'do_lower_case': False, 'strip_accents': -1, 'tokenize_chinese_chars': True},
        {'do_lower_case': True, 'strip_accents': 0, 'tokenize_chinese_chars': True},
        {'do_lower_case': False, 'strip_accents': 1, 'tokenize_chinese_chars': True},
        {'do_lower_case': True, 'strip_accents': -1, 'tokenize_chinese_chars': False},
    ]
    variant_texts = (CJK + SCRIPTS + ACCENTS_PRE + ACCENTS_COMB + long_words(random.Random(SEED + 1)) +
                     SPECIALS[:8] + FIXED_ENGLISH[:10] + [random_mix(r, pool_list) for _ in range(60)])

    os.makedirs(os.path.dirname(args.out) or '.', exist_ok=True)
    n = 0
    with open(args.out, 'w', encoding='utf-8', newline='\n') as f:
        for t in texts:
            enc = tok.encode(t)
            f.write(json.dumps({'text': t, 'ids': enc.ids}, ensure_ascii=False) + '\n')
            n += 1
        default_norm = tok.normalizer
        for opts in variants:
            strip = None if opts['strip_accents'] < 0 else bool(opts['strip_accents'])
            tok.normalizer = normalizers.BertNormalizer(
                clean_text=True, handle_chinese_chars=opts['tokenize_chinese_chars'],
                strip_accents=strip, lowercase=opts['do_lower_case'])
            for t in variant_texts:
                enc = tok.encode(t)
                f.write(json.dumps({'text': t, 'opts': opts, 'ids': enc.ids}, ensure_ascii=False) + '\n')
                n += 1
        tok.normalizer = default_norm

    # The truncation rule the C tests apply to these ids is HF's own: check it here once.
    tok.enable_truncation(max_length=256)
    for t in texts[:: 7] + long_texts(random.Random(SEED)):
        full = tok.encode(t).ids
        tok.no_truncation()
        untrunc = tok.encode(t).ids
        tok.enable_truncation(max_length=256)
        expect = untrunc if len(untrunc) <= 256 else untrunc[:255] + [untrunc[-1]]
        if full != expect:
            sys.exit('HF truncation differs from [CLS] + first 254 + [SEP] for %r' % t[:40])
    print('wrote %d strings to %s (%d bytes)' % (n, args.out, os.path.getsize(args.out)))


if __name__ == '__main__':
    main()
