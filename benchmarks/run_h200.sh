#!/bin/bash
# The GPU rows of benchmarks/README.md: run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md). Writes $OUT/bench/.
#   bash benchmarks/run_h200.sh [throughput|capture|all]   (one phase per call keeps each under 10 minutes)
set -u
PHASE=${1:-all}
B=${OUT:-/tmp/out}/bench; mkdir -p "$B"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
# Each process takes only the GPU memory it uses: the debugger baselines run beside the parent process.
export TF_FORCE_GPU_ALLOW_GROWTH=true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$B/gpu.txt" 2>&1
if [ "$PHASE" != capture ]; then
  timeout 200 python3 benchmarks/fingerprint_throughput.py --device gpu --total-mb 2048 --repeats 20 \
    --json "$B/throughput.json" > "$B/throughput.txt" 2>&1; tail -16 "$B/throughput.txt"
fi
if [ "$PHASE" != throughput ]; then
  # FULL_TENSOR dumps 6.7 GB a step to disk: one warm-up and 2 timed steps (the machine has 64 GB of disk).
  OPBISECT_BERT=base timeout 540 python3 benchmarks/capture_overhead.py --device gpu --repeats 30 --runs 5 \
    --fingerprints ${FINGERPRINTS:-fused} --debugger NO_TENSOR,FULL_TENSOR --debugger-repeats 2 \
    --debugger-timeout 240 --json "$B/capture_overhead.json" > "$B/capture_overhead.txt" 2>&1
  tail -12 "$B/capture_overhead.txt"; df -h /tmp | tail -1
fi
