#!/bin/bash
# Session 11 on one H200: the scatter patch as one op, `OpbisectScatterCombine` (opbisect/kernels/combine.h), which
# adds each index's combined sum into the variable in place. Run on the device machine from the project root, after
# `source /root/tfenv.sh` (../shared/gpu/README.md; copy .whl/*.whl into .gpu/wheels for pydantic and hypothesis).
# Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session11/run.sh check     # build the op library, check_scatter.py, the patch tests on the GPU
#   bash reports/h200/session11/run.sh verify1   # opbisect verify on the steps with a variable's scatter
#   bash reports/h200/session11/run.sh verify2   # the other steps with scatters, and the BERT-like steps
#   bash reports/h200/session11/run.sh round2    # the kernels' second version: check_scatter.py, four steps again
# Each verify: --runs 10, the committed CSVs, the global and family switches in fresh processes, no CPU reference.
set -u
SESSION=session11 PHASE=${1:-check}
source reports/h200/lib.sh
if [ "$PHASE" = check ]; then
  run check_scatter 300 python3 reports/h200/session11/check_scatter.py
  run tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py
elif [ "$PHASE" = round2 ]; then  # after the kernels' second version: the check again, the four steps above 1.0x
  run check_scatter 240 python3 reports/h200/session11/check_scatter.py
  verify scatter_add_table 100
  verify embedding_sgd 70
  verify grad_accumulation 80
  verify embedding_table_sgd 100
elif [ "$PHASE" = verify1 ]; then
  verify scatter_add_table 100
  verify embedding_sgd 70
  verify grad_accumulation 80
  verify embedding_table_sgd 100
  verify embedding_table_adagrad 120
elif [ "$PHASE" = verify2 ]; then
  verify scatter_segment_resize 80
  verify lstm_embedding 90
  verify mixed_precision_fit 100
  verify bert_like 100
  verify bert_like_fit 150
fi
pack
