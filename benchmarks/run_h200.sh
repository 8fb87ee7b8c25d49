#!/bin/bash
# The GPU rows of benchmarks/README.md: run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md). Writes $OUT/bench/.
set -u
B=${OUT:-/tmp/out}/bench; mkdir -p "$B"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
# Each process takes only the GPU memory it uses: the debugger baselines run beside the parent process.
export TF_FORCE_GPU_ALLOW_GROWTH=true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$B/gpu.txt" 2>&1
timeout 200 python3 benchmarks/fingerprint_throughput.py --device gpu --total-mb 2048 --repeats 20 \
  --json "$B/throughput.json" > "$B/throughput.txt" 2>&1; tail -16 "$B/throughput.txt"
OPBISECT_BERT=base timeout 400 python3 benchmarks/capture_overhead.py --device gpu --repeats 30 --runs 5 \
  --fingerprints ${FINGERPRINTS:-fused} --debugger NO_TENSOR,FULL_TENSOR --debugger-repeats 2 \
  --json "$B/capture_overhead.json" > "$B/capture_overhead.txt" 2>&1; tail -9 "$B/capture_overhead.txt"
