#!/usr/bin/env bash
# Peak memory (max RSS, /usr/bin/time -v) and token-cache size of a short run on an N-byte text
# file (issue 50, item 4: peak <= 2 N + the model). The file is SOURCE repeated to SIZE_MB; a
# run on one copy of SOURCE gives "the model" (the same run's RSS without the data). Each run
# gets a fresh NORMEXP_CACHE, so the first run builds the cache and the second hits it.
#   scripts/measure_data_memory.sh SOURCE [SIZE_MB=300] [TOKENIZER=byte]
set -euo pipefail
SOURCE=${1:?give a text file to repeat, e.g. a copy of tinyshakespeare.txt}
SIZE_MB=${2:-300}
TOKENIZER=${3:-byte}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
BIG="$WORK/big.txt"
python - "$SOURCE" "$BIG" "$SIZE_MB" <<'EOF'
import sys
src, dst, mb = open(sys.argv[1], "rb").read(), sys.argv[2], int(sys.argv[3])
with open(dst, "wb") as f:
    for _ in range(-(-mb * 10**6 // len(src))):
        f.write(src)
    f.truncate(mb * 10**6)  # exactly SIZE_MB MB (a cut mid-character is not UTF-8: keep ASCII sources)
EOF
SETTINGS=(tokenizer="$TOKENIZER" layers=1 d_model=32 heads=2 seq_len=64 batch_size=4 steps=2 warmup=0
          eval_batches=1 log.progress=off)
run() {  # NAME FILE CACHE
    local out="$WORK/$1.time"
    NORMEXP_CACHE="$3" /usr/bin/time -v normexp train data=text "data.files=[$2]" "${SETTINGS[@]}" \
        "hydra.run.dir=$WORK/run-$1" >"$WORK/$1.log" 2>"$out" || { echo "$1: rc $?"; tail -3 "$out"; }
    local rss elapsed
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out")
    elapsed=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$out")
    printf '%-12s peak RSS %7.1f MB  wall %s  token cache %s\n' "$1" "$(echo "$rss / 1000" | bc -l)" "$elapsed" \
        "$(du -sh "$3/tokens" 2>/dev/null | cut -f1)"
}
echo "normexp $(git -C "$(dirname "$0")" rev-parse --short HEAD) tokenizer=$TOKENIZER file $(stat -c %s "$BIG") bytes"
run model "$SOURCE" "$WORK/cache-small"
run build "$BIG" "$WORK/cache"
run cached "$BIG" "$WORK/cache"
