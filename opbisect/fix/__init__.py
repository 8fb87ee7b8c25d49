"""`opbisect fix`: from a script to a configuration two fresh runs of it agree on, in one command.

    run_fix(settings)
      ReportFolder(<stem>-fix).prepare()       record/store.py (a fix folder is a report: a second fix replaces it)
      FixDriver(...).run()                     fix/driver.py: rounds of `opbisect trace` in fresh processes, each
                                               with everything found so far applied (fix/plan.py decides), then
                                               verify where ops were patched, then the user's test: two fresh runs
                                               of the script with the recommendation (`opbisect run`), compared
      fix_view.write(fix, verification)        fix.json, patch.csv, summary.txt, report.html

A source hides the sources after it (the LM head's cross-entropy hid two BiasAddGrads and Adam's segment sums;
ResNet50 needed four rounds), so each round traces the script with every source found so far fixed. Each round and
verify run in fresh processes, since a family switch (an environment variable) is read once, when TensorFlow starts.
The exit is the user's test: 0 only where two fresh runs of the script with the recommendation agree bit for bit.
"""

from __future__ import annotations

from ..record import store
from ..settings import FixSettings


def run_fix(settings: FixSettings, echo=print) -> int:
    from ..report import fix_view
    from ..targets.script import checked_path
    from .driver import FixDriver

    settings.validate()
    checked_path(settings.script)  # one line for a script that is no script, before any round
    folder = store.ReportFolder(settings.out, f"{settings.script.stem}-fix", str(settings.script.resolve()))
    with folder.prepare():
        driver = FixDriver(settings, folder.staging, folder.final, echo if settings.progress else lambda line: None)
        fix, verification = driver.run()
        final = fix_view.write(fix, verification, folder)
    for line in fix_view.lines(fix, final):
        echo(line)
    return fix.exit_code
