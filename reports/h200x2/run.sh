#!/bin/bash
# Issue 11 on two physical H200s (kind nvidia-h200-x2): written in session 8, NOT RUN YET (only the one-GPU kind was
# lent so far). Run on the device machine from the project root, after `source /root/tfenv.sh`
# (../shared/gpu/README.md). Phases, each under the device's 10-minute call limit:
#   bash reports/h200x2/run.sh ladder    # the BERT-like and Conv2D mirrored steps through the replica ladder:
#                                        # 1 GPU, both GPUs, then both under NCCL_ALGO=Ring and NCCL_NVLS_ENABLE=0
#   bash reports/h200x2/run.sh control   # the BERT-like mirrored step under op determinism (the control)
#   bash reports/h200x2/run.sh capture   # capture overhead of the two-GPU step: instrumented / plain, side by
#                                        # side (goal: at most 1.3x)
# Traces fingerprint with the weighted sum (`--fingerprint wsum`): no time to build the fused kernel on a fresh
# machine. Results in /root/h200x2/<phase>/, packed after every step into $OUT/h200x2-<phase>.tgz.
set -u
PHASE=${1:-ladder}
R=/root/h200x2/$PHASE; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp/out}/h200x2-$PHASE.tgz" --exclude='*.npz' --exclude='record.json' -C /root/h200x2 "$PHASE"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 OPBISECT_BERT=base
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; tail -8 "$R/$name.txt"; pack
}
T=(python3 -m opbisect trace --runs 5 --fingerprint wsum --no-progress --out "$R")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
nvidia-smi topo -m > "$R/topology.txt" 2>&1
if [ "$PHASE" = ladder ]; then
  run bert_like_mirrored 540 "${T[@]}" examples/bert_like_mirrored.py --replicas 1,all
elif [ "$PHASE" = control ]; then
  run bert_like_mirrored_determinism 230 "${T[@]}" examples/bert_like_mirrored_determinism.py
  run conv2d_net_mirrored 330 "${T[@]}" examples/conv2d_net_mirrored.py --replicas 1,all
elif [ "$PHASE" = capture ]; then
  run capture_overhead_mirrored 300 python3 benchmarks/capture_overhead.py \
    --script examples/bert_like_mirrored.py --device gpu --repeats 30 --runs 5
fi
pack
