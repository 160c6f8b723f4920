#!/usr/bin/env python3
"""The evidence table of docs/MODELS.md: every family's tiny checkpoint x every engine and dtype
that `hetserve verify` finds on this machine -> min / mean cosine to the transformers reference
(tests/golden/tiny_*). f32 and bf16 rows are the raw folder; int8 rows are the folder that
`hetserve quantize` makes (its plan), as a server's int8 lane runs it.

    python3 tools/golden/family_table.py [--hetserve build/hetserve] [--calib FILE]

Prints one line per row, "# family engine dtype min mean", then the Markdown table. Standard
library only (no venv): it runs the binary. Exit status 1 when a verify or quantize failed.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# folder under tests/data -> (model_type, golden name under tests/golden); the same families as
# tests/tiny_families.h
FAMILIES = [
    ("tiny-bert-cls", "bert", "tiny_cls"),
    ("tiny-mpnet", "mpnet", "tiny_mpnet"),
    ("tiny-roberta", "roberta", "tiny_roberta"),
    ("tiny-distilbert", "distilbert", "tiny_distilbert"),
    ("tiny-nomic-bert", "nomic_bert", "tiny_nomic_bert"),
    ("tiny-gte", "new", "tiny_gte"),
    ("tiny-modernbert", "modernbert", "tiny_modernbert"),
    ("tiny-qwen3", "qwen3", "tiny_qwen3"),
]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    return r


def verify_rows(binary, model, golden):
    """(engine, kind, dtype, min, mean, result) for every lane verify ran; skips are left out."""
    r = run([binary, "verify", "--model", model, "--golden", golden])
    rows = []
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 9 and f[8] in ("PASS", "FAIL"):
            rows.append((f[0], f[1], f[2], float(f[4]), float(f[5]), f[8]))
    return r, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hetserve", default=os.path.join(ROOT, "build", "hetserve"))
    ap.add_argument("--calib", help="calibration texts for quantize (default: the built-in set)")
    a = ap.parse_args()
    failed = False
    table = []
    with tempfile.TemporaryDirectory(prefix="hs_family_table_") as tmp:
        for folder, arch, golden_name in FAMILIES:
            model = os.path.join(ROOT, "tests", "data", folder)
            golden = os.path.join(ROOT, "tests", "golden", golden_name + ".json")
            r, rows = verify_rows(a.hetserve, model, golden)
            if r.returncode != 0:
                failed = True
                print("%s: verify failed:\n%s%s" % (folder, r.stdout, r.stderr), file=sys.stderr)
            q = os.path.join(tmp, folder + "-int8")
            cmd = [a.hetserve, "quantize", "--model", model, "--out", q, "--threads", "2"]
            if a.calib:
                cmd += ["--calib", a.calib]
            qr = run(cmd)
            if qr.returncode != 0:
                failed = True
                print("%s: quantize failed:\n%s%s" % (folder, qr.stdout, qr.stderr), file=sys.stderr)
            else:
                r, qrows = verify_rows(a.hetserve, q, golden)
                if r.returncode != 0:
                    failed = True
                    print("%s int8: verify failed:\n%s%s" % (folder, r.stdout, r.stderr),
                          file=sys.stderr)
                rows += [x for x in qrows if x[2] == "int8"]
            for engine, kind, dtype, cmin, cmean, result in rows:
                print("# %s %s %s %.8f %.8f %s" % (arch, kind, dtype, cmin, cmean, result))
                table.append((arch, kind, dtype, cmin, cmean))
    print()
    print("| family | engine | dtype | min cos | mean cos |")
    print("| --- | --- | --- | --- | --- |")
    for arch, kind, dtype, cmin, cmean in table:
        # verify prints 7 decimals: 1.0000000 means within 5e-8 (the conformance suite's
        # "# family lane dtype min mean (1 - min ...)" lines give the f32 digits)
        smin, smean = ("> 0.9999999" if c >= 0.99999995 else "%.6f" % c for c in (cmin, cmean))
        print("| %s | %s | %s | %s | %s |" % (arch, kind, dtype, smin, smean))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
