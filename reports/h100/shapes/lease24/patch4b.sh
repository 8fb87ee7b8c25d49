#!/bin/bash
# lease24 by hand, after patch4.sh: verify with 100 runs in all (400 ran past its 200 s), then the two fresh probes
# one after the other (patch4.sh ran them at once: each autotunes by timing on a GPU the other loads)
cd "$(dirname "$0")/../../../.." || exit 1
P=reports/h100/shapes/lease24/patch4.csv R=/root/shapes/lease24/patch4b; mkdir -p $R
export OPBISECT_BERT=base XLA_FLAGS=--xla_gpu_experimental_enable_fusion_autotuner=false TF_CPP_MIN_LOG_LEVEL=2
[ -z "$SKIP_VERIFY" ] && timeout 220 python3 -m opbisect verify examples/bert_like_fit_mixed.py --patch $P --runs 10 --timing-runs 10 \
  --no-switches --cpu-reference off --fingerprint wsum --confirm-runs 100 --out $R/verify > $R/verify.txt 2>&1
[ -z "$SKIP_VERIFY" ] && echo "verify exit=$?" >> $R/exits.txt
for n in a b; do
  timeout 100 python3 -m opbisect trace --patch $P --steps 100 --probe $R/p4_$n.json \
    --no-fresh-check --no-progress --out $R/p4_$n examples/bert_like_fit_mixed.py > $R/p4_$n.txt 2>&1
  echo "p4_$n exit=$?" >> $R/exits.txt
done
python3 -c 'import sys; from opbisect.record import store; from opbisect.execute.digest import first_apart
a, b = ([p.initial, *p.after] for p in map(store.load_probe, sys.argv[1:])); print(len(b), "steps; apart:", first_apart(a, b))' \
  $R/p4_a.json $R/p4_b.json > $R/apart.txt 2>&1
tar czf /root/p4.tgz --exclude='*.npz' --exclude=record.json -C /root/shapes/lease24 patch4 patch4b
