"""Reading the files a user hands netbench (suites, specs, thresholds, JSON lines): every way
they can be unreadable is one clear error naming the file, never a traceback."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netbench.errors import NetbenchError, UsageError

# A suite, spec or thresholds file is never near this; parsing 4 MiB of TOML takes ~1 s here.
MAX_TEXT_BYTES = 4 << 20
MAX_TOML_DEPTH = 32          # arrays and tables within each other; real files use 3 or 4


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | Path, what: str = "file") -> Any:
    """``path`` opened for binary reading, if it is a regular file: a FIFO would block the
    reader and a device (/dev/zero) never ends. Checked before opening (so a device is never
    opened) and again on the open file (so nothing swapped in between gets through)."""
    path = Path(path)

    def refuse(mode: int) -> UsageError:
        return UsageError(f"cannot read {what} {path}: it is {file_kind(mode)}; name a "
                          "regular file")

    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise refuse(mode)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text(path: str | Path, what: str = "file", limit: int | None = MAX_TEXT_BYTES) -> str:
    """A regular file's UTF-8 text, at most ``limit`` bytes (None: any size)."""
    path = Path(path)
    try:
        with open_regular(path, what) as f:
            data = f.read() if limit is None else f.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if limit is not None and len(data) > limit:
        raise UsageError(f"cannot read {what} {path}: larger than {limit >> 20} MiB, which a "
                         f"{what} never is; name the right file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x} "
                         f"at offset {exc.start})") from None


PROBE_BYTES = 1 << 20        # a writability check writes this much: a full disk fails it
STALE_TMP = 3600.0           # seconds after which a leftover ".name.*.tmp" is a killed writer's


_TEMP_NAME = re.compile(r"^\..+\.\d+-[0-9a-f]{8}\.tmp$")    # what temp_name makes


def temp_name(path: Path, kind: str = "") -> Path:
    """A temp file beside ``path`` that no other writer shares: two processes writing one file
    at once (two readers refreshing the footer cache) each write their own and the last
    rename wins whole. The pid and a random suffix make it unique; the leading dot and the
    ".tmp" end are what the stale-temp sweep (``check_writable``) matches."""
    return path.with_name(f".{path.name}{kind}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def check_writable(directory: Path, what: str) -> None:
    """Fail before anything is measured if a result of realistic size could not be written
    there (a full filesystem passes an empty-file test), and sweep temp files that a killed
    writer left behind."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise NetbenchError(f"{what} {directory} cannot be written: "
                            f"{exc.strerror or exc}") from None
    now = time.time()
    for stale in directory.glob(".*.tmp"):
        try:
            # Only what a netbench writer of this user left: its name (temp_name's pid and
            # token), its owner; a results directory others share (--results /tmp) holds
            # their files too.
            info = os.lstat(stale)
            if (info.st_uid != os.geteuid() or not _TEMP_NAME.match(stale.name)
                    or now - info.st_mtime <= STALE_TMP):
                continue
            if stat.S_ISDIR(info.st_mode):              # a killed import's batches
                shutil.rmtree(stale)
            elif stat.S_ISREG(info.st_mode):
                stale.unlink()
        except OSError:
            pass


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename over ``path``: a reader, or a crash, never sees half. Only
    a regular file is replaced (through a symlink, its target): renamed over a device node
    (``-o /dev/null``, ``/dev/stdout``) or a FIFO, a file would take its place, and as root
    that is the host's /dev/null gone."""
    given = path
    if os.path.islink(path):
        # A link someone else planted (in /tmp, a shared results directory) must not steer a
        # write, least of all root's, onto a file it could not write itself: a link is
        # followed only where this user made it.
        owner = os.lstat(path).st_uid
        if owner != os.geteuid():
            raise NetbenchError(f"cannot write {path}: it is a symbolic link owned by uid "
                                f"{owner}, not this user ({os.geteuid()}); name the file "
                                "itself")
        path = Path(os.path.realpath(path))
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None                        # none yet (or unreachable: the write says why)
    if mode is not None and not stat.S_ISREG(mode):
        shown = f"{given} (-> {path})" if given != path else str(path)
        raise NetbenchError(f"cannot write {shown}: it is {file_kind(mode)}; name a regular "
                            "file (or a new one)")
    tmp = temp_name(path)
    try:
        # The temp file made here first, exclusively and never through a link, so the
        # writer fills a file of ours whatever was planted beside it.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:       # the half-written temp file never stays behind
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass            # a read-only filesystem refuses even that (EROFS), or tmp is a dir
        if isinstance(exc, OSError):
            raise NetbenchError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def load_toml(path: str | Path, what: str = "file") -> tuple[dict[str, Any], str]:
    """The parsed table and the text (for line numbers in later errors)."""
    text = read_text(path, what)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        prefix = f"{path}:{where.group(1)}:{where.group(2)}" if where else str(path)
        raise UsageError(f"{prefix}: not valid TOML: {exc}") from None
    except RecursionError:       # tomllib parses nested arrays and tables recursively
        data = None
    if data is None or nesting_depth(data) > MAX_TOML_DEPTH:
        raise UsageError(f"{path}: arrays or tables nested too deeply; a {what} nests them "
                         f"at most {MAX_TOML_DEPTH} deep")
    return data, text


def nesting_depth(value: Any) -> int:
    """How deeply arrays and tables nest in ``value``, found without recursion (so a deep
    value cannot exhaust the stack of whatever reads it next)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_TOML_DEPTH:
                stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                      else item))
    return deepest


def printable(text: Any) -> str:
    """``text`` safe for a terminal: control and other invisible characters (an ANSI escape,
    a newline in a stored label) shown escaped (``\\x1b``, ``\\n``), the rest as it is."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
