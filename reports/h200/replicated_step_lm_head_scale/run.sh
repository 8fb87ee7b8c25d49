#!/bin/bash
# Session 6 on one H200 (the two-GPU machine was not lent): run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session6/run.sh mirrored  # the mirrored examples, two logical GPUs on the one H200
#   bash reports/h200/session6/run.sh rest      # the LM head traced with its first CSV patched, and its
#                                               # reproducers re-run in fresh processes
#   bash reports/h200/session6/run.sh scale     # capture overhead of the mirrored step; scale rows: BERT-like
#                                               # (base) and ResNet50, opbisect vs plain
# Every trace fingerprints with the weighted sum in TensorFlow ops (`--fingerprint wsum`): no time to build the
# fused kernel on a fresh machine. Results in /root/session6/<phase>/, packed after every step into
# $OUT/session6-<phase>.tgz (a cut call still returns what ran; reproducers' .npz inputs and large records left out).
set -u
PHASE=${1:-mirrored}
R=/root/session6/$PHASE; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp/out}/session6-$PHASE.tgz" --exclude='*.npz' --exclude='record.json' -C /root/session6 "$PHASE"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; pack
}
T=(python3 -m opbisect trace --runs 5 --fingerprint wsum --no-progress --out "$R")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
if [ "$PHASE" = mirrored ]; then
  export OPBISECT_BERT=base
  run bert_like_mirrored 230 "${T[@]}" examples/bert_like_mirrored.py
  run bert_like_mirrored_determinism 200 "${T[@]}" examples/bert_like_mirrored_determinism.py
  run conv2d_net_mirrored 120 "${T[@]}" examples/conv2d_net_mirrored.py
elif [ "$PHASE" = rest ]; then
  export OPBISECT_BERT=base
  run lm_head_xent-patched 200 python3 -m opbisect trace examples/lm_head_xent.py \
    --patch reports/h200/lm_head_xent/sources.csv --runs 5 --fingerprint wsum --no-progress --out "$R/patched"
  for f in "$R"/patched/*/repro/*.py; do
    [ -f "$f" ] || continue
    start=$(date +%s); timeout 60 python3 "$f" > /tmp/repro.out 2>&1; code=$?
    echo "${f#$R/} exit=$code seconds=$(( $(date +%s) - start )): $(tail -1 /tmp/repro.out)" | tee -a "$R/reproducers.txt"
  done
elif [ "$PHASE" = scale ]; then
  run capture_overhead_mirrored 190 env OPBISECT_BERT=base python3 benchmarks/capture_overhead.py \
    --script examples/bert_like_mirrored.py --device gpu --repeats 30 --runs 5
  run scale_bert_base 150 env OPBISECT_BERT=base python3 benchmarks/scale.py --script examples/bert_like.py --device gpu
  run scale_resnet50 230 python3 benchmarks/scale.py --script examples/resnet50.py --device gpu
fi
pack
