#!/usr/bin/env bash
# make bench-tokenizer: single-thread tokenizer throughput, hetserve's tokenizer.json pipeline
# (bench_tokenizer) against HF `tokenizers` encode_batch with one thread (bench/tok_bench.py), on
# the single texts of each golden corpus of tests/data/tokenizer_json/, for WordPiece
# (all-MiniLM-L6-v2's file, also through its vocab.txt, and bert_uncased), byte-level BPE
# (roberta, qwen2), SentencePiece BPE (llama) and Unigram (xlmr). Prints texts/s and the ratio;
# gates nothing.
#
#   bench/tokenizer.sh [BUILD_DIR]   env: SECONDS_EACH (2), PY (python with `tokenizers`)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
S=${SECONDS_EACH:-2}
PY=${PY:-python3}
D=tests/data/tokenizer_json
printf '%-14s %-10s %12s %12s %7s\n' tokenizer model hetserve HF ratio
for n in minilm bert_uncased roberta qwen2 llama xlmr; do
  t=$D/$n.tokenizer.json
  extra=()
  if [ "$n" = minilm ]; then
    t=models/all-MiniLM-L6-v2/tokenizer.json
    [ -f "$t" ] || continue
    extra=(--vocab models/all-MiniLM-L6-v2/vocab.txt)
  fi
  out=$("$BUILD/bench_tokenizer" "$t" "$D/$n.golden.json" --seconds "$S" "${extra[@]}")
  ours=$(echo "$out" | sed -n 's/^tokenizer.json .*: \([0-9]*\) texts\/s.*/\1/p')
  hf=$(RAYON_NUM_THREADS=1 "$PY" bench/tok_bench.py "$t" "$D/$n.golden.json" "$S" 2>/dev/null |
       sed -n 's/.*: \([0-9]*\) texts\/s.*/\1/p' || true)
  model=$(sed -n 's/.*"model":{"type":"\([A-Za-z]*\)".*/\1/p' "$t" | head -1)
  [ -n "$model" ] || model=$(grep -o '"type": *"\(WordPiece\|BPE\|Unigram\)"' "$t" | tail -1 | sed 's/.*"\([A-Za-z]*\)"$/\1/')
  ratio=-
  [ -n "$hf" ] && ratio=$(awk -v a="$ours" -v b="$hf" 'BEGIN { printf "%.2fx", a / b }')
  printf '%-14s %-10s %12s %12s %7s\n' "$n" "$model" "$ours" "${hf:--}" "$ratio"
  legacy=$(echo "$out" | sed -n 's/^vocab.txt .*: \([0-9]*\) texts\/s.*/\1/p')
  [ -n "$legacy" ] && printf '%-14s %-10s %12s\n' "$n(vocab.txt)" WordPiece "$legacy"
done
