"""The pages a person opens: a trace's report.html (with sources), one whose two fresh processes differ, and a fix's.
Each answers first (the verdict, what differs, what to do, the next command), lists its sections and links to its
files, and fits a 1300 px window: checked in a real browser (Debian's headless Chromium) where there is one, and on
the page's own data everywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_report import literal_record

from opbisect.analysis import fresh as decide
from opbisect.cli import main
from opbisect.execute.fresh import merged
from opbisect.record import store
from opbisect.record.model import Made, Probe
from opbisect.report import write

from conftest import NOISE_STEP, trace, write_script

XHTML = "{http://www.w3.org/1999/xhtml}"
CHROMIUM = shutil.which("chromium")
WIDTH = 1300
STEADY = """
w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    w.assign_add(x)
    return w.read_value()


inputs = (tf.ones([4]),)
"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """Three report folders, each with its report.html: a trace's, a fresh-process difference's, a fix's."""
    tmp = tmp_path_factory.mktemp("pages")
    traced = trace(write_script(tmp, "noise", NOISE_STEP), tmp / "trace", runs=3, html=True)
    assert traced.code == 1
    record = literal_record()
    probes = [Probe(initial={"w": d, "dense/kernel": d}, batches=["b"]) for d in ("1", "2")]
    check = decide.check(*probes, None, "unset")
    check.created = {"dense/kernel": Made("train.py:31", "layer dense, initializer GlorotUniform")}
    apart = merged(record, check)
    folder = store.ReportFolder(tmp / "fresh", "model_step", "/work/model_step.py")
    with folder.prepare():
        write(apart, folder, html=True)
    steady = write_script(tmp, "steady", STEADY)
    assert main(["fix", str(steady), "--runs", "2", "--no-progress", "--out", str(tmp / "fix")]) == 0
    return {"trace": tmp / "trace" / "noise", "fresh": tmp / "fresh" / "model_step", "fix": tmp / "fix" / "steady-fix"}


def parsed(folder: Path) -> ET.Element:
    return ET.fromstring((folder / "report.html").read_text().split("\n", 1)[1])


@pytest.mark.parametrize("kind", ["trace", "fresh", "fix"])
def test_every_link_resolves_and_every_listed_section_is_there(pages, kind):
    root = parsed(pages[kind])
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    hrefs = [a.get("href") for a in root.iter(f"{XHTML}a")]
    assert hrefs, "a page with no link"
    for href in hrefs:
        if href.startswith("#"):
            assert href[1:] in ids, f"{kind}: {href} names no section"
        else:
            assert (pages[kind] / href).is_file(), f"{kind}: {href} is no file of the report"


@pytest.mark.parametrize("kind", ["trace", "fresh"])
def test_the_answer_comes_first_with_the_next_command(pages, kind):
    body = parsed(pages[kind]).find(f"{XHTML}body")
    first = [e for e in body if e.tag != f"{XHTML}header"][0]
    assert first.get("id") == "verdict" and first.get("data-verdict") == "nondeterministic"
    said = "".join(first.itertext())
    assert "opbisect fix" in said  # the next command to copy
    if kind == "fresh":
        assert "differ before training starts" in said and "train.py:31" in said


def test_a_finding_groups_its_sources_and_folds_each_of_them(pages):
    root = parsed(pages["fresh"])
    rows = [tr for tr in root.iter(f"{XHTML}tr") if tr.get("data-kind") == "init"]
    assert [(tr.get("data-op"), tr.get("data-count")) for tr in rows] == [("dense/kernel", "2")]
    folded = [li.get("data-op") for li in root.iter(f"{XHTML}li") if li.get("data-op")]
    assert folded == ["dense/kernel", "w"]
    header = [th.text for th in root.find(f".//{XHTML}section[@id='sources']").iter(f"{XHTML}th")]
    assert len(header) <= 8


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (apt-get install chromium)")
@pytest.mark.parametrize("kind", ["trace", "fresh", "fix"])
def test_a_page_fits_a_1300_pixel_window_in_a_browser(pages, kind, tmp_path):
    """The page's own width, as Chromium lays it out at 1300 px: nothing scrolls sideways."""
    page = pages[kind] / "report.html"
    probe = tmp_path / "measured.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>document.title = document.documentElement.scrollWidth + ' ' + window.innerWidth</script>"
                   "</body>"))
    for name in {p.name for p in pages[kind].iterdir()}:  # the links' files beside it, as in the report folder
        target = tmp_path / name
        if not target.exists():
            target.symlink_to(pages[kind] / name)
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH},900", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=180)
    title = re.search(r"<title>(\d+) (\d+)</title>", done.stdout)
    assert title, done.stderr[-2000:]
    scroll, window = map(int, title.groups())
    assert window == WIDTH and scroll <= window, f"{kind}: the page is {scroll} px wide in a {window} px window"
