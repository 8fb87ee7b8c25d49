#!/bin/bash
# From suspect to fix on the H200: run on the device machine from the project root, after `source /root/tfenv.sh`
# (../shared/gpu/README.md). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/run_verify.sh new       # trace the LM-head and large-table examples (replays, reproducers),
#                                             # then re-run every reproducer they wrote, each in a fresh process
#   bash reports/h200/run_verify.sh verify1   # opbisect verify on the examples with GPU sources, from their CSVs
#   bash reports/h200/run_verify.sh verify2
#   bash reports/h200/run_verify.sh again     # LM head: trace --patch with its first CSV, verify with both CSVs;
#                                             # the large tables again (their global switch ran out of memory)
# Results stay in $RESULTS (default /root/h200, kept while the machine is warm) and each phase packs them (without
# the reproducers' .npz inputs) into $OUT/h200-<phase>.tgz, after every step (a cut call still returns it). A committed report's CSV (reports/h200/<name>/) is
# used where there is one, else the CSV the `new` phase wrote.
set -u
PHASE=${1:-new}
R=${RESULTS:-/root/h200}; mkdir -p "$R"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
if [ "$PHASE" = new ]; then
  python3 -c "from opbisect.capture import kernels; print(kernels.build(cuda=True))" > "$R/build.txt" 2>&1
  timeout 120 python3 reports/h200/check_fused_op.py > /root/opbisect-check.txt 2>&1; tail -2 /root/opbisect-check.txt
fi
FP=auto; grep -q '^PASS' /root/opbisect-check.txt 2>/dev/null || FP=wsum  # never with a kernel that failed its check
pack() { tar czf "${OUT:-/tmp/out}/h200-$PHASE.tgz" --exclude='*.npz' -C "$(dirname "$R")" "$(basename "$R")"; }
csv_of() { [ -f "reports/h200/$1/sources.csv" ] && echo "reports/h200/$1/sources.csv" || echo "$R/$1/sources.csv"; }
if [ "$PHASE" = new ]; then
  for ex in lm_head_xent embedding_table_sgd embedding_table_adagrad scatter_add_table; do
    start=$(date +%s)
    timeout 200 python3 -m opbisect trace "examples/$ex.py" --runs 5 --out "$R" --no-progress --fingerprint $FP \
      > "$R/$ex.txt" 2>&1
    echo "$ex exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits_new.txt"; pack
  done
  for f in "$R"/*/repro/*.py; do
    start=$(date +%s); timeout 60 python3 "$f" > /tmp/repro.out 2>&1; code=$?
    echo "${f#$R/} exit=$code seconds=$(( $(date +%s) - start )): $(tail -1 /tmp/repro.out)" | tee -a "$R/reproducers_new.txt"
  done
elif [ "$PHASE" = again ]; then
  FP=wsum  # a fresh machine: no time to build the fused kernel; the weighted sum is what XLA steps use
  start=$(date +%s)
  timeout 200 python3 -m opbisect trace examples/lm_head_xent.py --patch reports/h200/lm_head_xent/sources.csv \
    --runs 5 --out "$R/patched" --no-progress --fingerprint $FP > "$R/lm_head_xent-patched.txt" 2>&1 # committed as lm_head_xent-round2.txt and lm_head_xent-round2/
  echo "lm_head_xent trace --patch exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits_again.txt"; pack
  for ex in lm_head_xent scatter_add_table embedding_table_sgd embedding_table_adagrad; do
    csv=$(csv_of $ex); [ $ex = lm_head_xent ] && csv="$csv,$R/patched/lm_head_xent/sources.csv"
    start=$(date +%s)
    timeout 200 python3 -m opbisect verify "examples/$ex.py" --patch "$csv" --runs 10 --out "$R" \
      --fingerprint $FP > "$R/$ex-verify.txt" 2>&1
    echo "$ex verify exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits_again.txt"
    tail -4 "$R/$ex-verify.txt" | head -2; pack
  done
else
  case $PHASE in
    verify1) list="embedding_sgd scatter_segment_resize conv2d_net bert_like bert_like_fit lm_head_xent" ;;
    *) list="embedding_table_sgd embedding_table_adagrad scatter_add_table grad_accumulation mixed_precision_fit bert_like_fit_mixed lstm_embedding" ;;
  esac
  for ex in $list; do
    start=$(date +%s)
    timeout 240 python3 -m opbisect verify "examples/$ex.py" --patch "$(csv_of $ex)" --runs 10 --out "$R" \
      --fingerprint $FP > "$R/$ex-verify.txt" 2>&1
    echo "$ex verify exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits_verify.txt"
    tail -4 "$R/$ex-verify.txt" | head -2; pack
  done
fi
pack
