"""The fix's last check alone: two fresh runs of the script with a fix folder's recommendation, side by side, compared
after every step (what `opbisect fix` runs last), for re-running it on a fix folder the device already holds.

    python3 reports/h200/user_test.py /root/seed/story/seed_report-fix examples/seed_report.py
"""

import sys
from pathlib import Path

from opbisect.fix.driver import FixDriver
from opbisect.record import store
from opbisect.settings import FixSettings

folder, script = Path(sys.argv[1]), Path(sys.argv[2])
fix = store.load_fix(folder)
driver = FixDriver(FixSettings(script=script, check_steps=0, script_args=tuple(fix.script_args)), folder, folder,
                   print)
driver.intercepted = True  # a script that trains (the target contract's check runs its step instead)
print(driver.user_test(fix.recommendation))
