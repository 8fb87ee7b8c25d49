#!/bin/bash
# The channels-first bias gradient's sweep rows (OpbisectChannelSum) beside BERT-base dense's, profiled: for a lease
# whose background run is stopped first (bash reports/h200/background.sh stop). Results under $OUT/nchw.
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache}
mkdir -p "$OUT/nchw"
python3 benchmarks/patch_sweep.py --device gpu --ops BiasAddGrad --profile-over 1.05 \
  --shapes 'ResNet stage 1, NCHW;BERT-base dense' --json "$OUT/nchw/sweep_nchw.json" > "$OUT/nchw/sweep_nchw.txt" 2>&1
tail -12 "$OUT/nchw/sweep_nchw.txt"
