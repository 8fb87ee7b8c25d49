#!/bin/bash
# The H200 reports: run on the device machine from the project root, after `source /root/tfenv.sh`
# (../shared/gpu/README.md). Writes $OUT/h200/: one CSV, one summary (.txt) per step, exits.txt.
set -u
R=${OUT:-/tmp/out}/h200; mkdir -p "$R"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
python3 -c "from opbisect import kernels; print(kernels.build(cuda=True))" > "$R/build.txt" 2>&1; tail -3 "$R/build.txt"
timeout 120 python3 reports/h200/check_fused_op.py > "$R/check_fused_op.txt" 2>&1; tail -5 "$R/check_fused_op.txt"
FP=auto; grep -q '^PASS' "$R/check_fused_op.txt" || FP=wsum  # never report with a kernel that failed its check
trace() {  # name script [args]
  local name=$1 script=$2; shift 2; local start=$(date +%s)
  timeout 300 python3 -m opbisect trace "$script" --runs 5 --out "$R" --no-progress --fingerprint $FP "$@" \
    > "$R/$name.txt" 2>&1
  echo "$name exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"
}
W=/tmp/opbisect_wrappers; mkdir -p $W
determinism() {  # an example wrapped in enable_op_determinism, as $W/<name>_opdet.py
  bash reports/h200/opdet_wrapper.sh "$1" "$W" "${1}_opdet"
}
for ex in embedding_sgd bert_like bert_like_determinism bert_like_fit scatter_segment_resize conv2d_net; do
  trace "$ex" "examples/$ex.py"
done
for ex in embedding_sgd scatter_segment_resize conv2d_net bert_like_fit; do
  determinism "$ex"; trace "${ex}_opdet" "$W/${ex}_opdet.py"
done
# cuDNN autotuning is per process: the Conv2D step across two processes, with and without op determinism.
W=$W FP=$FP bash reports/h200/run_processes.sh
