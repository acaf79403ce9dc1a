"""Every Python tool's one error path (python/phasebench_tools/cli.py), driven through each tool's main():
bad files (missing, a FIFO, a folder, a device, bad values in a results file), bad options (a bad
regex) and outputs that must not or cannot be written (an input, an existing results file, a
folder, a missing folder, a file where a folder belongs, /dev/full, /proc) each end in one line on
stderr and exit status 2, never a traceback or a hang, and no input is changed."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import stat

import pytest

from conftest import SCRIPTS, fixture, script
from phasebench_tools import compare, cpu_targets, ncu, report, roofline

_spec = importlib.util.spec_from_file_location("prefill_decode_simulator",
                                               os.path.join(SCRIPTS, "prefill_decode_simulator.py"))
simulator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(simulator)

MAINS = {"compare": compare.main, "report": report.main, "roofline": roofline.main, "cpu-targets": cpu_targets.main,
         "ncu": ncu.main, "simulator": simulator.main}


def _edited(src: str, dst: str, edit) -> str:
    """A copy of the results file `src` with `edit(time)` applied to its first ok point's time object."""
    doc = json.loads(open(src).read())
    first = next(b["phasebench"] for b in doc["benchmarks"]
                 if isinstance(b.get("phasebench"), dict) and b["phasebench"].get("status") == "ok")
    edit(first["time"])
    with open(dst, "w") as f:
        json.dump(doc, f)
    return dst


@pytest.fixture
def files(tmp_path):
    """The paths a case's arguments name: good inputs, bad ones, and places an output cannot go."""
    d = {"tmp": str(tmp_path), "A": str(tmp_path / "A.json"), "B": str(tmp_path / "B.json"),
         "R": str(tmp_path / "other-results.json"), "note": str(tmp_path / "note.txt"),
         "fifo": str(tmp_path / "fifo"), "dir": str(tmp_path / "folder"), "plots": str(tmp_path / "plots")}
    shutil.copy(fixture("h100-base.json"), d["A"])
    shutil.copy(fixture("h100-slower.json"), d["B"])
    shutil.copy(fixture("h200-base.json"), d["R"])
    open(d["note"], "w").write("a note\n")
    os.mkfifo(d["fifo"])
    os.mkdir(d["dir"])
    os.mkdir(d["plots"])
    shutil.copy(fixture("h200-base.json"), os.path.join(d["plots"], "A.roofline.png"))  # a results file, misnamed
    for name, edit in (("zero", lambda t: t.update(median_s=0)), ("negative", lambda t: t.update(median_s=-1e-3)),
                       ("string", lambda t: t.update(median_s="fast")), ("nomedian", lambda t: t.pop("median_s")),
                       ("badmin", lambda t: t.update(min_s="x"))):
        d[name] = _edited(d["A"], str(tmp_path / f"{name}.json"), edit)
    counters = tmp_path / "counters"
    counters.mkdir()
    d["counters"] = str(counters)
    d["log"] = str(tmp_path / "ncu.log")
    open(d["log"], "w").write("### phasebench-ncu point: x\n")
    return d


# (tool, arguments with {placeholders} from `files`, what the one line must say)
CASES = [
    # inputs that are not files, or not there
    ("compare", "{A} {fifo}", "is a FIFO"),
    ("compare", "{A} {dir}", "is a folder"),
    ("compare", "{A} /dev/null", "is a character device"),
    ("compare", "{A} {tmp}/missing.json", "no such file"),
    ("report", "{fifo}", "is a FIFO"),
    ("report", "{dir}", "is a folder"),
    ("roofline", "{fifo} --out-dir {plots}", "is a FIFO"),
    ("cpu-targets", "{fifo}", "is a FIFO"),
    ("cpu-targets", "/dev/zero", "is a character device"),
    ("ncu", "plan {fifo}", "is a FIFO"),
    ("ncu", "plan {counters}", "no counters file"),
    ("ncu", "compare {fifo} {log}", "is a FIFO"),
    ("simulator", "--config {fifo}", "is a FIFO"),
    ("simulator", "--config {dir}", "is a folder"),
    # bad values in a results file
    ("compare", "{A} {zero}", "time.median_s is 0"),
    ("compare", "{A} {negative}", "time.median_s is -0.001"),
    ("compare", "{A} {string}", 'time.median_s is "fast"'),
    ("compare", "{nomedian} {B}", "time.median_s is null"),
    ("compare", "{A} {badmin}", 'time.min_s is "x"'),
    ("report", "{zero}", "time.median_s is 0"),
    ("roofline", "{string} --out-dir {plots}", 'time.median_s is "fast"'),
    ("cpu-targets", "{negative}", "time.median_s is -0.001"),
    # bad options
    ("compare", "{A} {B} --filter [", "--filter '[' is not a regular expression"),
    ("compare", "{A} {B} --alpha 2", "--alpha must be strictly between 0 and 1"),
    ("compare", "{A} {B} --no-such-option", "unrecognized arguments"),
    ("report", "{A} --no-such-option", "unrecognized arguments"),
    ("roofline", "{A} --formats gif", "unsupported --formats"),
    ("roofline", "{A} --overlay-name a/b", "--overlay-name takes a file name stem"),
    ("ncu", "plan {counters} --max x", "invalid int value"),
    ("simulator", "--batch x", "invalid int value"),
    # outputs that must not be written: an input, an existing results file (both need --overwrite)
    ("compare", "{A} {B} -o {A}", "is one of the inputs"),
    ("compare", "{A} {B} -o {B} --format json", "is one of the inputs"),
    ("compare", "{A} {B} -o {R}", "already exists and holds phasebench results"),
    ("compare", "{A} {R} --roofline {A}", "is one of the inputs"),
    ("compare", "{A} {B} --roofline {R}", "already exists and holds phasebench results"),
    ("compare", "{A} {R} --roofline {tmp}/chart.gif", "give a path ending in .png, .svg or .pdf"),
    ("report", "{A} -o {A}", "is one of the inputs"),
    ("report", "{A} -o {R}", "already exists and holds phasebench results"),
    ("roofline", "{A} --out-dir {plots}", "already exists and holds phasebench results"),
    # outputs that cannot be written
    ("compare", "{A} {B} -o {dir}", "is a folder"),
    ("compare", "{A} {B} -o {tmp}/missing/out.txt", "does not exist"),
    ("compare", "{A} {B} -o {note}/out.txt", "is not a folder"),
    ("compare", "{A} {B} -o /dev/full", "is a character device"),
    ("compare", "{A} {B} -o /proc/phasebench-out.txt", "cannot write in the folder '/proc'"),
    ("compare", "{A} {B} -o {tmp}/", "ends in '/'"),
    ("report", "{A} -o {dir}", "is a folder"),
    ("report", "{A} -o {tmp}/missing/r.html", "does not exist"),
    ("report", "{A} -o /dev/full", "is a character device"),
    ("report", "{A} -o /proc/r.html", "cannot write in the folder '/proc'"),
    ("roofline", "{A} --out-dir {note}", "is a file, not a folder"),
    ("roofline", "{A} --out-dir /proc/phasebench-plots", "cannot create the folder"),
]


def _digest(paths) -> dict:
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths if os.path.isfile(p)}


class _Hang(Exception):
    pass


def _call(main, argv, seconds=60):
    """main(argv) with an alarm: a tool that blocks (a FIFO's open() waits for a writer) fails instead of hanging."""
    def alarm(*_):
        raise _Hang(f"main{tuple(argv)} still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        return main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("tool,args,says", CASES, ids=[f"{t}:{a}" for t, a, _ in CASES])
def test_bad_input_is_one_line_and_status_two(tool, args, says, files, capsys, monkeypatch):
    monkeypatch.chdir(files["tmp"])  # report's default output, report.html, would land in the current folder
    argv = [w.format(**files) for w in args.split()]
    before = _digest(files[k] for k in ("A", "B", "R", "note"))
    before.update(_digest([os.path.join(files["plots"], "A.roofline.png")]))
    rc = _call(MAINS[tool], argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, f"exit status {rc}:\n{err}"
    assert "Traceback" not in err
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    assert says in lines[0], lines[0]
    assert _digest(before) == before, "an input or an existing file was changed"
    assert not [f for f in os.listdir(files["tmp"]) if f.endswith(".tmp")], "a temporary file was left behind"


def test_overwrite_replaces_a_results_file_by_write_then_rename(files, capsys):
    # --overwrite is the one way to replace a results file (or an input) with an output.
    assert compare.main([files["A"], files["B"], "-o", files["R"], "--format", "json", "--overwrite"]) == 0
    assert "files" in json.loads(open(files["R"]).read())
    # An earlier output that holds no results is replaced without it, as before.
    assert compare.main([files["A"], files["B"], "-o", files["note"], "--significance", "minmax"]) == 0
    assert open(files["note"]).read().startswith("Files\n")
    assert not [f for f in os.listdir(files["tmp"]) if f.endswith(".tmp")]
    # The written file gets the umask's permissions, not mkstemp's 0600.
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(files["R"]).st_mode) == 0o666 & ~mask


def test_console_scripts_refuse_an_input_as_output_and_a_fifo(files):
    # The documented commands (scripts/*.py), as a user runs them: one line, exit 2, the input unchanged.
    before = _digest([files["A"]])
    r = script("compare.py", files["A"], files["B"], "-o", files["A"])
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "compare.py: error: --output" in r.stderr and "is one of the inputs" in r.stderr
    r = script("report.py", files["A"], "-o", files["A"])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "is one of the inputs" in r.stderr
    assert _digest([files["A"]]) == before
    r = script("compare.py", files["fifo"], files["A"], timeout=60)  # a hang fails here as a timeout
    assert r.returncode == 2 and "is a FIFO" in r.stderr and "Traceback" not in r.stderr, r.stderr
