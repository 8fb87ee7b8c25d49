#!/bin/bash
# The seed report's whole story on the H200 (issue 39), from the project root after `source /root/tfenv.sh` (the
# bundle with the HF wheels: ../shared/gpu/README.md). Longer than one call: through background.sh:
#   bash reports/h200/background.sh start bash reports/h200/run_seed_report.sh
#   bash reports/h200/background.sh wait 560 /root/seed      (calls back to back until it says "ended")
# 1. the user's test as the report made it: two fresh runs of the script as written;
# 2. one `opbisect fix` (its last check: two fresh runs with its recommendation, through the whole script);
# 3. the command it recommends, run twice.
# Everything lands in /root/seed/story/, packed into $OUT/seed-story.tgz after every step; committed as
# reports/h200/seed_report/.
set -u
NAME=seed PHASE=story
source reports/h200/lib.sh
run oracle1 400 python3 examples/seed_report.py
run oracle2 400 python3 examples/seed_report.py
run fix 1500 python3 -m opbisect fix examples/seed_report.py --out "$R" --fingerprint wsum --cpu-reference off \
  --max-runs 10 --verify-runs 5 --timing-runs 10 --check-steps 0
cmd=$(sed -n 's/^  run it so: //p' "$R/fix.txt" | sed 's/opbisect run/python3 -m opbisect run/')
if [ -n "$cmd" ]; then
  echo "$cmd" > "$R/recommended.sh"
  run recommended1 400 bash "$R/recommended.sh"
  run recommended2 400 bash "$R/recommended.sh"
fi
pack
