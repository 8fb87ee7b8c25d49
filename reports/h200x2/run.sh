#!/bin/bash
# Issue 11 on two physical H200s (kind nvidia-h200-x2): written in session 8; session 9 ran `short` (README.md says
# what came of it; `ladder` and `capture` are still to run). Run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md). The GPU image has no pydantic, which reading a ladder rung's
# record needs: here, `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux2014_x86_64 -d .whl pydantic pydantic_core annotated_types typing_inspection` (the versions the venv
# has); there, carry `.whl` and `pip install --no-index --no-deps --target /tmp/site .whl/*.whl` onto PYTHONPATH.
# Phases, each under the device's 10-minute call limit:
#   bash reports/h200x2/run.sh ladder    # the BERT-like and Conv2D mirrored steps through the replica ladder:
#                                        # 1 GPU, both GPUs, then both under NCCL_ALGO=Ring and NCCL_NVLS_ENABLE=0
#   bash reports/h200x2/run.sh control   # the BERT-like mirrored step under op determinism (the control)
#   bash reports/h200x2/run.sh capture   # capture overhead of the two-GPU step: instrumented / plain, side by
#                                        # side (goal: at most 1.3x)
#   bash reports/h200x2/run.sh short     # what a short lease allows, in one call: the three traces above at the
#                                        # small BERT size side by side (GPU memory grown on demand so they can
#                                        # share the GPUs), then the base-size capture overhead alone
# Traces fingerprint with the weighted sum (`--fingerprint wsum`): no time to build the fused kernel on a fresh
# machine. Results in /root/h200x2/<phase>/, packed after every step into $OUT/h200x2-<phase>.tgz.
set -u
PHASE=${1:-ladder}
R=/root/h200x2/$PHASE; mkdir -p "$R"
pack() {  # written aside, then renamed: traces running side by side each pack when they end
  local tmp; tmp=$(mktemp /tmp/pack.XXXX)
  tar czf "$tmp" --exclude='*.npz' --exclude='record.json' -C /root/h200x2 "$PHASE" && mv "$tmp" "${OUT:-/tmp/out}/h200x2-$PHASE.tgz"
}
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
elif [ "$PHASE" = short ]; then
  export TF_FORCE_GPU_ALLOW_GROWTH=true  # three traces share the two GPUs: none takes all their memory
  OPBISECT_BERT=small run bert_like_mirrored 170 "${T[@]}" examples/bert_like_mirrored.py --replicas 1,all &
  OPBISECT_BERT=small run bert_like_mirrored_determinism 170 "${T[@]}" examples/bert_like_mirrored_determinism.py &
  run conv2d_net_mirrored 170 "${T[@]}" examples/conv2d_net_mirrored.py --replicas 1,all &
  wait
  pkill -f "opbisect trace"  # a ladder's rungs outlive their parent when its timeout kills it
  unset TF_FORCE_GPU_ALLOW_GROWTH
  run capture_overhead_mirrored 170 python3 benchmarks/capture_overhead.py \
    --script examples/bert_like_mirrored.py --device gpu --repeats 20 --runs 2
elif [ "$PHASE" = capture ]; then
  run capture_overhead_mirrored 300 python3 benchmarks/capture_overhead.py \
    --script examples/bert_like_mirrored.py --device gpu --repeats 30 --runs 5
fi
pack
