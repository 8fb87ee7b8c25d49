#!/bin/bash
# Session 7 on one H200: the scatter and segment-sum patches rebuilt on TensorFlow's sort-based kernels
# (opbisect/patches/reductions.py), measured again. Run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session7/run.sh sparse    # the kernels checked on the GPU (check_sort_kernels.py), then
#                                               # opbisect verify on the four steps with large-table scatters
#   bash reports/h200/session7/run.sh sparse2   # opbisect verify on the other steps with patched scatters or
#                                               # segment sums
#   bash reports/h200/session7/run.sh final     # the scatter steps again, after a change (see the README)
# Each verify is the command of reports/h200/run_verify.sh (--runs 10, the committed CSVs, the switches in fresh
# processes). Results in /root/session7/<phase>/, packed after every step into $OUT/session7-<phase>.tgz.
set -u
PHASE=${1:-sparse}
R=/root/session7/$PHASE; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp/out}/session7-$PHASE.tgz" --exclude='*.npz' --exclude='record.json' -C /root/session7 "$PHASE"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; tail -3 "$R/$name.txt"; pack
}
verify() {  # verify EXAMPLE SECONDS [CSV]
  run "$1-verify" "$2" python3 -m opbisect verify "examples/$1.py" --patch "${3:-reports/h200/$1/sources.csv}" \
    --runs 10 --out "$R" --fingerprint wsum
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
if [ "$PHASE" = sparse ]; then
  run check_sort_kernels 150 python3 reports/h200/session7/check_sort_kernels.py
  verify scatter_add_table 110
  verify embedding_sgd 70
  verify embedding_table_sgd 110
  verify embedding_table_adagrad 130
elif [ "$PHASE" = final ]; then  # after the sizes moved to the host (the last call of the session)
  run check_sort_kernels 150 python3 reports/h200/session7/check_sort_kernels.py
  verify scatter_add_table 110
  verify embedding_table_sgd 110
  verify embedding_sgd 70
  verify grad_accumulation 70
  verify embedding_table_adagrad 130
elif [ "$PHASE" = sparse2 ]; then
  verify grad_accumulation 70
  verify scatter_segment_resize 70
  verify lstm_embedding 100
  verify lm_head_xent 170 reports/h200/lm_head_xent/sources.csv,reports/h200/patched/lm_head_xent/sources.csv
  verify bert_like 100
fi
pack
