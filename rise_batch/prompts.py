"""Prompt files: plain text under the repository's top-level prompts/ directory, versioned by content hash.

Prompts are data, not code: a user tunes them without touching Python, and the run hash includes the prompt's
hash, so a checkpoint made with one prompt is never silently resumed with another.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def _prompts_dir() -> Path:
    """The checkout's prompts/ (editable installs, jobs' working dirs); else the copy a wheel installs."""
    here = Path(__file__).resolve().parent.parent / "prompts"
    installed = Path(sys.prefix) / "share" / "rise_batch" / "prompts"
    return here if here.is_dir() or not installed.is_dir() else installed


PROMPTS_DIR = _prompts_dir()


def prompt_path(name: str) -> Path:
    """A bare name ("structure_toc") or file name resolves inside PROMPTS_DIR; a path to a file is used as is."""
    p = Path(name)
    if p.is_file() and (p.is_absolute() or len(p.parts) > 1):
        return p
    if not p.suffix:
        p = p.with_suffix(".txt")
    return PROMPTS_DIR / p.name


def load_prompt(name: str) -> str:
    path = prompt_path(name)
    if not path.is_file():
        have = sorted(x.name for x in PROMPTS_DIR.glob("*.txt")) if PROMPTS_DIR.is_dir() else []
        raise FileNotFoundError(f"prompt {name!r} not found at {path} (available: {', '.join(have) or 'none'})")
    return path.read_text(encoding="utf-8")


def prompt_hash(text: str) -> str:
    """Short stable identity of a prompt's exact text (first 16 hex digits of its SHA-256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
