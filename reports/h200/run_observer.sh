#!/bin/bash
# Why capture changes conv2d_net's result under op determinism: the same trace with grappler's remapper off
# (for the plain and the instrumented step alike). A tap on a Conv2D output stops the remapper fusing
# Conv2D+BiasAdd(+activation); if that fusion is what moves the result, the report with it off must say
# "capture did not change the step's result". Run from the project root after `source /root/tfenv.sh`.
set -u
R=${OUT:-/tmp/out}/h200/observer; mkdir -p "$R"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
W=${W:-/tmp/opbisect_wrappers}
for remap in on off; do
  extra=(); [ $remap = off ] && extra=("tf.config.optimizer.set_experimental_options({'remapping': False})")
  bash reports/h200/opdet_wrapper.sh conv2d_net "$W" "conv2d_net_opdet_remap_$remap" "${extra[@]}"
  timeout 200 python3 -m opbisect trace "$W/conv2d_net_opdet_remap_$remap.py" --runs 3 --out "$R" --no-progress \
    > "$R/conv2d_net_opdet_remap_$remap.txt" 2>&1
  echo "remapper $remap: exit=$?"; grep "^instrumented step" "$R/conv2d_net_opdet_remap_$remap.txt"
done

