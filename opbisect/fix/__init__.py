"""`opbisect fix`: from a script to a configuration two fresh runs of it agree on, in one command.

    run_fix(settings)
      ReportFolder(<stem>-fix).prepare()       record/store.py (a fix folder is a report: a second fix replaces it)
      Kept(folder).restore(driver)             fix/resume.py, with --resume: the rounds (and verify) a stopped fix
                                               of the script finished, where they still hold; noted after each
                                               round, kept at a stop (or by the next fix, where it was killed)
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

import sys

from ..record import store
from ..settings import FixSettings


def run_fix(settings: FixSettings, echo=print) -> int:
    from ..report import fix_view
    from ..targets.script import checked_path
    from .driver import FixDriver
    from .resume import Kept

    settings.validate()
    checked_path(settings.script)  # one line for a script that is no script, before any round
    folder = store.ReportFolder(settings.out, f"{settings.script.stem}-fix", str(settings.script.resolve()))
    say = echo if settings.progress else lambda line: None
    kept = Kept(folder)
    adopted = kept.adopt()  # before prepare, which removes a dead process's staged folder
    with folder.prepare():
        driver = FixDriver(settings, folder.staging, folder.final, say)
        driver.checkpoint = lambda: kept.note(driver)
        for said in (adopted, kept.restore(driver) if settings.resume else kept.told()):
            if said:
                say(said)
        fix, verification = _ran(driver, kept)
        kept.drop_checkpoint()
        final = fix_view.write(fix, verification, folder)
    kept.remove()
    for line in fix_view.lines(fix, final):
        echo(line)
    return fix.exit_code


def _ran(driver, kept):
    """The driver's run; where it stops (a signal, a child that failed, a bug), what it finished is kept, and
    stderr says where, before the line of the stop itself."""
    try:
        return driver.run()
    except BaseException:
        said = kept.save(driver)
        if said:
            print(f"opbisect: {said}", file=sys.stderr)
        raise
