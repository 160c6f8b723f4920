#!/usr/bin/env python3
"""Goldens for the tokenizer.json pipeline (tests/model/test_tokenizer_json.c).

Builds small tokenizers that mirror the real families with the HF `tokenizers` API (BERT
uncased / cased / Chinese WordPiece, RoBERTa byte-level BPE, Qwen2-style Split regex +
ByteLevel, Llama-style SentencePiece BPE with byte_fallback, XLM-R-style SentencePiece Unigram
with a Precompiled normalizer, trained with `sentencepiece` and converted with transformers'
converter as the real files were made), saves each tokenizer.json under
tests/data/tokenizer_json/, and writes what HF returns (ids, type ids, special mask, char
offsets) for a corpus that hurts, singles and pairs, with and without special tokens, and a few
truncation settings. The real tokenizer.json of the installed model (all-MiniLM-L6-v2) gets a
golden too (the file itself stays in models/).

Usage: python tools/golden/gen_tokenizer_json.py   (needs tokenizers, transformers, sentencepiece)
"""
import json
import os
import random
import sys
import tempfile

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers, AddedToken, Regex

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer_json")
sys.path.insert(0, os.path.dirname(__file__))
import corpus as C  # noqa: E402

HURT = [
    "",
    " ",
    "   ",
    "\t\n\r",
    "Hello world!",
    "Hello, World! How's it going? I'm fine; you're great.",
    "  leading and trailing spaces   ",
    "multiple     spaces\tand\ttabs\n\nnewlines",
    "北京是中国的首都。我爱自然语言处理！",
    "東京都渋谷区でラーメンを食べました",
    "한국어 텍스트도 포함됩니다",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Emoji: 👩‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, ❤️ heart",
    "Combining: e\u0301 a\u0300\u0301 n\u0303 ﬁ ligature Ǆ Å",
    "Café naïve résumé coöperate façade Ångström",
    "Control\u0001chars\u0007and\u007fdel\u200bzero\u200dwidth\ufeffbom",
    "NUL\u0000inside\u0000text",
    "\u0000",
    "\u200b\u200c\u200d",
    "\u0301\u0302",
    "a" * 150,
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "x" * 30 + "é" * 30 + "漢" * 10,
    "numbers 1234567890 3.14159 1,000,000 ٣٤٥ ½",
    "code: def f(x): return x**2 # comment <html></html> {\"a\": [1,2]}",
    "URL https://example.com/path?q=1&b=2#frag user@mail.org",
    "I'VE DON'T WE'LL they'd She's",
    "İstanbul ΣΊΣΥΦΟΣ straße ǅemal",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ｶﾀｶﾅ",
    "\u3000ideographic\u3000space\u00a0nbsp\u2009thin",
    "mixed 中文 and English 与 日本語 text",
    "tabs\there\r\nwindows\rmac",
    "  \n  ",
    "...!!!???",
    "snake_case and kebab-case and CamelCase",
    "\U0001F600\U0001F601 \U0001F9D1\u200D\U0001F4BB \U0001F1FA\U0001F1F8",
]

TRAIN = (C.SHORT_EN + C.MEDIUM_EN + C.LONG_EN + C.CHINESE + C.JAPANESE + C.OTHER_SCRIPTS + C.MIXED +
         C.ACCENTS + C.EMOJI + HURT)


def train_text():
    rnd = random.Random(7)
    lines = list(TRAIN)
    for _ in range(300):
        lines.append(" ".join(rnd.choice(TRAIN).split()[:12]))
    return lines


def added_cases(specials):
    """Texts with added tokens inside words and around spaces."""
    out = []
    for s in specials:
        out += [f"hello{s}world", f"a {s} b", f"{s}", f"  {s}  x", f"x{s}{s}y", f"start {s}end",
                f"{s.lower()} {s.upper()}"]
    return out


def pairs(texts):
    rnd = random.Random(11)
    ps = []
    for _ in range(40):
        ps.append((rnd.choice(texts), rnd.choice(texts)))
    ps.append(("short", "a much longer second sequence " * 8))
    ps.append(("a much longer first sequence " * 8, "short"))
    ps.append(("", "only the pair"))
    return ps


TRUNCS = [
    dict(max_length=16, strategy="longest_first", direction="right"),
    dict(max_length=12, strategy="longest_first", direction="left"),
    dict(max_length=20, strategy="only_first", direction="right"),
    dict(max_length=20, strategy="only_second", direction="left"),
    dict(max_length=7, strategy="longest_first", direction="right"),
]


def record(tok, text, pair, add, trunc):
    if trunc:
        tok.enable_truncation(**trunc)
    else:
        tok.no_truncation()
    try:
        e = tok.encode(text, pair, add_special_tokens=add) if pair is not None else tok.encode(
            text, add_special_tokens=add)
    except Exception as ex:  # truncation that cannot be met
        return {"text": text, "pair": pair, "add": add, "trunc": trunc, "error": str(ex)[:80]}
    return {"text": text, "pair": pair, "add": add, "trunc": trunc, "ids": e.ids,
            "type_ids": e.type_ids, "special": e.special_tokens_mask,
            "offsets": [list(o) for o in e.offsets]}


def goldens(name, tok, specials, path_in_repo):
    tok.no_padding()
    tok.no_truncation()
    texts = HURT + C.SHORT_EN[:20] + C.MEDIUM_EN[:10] + C.CHINESE[:5] + C.EMOJI[:5] + \
        C.ACCENTS[:5] + added_cases(specials)
    cases = []
    for t in texts:
        cases.append(record(tok, t, None, True, None))
        cases.append(record(tok, t, None, False, None))
    for a, b in pairs(texts):
        cases.append(record(tok, a, b, True, None))
        cases.append(record(tok, a, b, False, None))
    for tr in TRUNCS:
        for a, b in pairs(texts)[:12]:
            cases.append(record(tok, a, b, True, tr))
        for t in texts[:20]:
            cases.append(record(tok, t, None, True, tr))
    # decode of the ids of the single texts
    decodes = []
    for t in texts[:40]:
        ids = tok.encode(t).ids
        decodes.append({"ids": ids, "skip": True, "text": tok.decode(ids, skip_special_tokens=True)})
        decodes.append({"ids": ids, "skip": False, "text": tok.decode(ids, skip_special_tokens=False)})
    # each text once: cases name theirs by index into "texts"
    texts_tab, index = [], {}
    for c in cases:
        for k in ("text", "pair"):
            v = c[k]
            if v is None:
                continue
            if v not in index:
                index[v] = len(texts_tab)
                texts_tab.append(v)
            c[k] = index[v]
    doc = {"name": name, "tokenizer": path_in_repo, "texts": texts_tab, "cases": cases,
           "decodes": decodes}
    with open(os.path.join(OUT, name + ".golden.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
    print(f"{name}: {len(cases)} cases", file=sys.stderr)


def save(tok, name):
    p = os.path.join(OUT, name + ".tokenizer.json")
    tok.save(p)
    return Tokenizer.from_file(p), os.path.relpath(p, ROOT)


def wordpiece(lowercase, chinese, vocab_size):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, handle_chinese_chars=chinese)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    sp = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(train_text(), trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                                    special_tokens=sp))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece()
    return tok


def roberta():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    sp = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(train_text(), trainers.BpeTrainer(
        vocab_size=2000, special_tokens=sp, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    return tok


def bert_processing():
    tok = wordpiece(True, True, 1500)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    tok.add_tokens([AddedToken("newword", single_word=True), AddedToken("Café", normalized=True)])
    return tok


def qwen2():
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    sp = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(train_text(), trainers.BpeTrainer(
        vocab_size=2500, special_tokens=sp, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def gpt2_prefix():
    """GPT-2 style with add_prefix_space and trimmed offsets, added tokens that strip."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train_text(), trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.add_special_tokens([AddedToken("<|sep|>", rstrip=True, lstrip=True, special=True)])
    tok.add_tokens([AddedToken("world", single_word=True, normalized=False)])
    return tok


def misc_pipeline():
    """The other components: NFKD, StripAccents, Lowercase, Replace, Strip; Whitespace, Digits,
    Punctuation; BPE with a continuing prefix and an end-of-word suffix; BPEDecoder."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##",
                               end_of_word_suffix="</w>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"\s+"), " "), normalizers.Replace("ß", "ss"),
        normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="contiguous")])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    sp = ["[UNK]", "[CLS]", "[SEP]"]
    # (no NUL in the training text: jansson cannot read a vocabulary key with one)
    tok.train_from_iterator([t.replace("\0", "") for t in train_text()], trainers.BpeTrainer(
        vocab_size=1200, special_tokens=sp, continuing_subword_prefix="##",
        end_of_word_suffix="</w>"))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $B:1 [SEP] $A:0 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def t5_unigram():
    """T5 style: NFKC, WhitespaceSplit + Metaspace (prepend first, no split), Unigram trained by
    tokenizers, an EOS-only template."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.train_from_iterator(train_text(), trainers.UnigramTrainer(
        vocab_size=800, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def wordlevel():
    """WordLevel over CharDelimiterSplit(" ") after Lowercase, with a template."""
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.CharDelimiterSplit(" ")
    tok.train_from_iterator([t.replace("\0", "") for t in train_text()], trainers.WordLevelTrainer(
        vocab_size=1000, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def spm_train(model_type, vocab_size, extra):
    import sentencepiece as spm
    d = tempfile.mkdtemp()
    txt = os.path.join(d, "train.txt")
    with open(txt, "w", encoding="utf-8") as f:
        for line in train_text():
            line = line.replace("\u0000", " ").strip()
            if line:
                f.write(line + "\n")
    prefix = os.path.join(d, "m")
    spm.SentencePieceTrainer.train(input=txt, model_prefix=prefix, vocab_size=vocab_size,
                                   model_type=model_type, character_coverage=0.9995,
                                   minloglevel=2, **extra)
    return prefix + ".model"


def llama():
    from transformers import LlamaTokenizer
    from transformers import convert_slow_tokenizer as cst
    from transformers.convert_slow_tokenizer import convert_slow_tokenizer

    # transformers 5's LlamaConverter passes the scores where extract() now takes the model
    # type; give it the (vocab, merges) pair it expects
    class Extractor(cst.SentencePieceExtractor):
        def extract(self, vocab_scores=None, **kw):
            from tokenizers.models import BPE
            got = super().extract(BPE)
            return got["vocab"], got["merges"]

    cst.LlamaConverter.SpmExtractor = Extractor
    m = spm_train("bpe", 1200, dict(byte_fallback=True, split_digits=True, unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=-1))
    slow = LlamaTokenizer(vocab_file=m, legacy=False, add_prefix_space=True)
    return convert_slow_tokenizer(slow)


def xlmr():
    from transformers import XLMRobertaTokenizer
    from transformers.convert_slow_tokenizer import convert_slow_tokenizer
    m = spm_train("unigram", 1200, dict(unk_id=3, bos_id=0, eos_id=2, pad_id=1,
                                       normalization_rule_name="nmt_nfkc"))
    slow = XLMRobertaTokenizer(vocab_file=m)
    return convert_slow_tokenizer(slow)


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    real = os.path.join(ROOT, "models", "all-MiniLM-L6-v2", "tokenizer.json")
    if os.path.exists(real) and (not only or "minilm" in only):
        goldens("minilm", Tokenizer.from_file(real), ["[MASK]", "[SEP]"],
                "models/all-MiniLM-L6-v2/tokenizer.json")
    builders = [
        ("bert_uncased", lambda: wordpiece(True, True, 1500), ["[MASK]", "[SEP]"]),
        ("bert_cased", lambda: wordpiece(False, True, 1500), ["[MASK]", "[SEP]"]),
        ("bert_chinese", lambda: wordpiece(True, True, 3000), ["[MASK]"]),
        ("bert_processing", bert_processing, ["[SEP]", "newword", "Café"]),
        ("roberta", roberta, ["<mask>", "</s>"]),
        ("qwen2", qwen2, ["<|im_start|>", "<|endoftext|>"]),
        ("llama", llama, ["</s>", "<s>"]),
        ("xlmr", xlmr, ["<mask>", "</s>"]),
        ("gpt2_prefix", gpt2_prefix, ["<|sep|>", "world", "<|endoftext|>"]),
        ("misc_pipeline", misc_pipeline, ["[SEP]"]),
        ("t5_unigram", t5_unigram, ["</s>"]),
        ("wordlevel", wordlevel, ["[SEP]"]),
    ]
    for name, build, specials in builders:
        if only and name not in only:
            continue
        tok, path = save(build(), name)
        goldens(name, tok, specials, path)


if __name__ == "__main__":
    main()
