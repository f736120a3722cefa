"""A sandboxed command's output as the model sees it: decoded, without terminal control codes, cut and counted.

Output is read with a fixed memory bound (a command may print gigabytes): it is decoded incrementally as UTF-8
(a byte that is not UTF-8 becomes one U+FFFD), terminal escape sequences (colours, cursor moves, window titles)
and other control characters except newline, tab and carriage return are removed, the first `max_chars`
characters of what remains are kept, and the rest is counted in the same characters, so "N more characters not
shown" is what the model would have seen, for text and binary output alike. A sequence split across two reads is
held back until it is complete (at most `_HOLD_CHARS`), so it is stripped whole, never half. Cleaning is linear in
the output whatever it holds, so a call's wall time stays its cap plus one read's cleaning (a few ms).
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
# What is removed, tried in this order at each position: CSI (ESC [ ... final, or its 8-bit form), a string (OSC, DCS,
# PM, APC, SOS: ESC ] P X ^ _ or an 8-bit C1 opener, up to BEL or ST, nothing else), a two-byte escape (ESC +
# intermediates + one final), any other control character but \t \n \r. An opener with no terminator before the next
# ESC, BEL or ST opens no string: its C1 character (or the ESC of ESC ]) goes alone, the rest is text.
# One pattern for all four rescans the rest of the text after every opener that has no terminator (a flood of U+0090
# is one per character: quadratic, with the GIL held). So strings go first, in one left-to-right pass that consumes
# an unterminated opener with its body, unchanged (each opener inside it fails on the same terminator), and puts a
# NUL where a complete string was: no sequence spans a NUL, as none spans an opener, so the second pass, the other
# three kinds, matches exactly what the single pattern did around them. Linear in the text, whatever it holds.
_STRING_OPEN = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*"
_STRINGS = re.compile(rf"{_STRING_OPEN}(?:\x07|\x1b\\|\x9c)|({_STRING_OPEN})")  # complete -> NUL | unterminated
_OTHERS = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9a\x9c-\x9f]+|[\x1b\x9b]"  # a run of those no sequence starts with
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # every sequence starts with one
_PLAIN_BYTES = bytes([9, 10, 13, *range(32, 127)])  # a chunk of only these needs no cleaning (the common case)
# The start of one of those sequences, running to the end of the text read so far: it may finish in the next read.
_UNFINISHED = re.compile(
    r"(?:(?:\x1b\[|\x9b)[0-?]*[ -/]*|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*\x1b?|\x1b[ -/]*)\Z"
)


def strip_controls(text: str) -> str:
    """`text` without terminal control sequences and control characters but \\t \\n \\r, in time linear in its
    length whatever it holds (two regex passes in C, no Python per match)."""
    if not _CONTROL.search(text):
        return text
    return _OTHERS.sub("", _STRINGS.sub("\x00\\1", text))


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
        return strip_controls(text)


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
