#!/bin/bash
# Session 10 on one H200: opbisect's combine op (opbisect/kernels/combine.h) in the segment-sum and scatter
# patches. Run on the device machine from the project root, after `source /root/tfenv.sh`
# (../shared/gpu/README.md; the bundle's wheels must include pydantic and hypothesis: copy .whl/*.whl into
# .gpu/wheels). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session10/run.sh check     # build the op library, check_combine.py, then the patch tests
#                                                # on the GPU (the scatter forms a CPU cannot run)
#   bash reports/h200/session10/run.sh verify1   # opbisect verify on the large-table and sparse steps
#   bash reports/h200/session10/run.sh verify2   # the rest of the steps with segment sums or scatters
# Each verify: --runs 10, the committed CSVs, the global and family switches in fresh processes, no CPU reference
# (session 8 measured it; here the cost is the question). Results in /root/session10/<phase>/, packed after every
# step into $OUT/session10-<phase>.tgz.
set -u
PHASE=${1:-check}
R=/root/session10/$PHASE; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp/out}/session10-$PHASE.tgz" --exclude='*.npz' --exclude='record.json' -C /root/session10 "$PHASE"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; tail -4 "$R/$name.txt"; pack
}
verify() {  # verify EXAMPLE SECONDS [CSV]
  run "$1-verify" "$2" python3 -m opbisect verify "examples/$1.py" --patch "${3:-reports/h200/$1/sources.csv}" \
    --runs 10 --out "$R" --fingerprint wsum --cpu-reference off
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
if [ "$PHASE" = check ]; then
  run check_combine 240 python3 reports/h200/session10/check_combine.py
  run tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py tests/test_trace_capture.py -k "combine or patch or fused or scatter or segment"
elif [ "$PHASE" = verify1 ]; then
  verify scatter_add_table 100
  verify embedding_table_sgd 100
  verify embedding_sgd 70
  verify embedding_table_adagrad 120
  verify grad_accumulation 80
elif [ "$PHASE" = verify2 ]; then
  verify scatter_segment_resize 80
  verify lstm_embedding 90
  verify mixed_precision_fit 100
  verify lm_head_xent 170 reports/h200/lm_head_xent/sources.csv,reports/h200/patched/lm_head_xent/sources.csv
fi
pack
