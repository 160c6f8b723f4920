# Black-box tests of `hetserve tokenize --tokenizer FILE`: a bare tokenizer.json (no model) gives
# the ids, type ids, special mask and byte offsets HF gives (the committed goldens of
# tests/data/tokenizer_json/), pairs included; a malformed or unsupported file is a clear error
# naming the JSON path.
import json
import os
import subprocess

from hetserve_fixture import BINARY, ROOT

DATA = os.path.join(ROOT, "tests", "data", "tokenizer_json")


def tokenize(*args):
    r = subprocess.run([BINARY, "tokenize"] + list(args), capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout, r.stderr


def golden_case(name, want_pair):
    doc = json.load(open(os.path.join(DATA, name + ".golden.json"), encoding="utf-8"))
    for c in doc["cases"]:
        if c["add"] and c.get("trunc") is None and "ids" in c and \
                (c.get("pair") is not None) == want_pair:
            t = doc["texts"][c["text"]]
            p = doc["texts"][c["pair"]] if want_pair else None
            if t and "\0" not in t and (p is None or (p and "\0" not in p)) and not t.startswith("-"):
                return t, p, c


def test_bare_tokenizer_json_matches_hf():
    for name in ("bert_uncased", "roberta", "qwen2", "llama", "xlmr", "t5_unigram"):
        for want_pair in (False, True):
            text, pair, case = golden_case(name, want_pair)
            args = ["--tokenizer", os.path.join(DATA, name + ".tokenizer.json")]
            if pair is not None:
                args += ["--pair", pair]
            rc, out, err = tokenize(*(args + [text]))
            assert rc == 0, err
            got = json.loads(out)[0]
            assert got["ids"] == case["ids"], (name, text)
            assert got["type_ids"] == case["type_ids"]
            assert got["special"] == case["special"]
            assert len(got["offsets"]) == len(case["offsets"])


def test_no_special_and_errors(tmp_path):
    f = os.path.join(DATA, "bert_uncased.tokenizer.json")
    rc, out, _ = tokenize("--tokenizer", f, "--no-special", "hello")
    assert rc == 0 and all(s == 0 for s in json.loads(out)[0]["special"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}},'
                   ' "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Nope"}]}}')
    rc, _, err = tokenize("--tokenizer", str(bad), "x")
    assert rc != 0
    assert ".pre_tokenizer.pretokenizers[0].type: pre-tokenizer 'Nope' is not supported" in err
    assert "Metaspace" in err  # the supported kinds are listed
    bad.write_text("{\"model\": ")
    rc, _, err = tokenize("--tokenizer", str(bad), "x")
    assert rc != 0 and "line 1" in err
    rc, _, err = tokenize("--tokenizer", str(tmp_path / "missing.json"), "x")
    assert rc != 0 and "cannot open" in err
