#!/bin/bash
# The GPU rows of benchmarks/README.md: run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md). Writes $OUT/bench/.
#   bash benchmarks/run_h200.sh [throughput|capture|kernels|scale|scale-xla|all]   (one phase per call keeps each under 10 min)
set -u
PHASE=${1:-all}
B=${OUT:-/tmp/out}/bench; mkdir -p "$B"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
# Each process takes only the GPU memory it uses: the debugger baselines run beside the parent process.
export TF_FORCE_GPU_ALLOW_GROWTH=true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$B/gpu.txt" 2>&1
if [ "$PHASE" = throughput ] || [ "$PHASE" = all ]; then
  timeout 200 python3 benchmarks/fingerprint_throughput.py --device gpu --total-mb 2048 --repeats 20 \
    --json "$B/throughput.json" > "$B/throughput.txt" 2>&1; tail -16 "$B/throughput.txt"
fi
if [ "$PHASE" = capture ] || [ "$PHASE" = all ]; then
  # FULL_TENSOR dumps 6.7 GB a step to disk: one warm-up and 2 timed steps (the machine has 64 GB of disk).
  OPBISECT_BERT=base timeout 540 python3 benchmarks/capture_overhead.py --device gpu --repeats 30 --runs 5 \
    --fingerprints ${FINGERPRINTS:-fused} --debugger NO_TENSOR,FULL_TENSOR --debugger-repeats 2 \
    --debugger-timeout 240 --json "$B/capture_overhead.json" > "$B/capture_overhead.txt" 2>&1
  tail -12 "$B/capture_overhead.txt"; df -h /tmp | tail -1
fi
if [ "$PHASE" = kernels ]; then
  # opbisect's own GPU kernels against their CPU kernels, bit for bit, then timed op alone (what the patches rest on)
  for check in check_fused_op check_combine check_scatter; do
    timeout 300 python3 "benchmarks/$check.py" > "$B/$check.txt" 2>&1; echo "$check exit=$?"; tail -4 "$B/$check.txt"
  done
fi
if [ "$PHASE" = scale ]; then
  # whole `opbisect trace` against the plain process, eager and under XLA (benchmarks/README.md, "Scale")
  mkdir -p "$B/scale"
  OPBISECT_BERT=base timeout 280 python3 benchmarks/scale.py --script examples/bert_like.py --device gpu > "$B/scale/bert_like_base.txt" 2>&1
  timeout 280 python3 benchmarks/scale.py --script examples/resnet50.py --device gpu > "$B/scale/resnet50.txt" 2>&1
  tail -3 "$B"/scale/*.txt
fi
if [ "$PHASE" = scale-xla ]; then
  mkdir -p "$B/scale"
  OPBISECT_BERT=base timeout 280 python3 benchmarks/scale.py --script examples/bert_like_fit.py --device gpu > "$B/scale/bert_like_fit_base_xla.txt" 2>&1
  OPBISECT_XLA=1 timeout 280 python3 benchmarks/scale.py --script examples/resnet50.py --device gpu > "$B/scale/resnet50_xla.txt" 2>&1
  tail -3 "$B"/scale/*.txt
fi
