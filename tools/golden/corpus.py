"""Fixed test corpus for the golden embeddings (tests and golden data only; not serving code).

`build(tokenizer, max_seq_length)` returns a deterministic list of (category, text). Most texts
are literals below; the rest are built with a fixed-seed random generator from fixed word lists,
and a few are grown word by word until the tokenizer gives an exact token count, so that the
truncation boundary (max_seq_length, specials included) is hit exactly, just below and just above.
The same tokenizer, vocabulary and seed always give the same list.
"""

import random

SEED = 20240611

SHORT_EN = [
    "hello",
    "Hello world!",
    "how to bake bread",
    "best pizza near me",
    "weather tomorrow",
    "what is the capital of France?",
    "cheap flights to tokyo",
    "python list comprehension",
    "symptoms of the flu",
    "who wrote Hamlet",
    "convert 5 miles to km",
    "reset router password",
    "a",
    "I",
    "OK",
    "Thanks!",
    "why is the sky blue",
    "sentence embeddings",
    "how many legs does a spider have",
    "define serendipity",
    "nearest pharmacy open now",
    "is it going to rain",
    "MiniLM vs BERT",
    "translate good morning to spanish",
    "fix flat bicycle tire",
    "New York Times",
    "U.S.A.",
    "don't stop",
    "e-mail vs email",
    "COVID-19 vaccine side effects",
]

MEDIUM_EN = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner.",
    "The cat sat on the mat and looked out of the window.",
    "Machine learning models can be deployed on heterogeneous hardware.",
    "She sells sea shells by the sea shore.",
    "Our quarterly revenue grew by twelve percent compared with last year.",
    "The meeting has been moved to Thursday afternoon at three o'clock.",
    "Please remember to water the plants while I'm away on vacation.",
    "The mitochondria is the powerhouse of the cell.",
    "I can't believe it's already December; the year went by so fast!",
    "Transformers use self-attention to weigh the importance of each token.",
    "The restaurant was crowded, noisy, and absolutely worth the wait.",
    "He didn't know whether to laugh or cry when he heard the news.",
    "To be, or not to be, that is the question.",
    "The train to Boston departs from platform 9 at 10:45 AM.",
    "Researchers discovered a new species of frog in the Amazon rainforest.",
    "Customer reported that the app crashes when uploading large photos.",
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "My grandmother's recipe calls for two cups of flour and a pinch of salt.",
    "The stock market fell sharply after the central bank raised interest rates.",
    "Children were playing soccer in the park until the streetlights came on.",
    "UNBELIEVABLE!!! This is the BEST day EVER!!!",
    "well... i guess that's fine, whatever you think is best",
    "Dr. Smith, Ph.D., will present at 9 a.m. (room 4B) -- don't be late.",
    "The patient's blood pressure was 120/80 mmHg and heart rate 72 bpm.",
    "Submit your pull request before the code freeze on Friday.",
    "An apple a day keeps the doctor away, or so they say.",
    "The spacecraft entered orbit around Jupiter after a five-year journey.",
    "It's raining cats and dogs out there -- grab an umbrella!",
    "Rock-paper-scissors is a hand game usually played between two people.",
    "The well-known author's long-awaited sequel is finally out.",
    "Neither the manager nor the employees were aware of the change.",
    "Volcanic eruptions can inject sulfur dioxide into the stratosphere.",
    "Hey @john, check out #MachineLearning at https://example.com/ml?ref=tw",
    "\"Quoted text,\" she said, 'with nested quotes' and [brackets] {braces} <angles>.",
]

LONG_EN = [
    "The history of natural language processing generally started in the 1950s, although work can be "
    "found from earlier periods. In 1950, Alan Turing published an article titled \"Computing Machinery "
    "and Intelligence\" which proposed what is now called the Turing test as a criterion of intelligence.",
    "Sentence embeddings map variable-length text to fixed-size vectors so that semantically similar "
    "sentences end up close together. They are widely used for semantic search, clustering, duplicate "
    "detection and retrieval-augmented generation, where a query is embedded and compared with millions "
    "of stored passages using cosine similarity.",
    "When the storm finally passed, the villagers came out of their houses to survey the damage. Roofs "
    "had been torn away, trees lay across the roads, and the river had swollen far beyond its banks. Yet "
    "nobody had been hurt, and by evening neighbours were already helping one another to clear the debris.",
    "Terms and conditions: by accessing or using the service you agree to be bound by these terms. If you "
    "disagree with any part of the terms then you may not access the service. We reserve the right, at our "
    "sole discretion, to modify or replace these terms at any time without prior notice.",
    "Step 1: preheat the oven to 180 degrees Celsius. Step 2: whisk the eggs and sugar until pale and "
    "fluffy. Step 3: fold in the sifted flour gently. Step 4: pour the batter into a lined tin and bake "
    "for 25 to 30 minutes, or until a skewer inserted in the centre comes out clean.",
    "The server accepts a batch of requests, groups them by sequence length into buckets, and dispatches "
    "each bucket to the engine with the lowest predicted latency. If an engine fails or its queue grows "
    "beyond the configured threshold, a circuit breaker opens and traffic fails over to the remaining ones.",
]

CHINESE = [
    "你好",
    "你好，世界！",
    "今天天气很好。",
    "我喜欢吃苹果和香蕉。",
    "机器学习是人工智能的一个分支。",
    "北京是中华人民共和国的首都。",
    "请问最近的地铁站在哪里？",
    "这家餐厅的菜非常好吃，服务也很周到。",
    "他每天早上六点起床，然后去公园跑步。",
    "深度学习模型需要大量的数据和计算资源。",
    "長城是中國古代的偉大建築之一。",
    "我们明天下午三点开会，请准时参加。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
    "人工智能正在改变我们的生活方式和工作方式，从智能手机到自动驾驶汽车，它无处不在。",
    "中文句子中有English单词和123数字。",
]

JAPANESE = [
    "こんにちは",
    "ありがとうございます。",
    "今日はいい天気ですね。",
    "東京タワーに行きたいです。",
    "私は毎朝コーヒーを飲みます。",
    "機械学習は人工知能の一分野です。",
    "カタカナとひらがなと漢字が混ざっています。",
    "すみません、駅はどこですか？",
    "猫が好きですか、それとも犬が好きですか。",
    "この本はとても面白かったので、友達にも勧めました。",
    "ｶﾀｶﾅ半角テキストと全角ＡＢＣ１２３",
    "古池や蛙飛び込む水の音",
    "新しいスマートフォンを買いましたが、バッテリーの持ちが悪いです。",
    "ラーメン、寿司、天ぷらは日本の代表的な料理です。",
    "日本語のテキストにEnglish wordsが入っている。",
]

OTHER_SCRIPTS = [
    "안녕하세요, 만나서 반갑습니다.",
    "한국어 문장 토큰화 테스트입니다.",
    "Привет, как дела?",
    "Москва — столица России.",
    "Γειά σου Κόσμε! Η γρήγορη καφέ αλεπού.",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם, מה שלומך?",
    "नमस्ते, आप कैसे हैं?",
    "สวัสดีครับ ยินดีที่ได้รู้จัก",
    "Xin chào, bạn có khỏe không?",
    "Բարեւ աշխարհ",
    "გამარჯობა მსოფლიო",
    "ሰላም ለዓለም",
    "Selam dünya! Nasılsın? İstanbul çok güzel.",
]

MIXED = [
    "Hello 世界! Привет мир! こんにちは world!",
    "The word for cat is 猫 in Japanese and 고양이 in Korean.",
    "Tokyo (東京) and Beijing (北京) are capital cities.",
    "I ate 寿司 and drank 茶 in Kyoto — ¡qué rico!",
    "Москва Moscow मास्को موسكو 莫斯科",
    "mixed中文english日本語한국어русский",
    "abc123漢字ひらがなカタカナ한글αβγ",
    "The price is ¥1,000 (about €6.50 or $7).",
    "Unicode: café, naïve, 東京, Ελλάδα, Россия, 🇯🇵",
    "Ελληνικά and English and 中文 together.",
]

ACCENTS = [
    "café",
    "Crème brûlée à la française.",
    "Ça va? Très bien, merci!",
    "Müller, Größe, Straße, Äpfel, Öl, Übung.",
    "El niño comió piñata en Año Nuevo.",
    "São Paulo, Brasília, Florianópolis",
    "Dvořák, Smetana, Janáček",
    "Łódź, Kraków, Gdańsk, Wrocław",
    "naïve façade résumé coöperate",
    "Tiếng Việt có rất nhiều dấu thanh.",
    "Ångström, Øresund, Æble",
    "cafe\u0301 (combining acute accent, NFD)",
    "n\u0303o\u0308e\u0301l with several combining marks",
    "ÉCOLE PRIMAIRE ÀÉÎÕÜ",
    "Zürich Hauptbahnhof ist sehr groß.",
]

EMOJI = [
    "I love pizza 🍕",
    "😀😃😄😁😆",
    "Great job! 👍👍👍",
    "Family: 👨‍👩‍👧‍👦 (ZWJ sequence)",
    "Flags: 🇺🇸 🇫🇷 🇯🇵 🇩🇪",
    "Skin tones: 👋🏻 👋🏽 👋🏿",
    "❤️ red heart with variation selector",
    "Weather today: ☀️ then 🌧️ later ⛈️",
    "🔥🔥 this is fire 🔥🔥",
    "Math symbols: ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷",
    "Arrows and boxes: → ← ↑ ↓ ⇒ ■ □ ● ○ ★ ☆",
    "Currency: $ € £ ¥ ₹ ₩ ₿",
]

CODE = [
    "def add(a, b):\n    return a + b",
    "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }",
    "SELECT name, COUNT(*) FROM users WHERE age > 21 GROUP BY name ORDER BY 2 DESC;",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "git commit -m \"fix: handle empty input\" && git push origin main",
    "import numpy as np; x = np.zeros((32, 128), dtype=np.float32)",
    "#include <stdio.h>\nint main(void) { printf(\"hello\\n\"); return 0; }",
    "curl -X POST http://localhost:8080/v1/embed -d '{\"texts\": [\"hi\"]}'",
    "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "https://www.example.com/path/to/page?query=1&sort=desc#section-2",
    "user.name+tag@sub.example.co.uk",
    "const f = async (x) => { await g(x?.y ?? 0); };",
    "<div class=\"container\"><p>Hello &amp; welcome</p></div>",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); }",
    "C:\\Users\\Admin\\Documents\\report_final_v2.docx",
    "0x7fff5fbff8a8 segfault at addr 0xdeadbeef",
]

NUMBERS = [
    "3.14159265358979323846",
    "1,234,567.89",
    "Call me at +1 (555) 123-4567.",
    "The meeting is on 2024-03-15 at 14:30 UTC.",
    "Avogadro's number is 6.022e23 per mole.",
    "Order #A-00042 shipped on 12/31/1999.",
    "-273.15 °C is absolute zero.",
    "1st, 2nd, 3rd, 4th, 21st, 102nd",
    "IPv4 192.168.0.1 and IPv6 2001:db8::ff00:42:8329",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "50% off! Was $199.99, now $99.99.",
    "Version v2.10.3-rc1+build.457",
]

EDGE = [
    "",
    " ",
    "\t\n\r",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nmixed",
    "control\x07chars\x1bhere\x7fend",
    "nul\x00byte inside",
    "replacement \ufffd char",
    "zero\u200bwidth\u200cjoiners\u200d and\ufeffBOM",
    "non\u00a0breaking\u2003spaces\u3000ideographic",
    "soft\u00adhyphen",
    "ﬁ ligature and ﬀ and Ⅻ and ² and ½",
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ",
    "private use \ue000\uf8ff chars",  # category Co: dropped like control characters
    "unassigned\u0378code point",  # category Cn: kept, so the word becomes [UNK]
    "supercalifragilisticexpialidocious",
    "a" * 100,
    "b" * 101,
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "!!!???...,,,;;;:::",
    "... --- ...",
    "«guillemets» „Anführungszeichen“ ‘curly’ “quotes” — en–dash … ellipsis",
    "ALL CAPS SENTENCE FOR LOWERCASING",
    "x",
    "[CLS] [SEP] [MASK] [PAD] [UNK] literal special tokens",
    "##not a continuation",
    "line1\u2028line2\u2029para",
]

# Word pools for the seeded generator.
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there one all we their can has more will would about if been out "
    "system model engine server request batch latency throughput memory cache token vector query "
    "network river mountain garden kitchen window teacher student doctor market city village ocean "
    "quickly slowly carefully happily running jumping reading writing building breaking computing "
    "blue green bright dark ancient modern simple complex heterogeneous asynchronous deterministic "
    "internationalization electroencephalography antidisestablishmentarianism transformer embedding"
).split()
_CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面"
_PUNCT = [",", ".", ";", ":", "!", "?", " -", " (", ")"]


def _random_sentence(rng, n_words):
    words = []
    for _ in range(n_words):
        r = rng.random()
        if r < 0.80:
            w = rng.choice(_WORDS)
        elif r < 0.88:
            w = str(rng.randint(0, 10 ** rng.randint(1, 6)))
        elif r < 0.95:
            w = "".join(rng.choice(_CJK) for _ in range(rng.randint(1, 4)))
        else:
            w = rng.choice(_WORDS).capitalize()
        if rng.random() < 0.12:
            w += rng.choice(_PUNCT)
        words.append(w)
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


def _long_texts(rng):
    """Texts that tokenize to well over 256 tokens (truncation must be exercised)."""
    out = []
    paras = LONG_EN
    out.append(("long_en", " ".join(paras)))
    out.append(("long_en", " ".join(reversed(paras))))
    out.append(("long_en", " ".join(paras[i % len(paras)] for i in range(12))))
    out.append(("long_zh", "".join(CHINESE) * 2))
    out.append(("long_zh", "".join(CHINESE[5:] + CHINESE[:5]) * 3))
    out.append(("long_ja", "".join(JAPANESE) * 2))
    out.append(("long_mixed", " ".join(MIXED) * 3))
    out.append(("long_code", "\n".join(CODE) * 2))
    out.append(("long_numbers", " ".join(str(i * 37 % 1009) for i in range(400))))
    out.append(("long_emoji", " ".join(EMOJI) * 4))
    out.append(("long_accents", " ".join(ACCENTS) * 3))
    out.append(("long_other", " ".join(OTHER_SCRIPTS) * 3))
    out.append(("long_chars", " ".join("abcdefghijklmnopqrstuvwxyz") * 20))
    out.append(("long_punct", "!?.,;:" * 80))
    out.append(("long_unk", " ".join(["\U0001f916"] * 300)))  # each one [UNK]
    out.append(("long_cjk_chars", "".join(_CJK[i % len(_CJK)] for i in range(600))))
    for n in (200, 260, 320, 400, 500, 700, 900, 1200):
        out.append(("long_random", _random_sentence(rng, n)))
    return out


def _exact_length(rng, tok_count, target):
    """Grows a random English text word by word until it tokenizes to exactly `target` ids
    (specials included). Words that would overshoot are skipped; short filler words are tried
    last so the target is always reachable."""
    words = []
    fillers = ["a", "the", "of", "and", "to", "in", "is"]
    while True:
        n = tok_count(" ".join(words)) if words else 2
        if n == target:
            return " ".join(words)
        w = rng.choice(_WORDS)
        if tok_count(" ".join(words + [w])) > target:
            w = rng.choice(fillers)
        words.append(w)


def _straddle(rng, tok_count, target, long_word, keep=2):
    """A text whose tokenization puts `long_word` (more than `keep` word pieces) across the
    truncation boundary: after truncation to `target` ids only its first `keep` pieces remain,
    followed by [SEP]."""
    prefix = _exact_length(rng, tok_count, target - keep)
    if tok_count(long_word) - 2 <= keep:
        raise ValueError("word has too few pieces to straddle the boundary: " + long_word)
    return prefix + " " + long_word + " and some more words after it"


def build(tokenizer, max_seq_length, n_random=40):
    """Returns the deterministic corpus as a list of (category, text)."""

    def tok_count(text):
        return len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

    rng = random.Random(SEED)
    items = []
    for cat, lst in (
        ("short_en", SHORT_EN),
        ("medium_en", MEDIUM_EN),
        ("long_en_para", LONG_EN),
        ("zh", CHINESE),
        ("ja", JAPANESE),
        ("other_script", OTHER_SCRIPTS),
        ("mixed_script", MIXED),
        ("accents", ACCENTS),
        ("emoji_symbols", EMOJI),
        ("code", CODE),
        ("numbers", NUMBERS),
        ("edge", EDGE),
    ):
        items.extend((cat, t) for t in lst)
    for _ in range(n_random):
        items.append(("random", _random_sentence(rng, rng.choice([3, 8, 15, 30, 60, 100]))))
    items.extend(_long_texts(rng))
    L = max_seq_length
    for target in (L, L, L, L, L - 1, L - 1, L + 1, L + 1, L + 2):
        items.append(("exact_limit", _exact_length(rng, tok_count, target)))
    items.append(("straddle_limit", _straddle(rng, tok_count, L, "electroencephalography")))
    items.append(("straddle_limit", _straddle(rng, tok_count, L, "antidisestablishmentarianism", keep=3)))
    return items


def small_subset(items, per_category=3, n_long=8):
    """About 60 items for small models: the first `per_category` of each category, the first
    `n_long` long texts, and every exact-limit / straddling text (deterministic)."""
    seen = {}
    out = []
    n_long_taken = 0
    for cat, text in items:
        if cat in ("exact_limit", "straddle_limit"):
            out.append((cat, text))
        elif cat.startswith("long_") and cat != "long_en_para":
            if n_long_taken < n_long:
                out.append((cat, text))
                n_long_taken += 1
        elif seen.get(cat, 0) < per_category:
            seen[cat] = seen.get(cat, 0) + 1
            out.append((cat, text))
    return out
