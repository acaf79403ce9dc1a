"""The one error path and the safe file handling of every phasebench tool (python/phasebench_tools/cli.py).

Bad input of any kind ends in one line on stderr and exit status 2; inputs are read only from
regular files (a FIFO or a device would hang or never end); outputs are written by
write-then-rename and never over one of the tool's inputs or an existing results file without
--overwrite, the rule of `phasebench run --out`. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import tempfile
from typing import Callable, Iterable

EXIT_BAD_INPUT = 2

#: The largest input a tool reads (results and counters files are far smaller; a larger one is
#: the wrong file, refused before it is read).
MAX_INPUT_BYTES = 256 << 20


class ToolError(Exception):
    """Bad input: the message is the whole line the user sees (after "PROG: error: ")."""


class FileError(ToolError):
    """A file that cannot be used: the message names the file, then why."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (exit 2), like every other bad-input message."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The contents of the regular file `path`; FileError for anything else.

    Opened without blocking and checked on the open descriptor, so a FIFO is refused at once
    (a plain open() would wait for a writer for ever) and nothing can swap the file in between.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileError(path, "no such file") from None
    except OSError as e:
        raise FileError(path, f"cannot be read: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileError(path, f"is {_kind(st.st_mode)}, not a file; give the path of a file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise FileError(path, f"is {st.st_size} bytes; the tools read files of at most {limit >> 20} MiB "
                                  f"(is it the right file?)")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise FileError(path, f"cannot be read: {e.strerror or e}") from None
    if len(data) > limit:
        raise FileError(path, f"is larger than {limit >> 20} MiB (is it the right file?)")
    return data


def _holds_results(path: str) -> bool:
    """Whether the existing file `path` is a results, counters or serve file (or a cut-off one)."""
    try:
        data = read_bytes(path)
    except FileError:
        return False
    text = data.decode("utf-8", errors="replace").lstrip()
    if not text.startswith("{"):
        return False
    try:
        doc = json.loads(text)
    except ValueError:  # cut off while written: judge by its opening
        return any(mark in text[:4096] for mark in ('"benchmarks"', '"phasebench"', '"phasebench serve"'))
    return isinstance(doc, dict) and (isinstance(doc.get("benchmarks"), list) or doc.get("kind") == "phasebench serve"
                                      or isinstance(doc.get("context"), dict) and "phasebench" in doc["context"])


def _same_file(st: os.stat_result, inputs: Iterable[str]) -> str | None:
    for p in inputs:
        try:
            s = os.stat(p)
        except OSError:
            continue
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            return p
    return None


def _probe_folder(folder: str, flag: str, path: str) -> None:
    """Writes and removes a file in `folder`, the only test that holds for /proc, read-only mounts and quotas."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".phasebench-probe-")
    except OSError as e:
        raise ToolError(f"{flag} {path!r}: cannot write in the folder {folder!r}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(tmp)


def check_output(path: str, flag: str, inputs: Iterable[str] = (), overwrite: bool = False) -> str:
    """The file to write for `flag PATH`, checked before any work; ToolError when it must not or cannot be written.

    Refused: an empty path, a folder, a device, FIFO or socket (/dev/full, ...), a path in a folder
    that does not exist or cannot be written; and, unless `overwrite`, one of `inputs` or an
    existing results, counters or serve file. Other existing files (an earlier table, page or plot) are
    replaced. A symbolic link is followed: the file it names is written.
    """
    if not path:
        raise ToolError(f"{flag} takes a file path, got ''")
    if path.endswith(("/", os.sep)):
        raise ToolError(f"{flag} {path!r} ends in '/', a folder; give a file path")
    real = os.path.realpath(path)
    folder = os.path.dirname(real) or "."
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):  # the folder check below says which
        st = None
    except OSError as e:
        raise ToolError(f"{flag} {path!r}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{flag} {path!r} is a folder; give a file path")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{flag} {path!r} is {_kind(st.st_mode)}, not a file; give the path of a file "
                            f"(leave out {flag} for standard output where the tool has it)")
        if not overwrite:
            same = _same_file(st, inputs)
            if same is not None:
                raise ToolError(f"{flag} {path!r} is one of the inputs ({same}); give another path, "
                                f"or --overwrite to replace it")
            if _holds_results(real):
                raise ToolError(f"{flag} {path!r} already exists and holds phasebench results; give another "
                                f"path, or --overwrite to replace it")
    elif not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ToolError(f"{flag} {path!r}: the folder {os.path.dirname(path) or '.'!r} {what}; create it or give "
                        f"another path")
    _probe_folder(folder, flag, path)
    return real


def check_output_dir(path: str, flag: str) -> str:
    """The folder `flag PATH` names, created if missing; ToolError when it is a file or cannot be written."""
    if not path:
        raise ToolError(f"{flag} takes a folder, got ''")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ToolError(f"{flag} {path!r} is a file, not a folder; give a folder (it is created if missing)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ToolError(f"{flag} {path!r}: cannot create the folder: {e.strerror or e}") from None
    _probe_folder(path, flag, path)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file(path: str, data: str | bytes, what: str = "output") -> None:
    """Writes `data` to `path` (checked by check_output) by write-then-rename: the old file, if any,
    stays whole until the new one is complete, and a failed write (disk full) leaves nothing behind."""
    folder = os.path.dirname(path) or "."
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as e:
        raise ToolError(f"cannot write the {what} {path!r}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(raw)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ToolError(f"cannot write the {what} {path!r}: {e.strerror or e}") from None


def compile_regex(pattern: str, flag: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ToolError(f"{flag} {pattern!r} is not a regular expression: {e}") from None


def run(ap: argparse.ArgumentParser, body: Callable[[argparse.Namespace], int], argv: list | None = None) -> int:
    """Parses `argv` and runs `body` on the result: the one error path of every tool.

    Returns the exit status (argparse's own exits included, so a test can drive main() directly):
    bad input of every kind is one line on stderr and 2. PHASEBENCH_TRACEBACK=1 shows the traceback
    of an unexpected error instead.
    """
    prog = ap.prog

    def fail(message: str) -> int:
        print(f"{prog}: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        return body(ap.parse_args(argv))
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, its line already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr) or 2))
    except ToolError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`: the reader left; no traceback, no second error at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as e:
        return fail(f"{str(e.filename) + ': ' if e.filename is not None else ''}{e.strerror or e}")
    except re.error as e:
        return fail(f"{e.pattern!r} is not a regular expression: {e}")
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError) as e:
        if os.environ.get("PHASEBENCH_TRACEBACK") == "1":
            raise
        return fail(f"a value in the input that the tool cannot use ({type(e).__name__}: {e}); check the input "
                    f"files (PHASEBENCH_TRACEBACK=1 shows where it failed)")
