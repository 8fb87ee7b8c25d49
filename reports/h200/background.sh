#!/bin/bash
# A run longer than one device call (10 minutes): started in its own process session, which the device machine
# lets run on while calls follow each other within its warm time (30 s), each call waiting on it for a while.
#   bash reports/h200/background.sh start COMMAND...   # starts COMMAND; its packs go to /root/packs
#   bash reports/h200/background.sh stop            # ends it (run_shapes.sh's steps); in a call of its own: it ends
#                                                   # every process whose command line names run_shapes
#   bash reports/h200/background.sh wait SECONDS [DIR] # waits until it ends or SECONDS pass, copies the packs to $OUT;
#                                                      # DIR (its results so far, unfinished reports too) as live.tgz
# A lease can end before the run does: pass DIR to every wait, so that what it reached comes back.
# Keep each wait short (120-150 s): a machine that stops answering during a wait returns nothing of it (on
# 2026-12-05 one went during a wait of 540 s, 700 s of device time in, and none of the run came back).
# Its output is /root/background.log, its exit code /root/background.rc once it has ended.
set -u
case $1 in
  start)
    shift; mkdir -p /root/packs; rm -f /root/background.rc
    OUT=/root/packs setsid nohup bash -c '"$@"; echo $? > /root/background.rc' _ "$@" \
      > /root/background.log 2>&1 < /dev/null &
    echo "started: $*" ;;
  stop)
    # The run's scripts and their Python children, by names no caller's command line holds (a pattern in the
    # caller's own line would end the caller too).
    pkill -f "[r]un_shapes"; pkill -f "[c]andidates_"; pkill -f "[c]heck_combine"; pkill -f "[c]heck_dense"
    pkill -f "[p]ython3 -m opbisect"  # a fix's own children outlive the script that started them
    sleep 2; echo "stopped" ;;
  wait)
    # A machine that started no run here (a fresh one: the last went back while nothing called it) has nothing
    # to wait on: say so at once rather than sleep out the call (125: cannot test).
    if [ ! -f /root/background.log ]; then echo "no run started on this machine (a fresh one?)"; exit 125; fi
    end=$(( $(date +%s) + $2 ))
    while [ ! -f /root/background.rc ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    cp /root/packs/*.tgz "${OUT:-/tmp/out}/" 2>/dev/null
    [ -n "${3:-}" ] && tar czf "${OUT:-/tmp/out}/live.tgz" --exclude='*.npz' --exclude='record.json' -C "$(dirname "$3")" "$(basename "$3")"
    tail -25 /root/background.log
    if [ -f /root/background.rc ]; then echo "ended: exit $(cat /root/background.rc)"; else echo "still running"; fi ;;
esac
