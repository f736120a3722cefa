"""A sandboxed command's output as the model sees it: decoded, without terminal control codes, cut and counted.

Output is read with a fixed memory bound (a command may print gigabytes): it is decoded incrementally as UTF-8
(a byte that is not UTF-8 becomes one U+FFFD), terminal escape sequences (colours, cursor moves, window titles)
and other control characters except newline, tab and carriage return are removed, the first `max_chars`
characters of what remains are kept, and the rest is counted in the same characters, so "N more characters not
shown" is what the model would have seen, for text and binary output alike. A sequence split across two reads is
held back until it is complete (at most `_HOLD_CHARS`), so it is stripped whole, never half.
"""

from __future__ import annotations

import codecs
import os
import re
import selectors
import subprocess
import time
from collections.abc import Callable

READ_CHUNK = 1 << 16
_HOLD_CHARS = 256  # longest escape sequence held back at a read boundary; a longer unfinished one is cut
# CSI (ESC [ ... final), OSC/DCS/PM/APC/SOS strings (ESC ] ... BEL or ESC \), two-byte escapes (ESC + one char),
# their 8-bit C1 forms, and any other control character but \t \n \r.
_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)
_PLAIN_BYTES = bytes([9, 10, 13, *range(32, 127)])  # a chunk of only these needs no cleaning (the common case)
# The start of one of those sequences, running to the end of the text read so far: it may finish in the next read.
_UNFINISHED = re.compile(
    r"(?:(?:\x1b\[|\x9b)[0-?]*[ -/]*|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*\x1b?|\x1b[ -/]*)\Z"
)


class Cleaner:
    """Incremental bytes -> visible text: UTF-8 with replacement, control sequences removed."""

    def __init__(self) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.held = ""

    def feed(self, data: bytes, final: bool = False) -> str:
        if not self.held and not data.translate(None, _PLAIN_BYTES):
            return self.decoder.decode(data, final)  # C speed: `yes` prints 25 MB/s and more
        text = self.held + self.decoder.decode(data, final)
        self.held = ""
        if not final:
            tail = _UNFINISHED.search(text, max(0, len(text) - _HOLD_CHARS))
            if tail:
                self.held, text = text[tail.start() :], text[: tail.start()]
        return _ESCAPE.sub("", text) if _ESCAPE.search(text) else text


def collect(
    proc: subprocess.Popen, deadline: float, max_chars: int, kill: Callable[[], None] | None = None
) -> tuple[str, int, bool]:
    """Read merged output until EOF and exit or the deadline -> (kept text, characters cut, timed out).

    At the deadline the process group is killed, or `kill` is called (a long-lived sandbox's call is not a
    process of ours: its supervisor kills it)."""
    assert proc.stdout is not None
    out = proc.stdout
    clean = Cleaner()
    kept: list[str] = []
    room = max_chars
    cut = 0
    timed_out = False

    def take(text: str) -> None:
        nonlocal room, cut
        if room > 0:
            kept.append(text[:room])
            cut += max(0, len(text) - room)
            room -= len(kept[-1])
        else:
            cut += len(text)

    with selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not sel.select(remaining):
                continue
            chunk = os.read(out.fileno(), READ_CHUNK)
            if not chunk:
                break
            take(clean.feed(chunk))
    if not timed_out:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # closed its output but kept running
            timed_out = True
    if timed_out:
        kill() if kill is not None else kill_group(proc)
        drain(out, clean, take, grace_s=2.0)
    take(clean.feed(b"", final=True))
    out.close()
    return "".join(kept), cut, timed_out


def kill_group(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def drain(out, clean: Cleaner, take, grace_s: float) -> None:
    """Count what is still in the pipe after a kill; stop after `grace_s` (an unsandboxed orphan may hold it)."""
    end = time.monotonic() + grace_s
    with selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        while (remaining := end - time.monotonic()) > 0 and sel.select(remaining):
            chunk = os.read(out.fileno(), READ_CHUNK)
            if not chunk:
                break
            take(clean.feed(chunk))
