#!/bin/bash
# lease24 by hand: the patch with Adam's two other segment sums (xla_census --atomics found their float atomics
# in the patched step), under the fusion switch: verify 10 runs on to 400, then two fresh 100-step probes at once
cd "$(dirname "$0")/../../../.." || exit 1
P=reports/h100/shapes/lease24/patch4.csv R=/root/shapes/lease24/patch4; mkdir -p $R
export OPBISECT_BERT=base XLA_FLAGS=--xla_gpu_experimental_enable_fusion_autotuner=false TF_CPP_MIN_LOG_LEVEL=2
timeout 200 python3 -m opbisect verify examples/bert_like_fit_mixed.py --patch $P --runs 10 --timing-runs 10 \
  --no-switches --cpu-reference off --fingerprint wsum --confirm-runs 400 --out $R/verify > $R/verify.txt 2>&1
echo "verify exit=$?" >> $R/exits.txt
for n in a b; do
  TF_FORCE_GPU_ALLOW_GROWTH=true timeout 200 python3 -m opbisect trace --patch $P --steps 100 --probe $R/p4_$n.json \
    --no-fresh-check --no-progress --out $R/p4_$n examples/bert_like_fit_mixed.py > $R/p4_$n.txt 2>&1 &
done
wait
python3 -c 'import sys; from opbisect.record import store; from opbisect.execute.digest import first_apart
a, b = ([p.initial, *p.after] for p in map(store.load_probe, sys.argv[1:])); print(len(b), "steps; apart:", first_apart(a, b))' \
  $R/p4_a.json $R/p4_b.json > $R/apart.txt 2>&1
tar czf /root/p4.tgz --exclude='*.npz' --exclude=record.json -C /root/shapes/lease24 patch4
