#!/bin/bash
# The H200 reports: run on the device machine from the project root, after `source /root/tfenv.sh`
# (../shared/gpu/README.md). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/run_examples.sh examples   # the fused-op build and check, then every example
#   bash reports/h200/run_examples.sh controls   # the *_opdet controls, then --processes and the observer check
#   bash reports/h200/run_examples.sh reproducers  # every reproducer the examples wrote, each in a fresh process
#   bash reports/h200/run_examples.sh bodies     # the loop and branch examples, each with its op-determinism control
# Writes $RESULTS (default $OUT/h200): one report folder per step (--html), <name>.txt (what the terminal showed),
# exits.txt, reproducers.txt; packs it (without the reproducers' .npz inputs) into $OUT/h200-<phase>.tgz, the
# device returning at most 8 files of 16 MiB. PACK=0 keeps it in place for the next phase instead.
set -u
PHASE=${1:-examples}
R=${RESULTS:-${OUT:-/tmp/out}/h200}; mkdir -p "$R"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
FP=auto
if [ "$PHASE" = examples ]; then
  python3 -c "from opbisect.capture import kernels; print(kernels.build(cuda=True))" > "$R/build.txt" 2>&1
  tail -3 "$R/build.txt"
  timeout 120 python3 reports/h200/check_fused_op.py > "$R/check_fused_op.txt" 2>&1; tail -5 "$R/check_fused_op.txt"
fi
grep -q '^PASS' /root/opbisect-check.txt 2>/dev/null || cp "$R/check_fused_op.txt" /root/opbisect-check.txt 2>/dev/null
grep -q '^PASS' /root/opbisect-check.txt || FP=wsum  # never report with a kernel that failed its check
trace() {  # name script [args]
  local name=$1 script=$2; shift 2; local start=$(date +%s)
  timeout 300 python3 -m opbisect trace "$script" --runs 5 --out "$R" --no-progress --html --fingerprint $FP "$@" \
    > "$R/$name.txt" 2>&1
  echo "$name exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"
}
W=/tmp/opbisect_wrappers; mkdir -p $W
if [ "$PHASE" = reproducers ]; then
  for f in "$R"/*/repro/*.py; do
    start=$(date +%s); timeout 120 python3 "$f" > /tmp/repro.out 2>&1; code=$?
    echo "${f#$R/} exit=$code seconds=$(( $(date +%s) - start )): $(tail -1 /tmp/repro.out)" | tee -a "$R/reproducers.txt"
  done
elif [ "$PHASE" = bodies ]; then
  for ex in mixed_precision_fit grad_accumulation bert_like_fit_mixed lstm_embedding; do
    trace "$ex" "examples/$ex.py"
    [ "$ex" = lstm_embedding ] && continue
    bash reports/h200/opdet_wrapper.sh "$ex" "$W" "${ex}_opdet"; trace "${ex}_opdet" "$W/${ex}_opdet.py"
  done
elif [ "$PHASE" = examples ]; then
  for ex in embedding_sgd bert_like bert_like_determinism bert_like_fit scatter_segment_resize conv2d_net; do
    trace "$ex" "examples/$ex.py"
  done
else
  for ex in embedding_sgd scatter_segment_resize conv2d_net bert_like_fit; do
    bash reports/h200/opdet_wrapper.sh "$ex" "$W" "${ex}_opdet"; trace "${ex}_opdet" "$W/${ex}_opdet.py"
  done
  # cuDNN autotuning is per process: the Conv2D step across two processes, with and without op determinism.
  W=$W FP=$FP bash reports/h200/run_processes.sh
  W=$W bash reports/h200/run_observer.sh
fi
if [ "${PACK:-1}" != 0 ]; then
  tar czf "${OUT:-/tmp/out}/h200-$PHASE.tgz" --exclude='*.npz' -C "$(dirname "$R")" "$(basename "$R")" && rm -rf "$R"
fi
