#!/bin/bash
# Session 12 on one H200: the scatter op's kernels with work lists and stride loops (SumSegments sums only the
# segments of runs spanning chunks, from a list Mark writes; the run kernels stride over a grid sized to the GPU),
# where a patched step's extra time comes from (benchmarks/patch_overhead.py: plain, the graph imported unchanged,
# patched), verify again with its 20 timing steps, and the XLA trace without its pinned pass. Run on the device
# machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md; copy .whl/*.whl into
# .gpu/wheels for pydantic and hypothesis). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session12/run.sh check    # build, session 11's check_scatter.py again, patch tests on the GPU
#   bash reports/h200/session12/run.sh steps    # patch_overhead.py on three steps, verify on five
#   bash reports/h200/session12/run.sh xla      # the XLA BERT-like scale row, verify on the XLA and Adagrad steps
#   bash reports/h200/session12/run.sh again    # after the fast argument flattening and CUB's sizes asked once a
#                                               # call: the patch tests, patch_overhead.py and verify on 4 steps
set -u
SESSION=session12 PHASE=${1:-check}
source reports/h200/lib.sh
if [ "$PHASE" = check ]; then
  run check_scatter 300 python3 reports/h200/session11/check_scatter.py
  run tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py
  overhead scatter_add_table 90
elif [ "$PHASE" = steps ]; then
  overhead bert_like 120
  overhead embedding_sgd 60
  verify scatter_add_table 100
  verify embedding_sgd 70
  verify grad_accumulation 80
  verify embedding_table_sgd 100
  verify bert_like 110
elif [ "$PHASE" = xla ]; then
  OPBISECT_BERT=base run scale_bert_like_fit_xla 330 python3 benchmarks/scale.py --script examples/bert_like_fit.py \
    --device gpu
  verify bert_like_fit 130
  verify embedding_table_adagrad 120
elif [ "$PHASE" = again ]; then
  run tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py
  for e in scatter_add_table embedding_sgd embedding_table_sgd grad_accumulation; do overhead $e 60; done
  verify scatter_add_table 100
  verify embedding_sgd 70
  verify embedding_table_sgd 100
  verify grad_accumulation 80
fi
pack
