"""Prompt files: plain text under the repository's top-level prompts/ directory, versioned by content hash.

Prompts are data, not code: a user tunes them without touching Python, and the run hash includes the prompt's
hash, so a checkpoint made with one prompt is never silently resumed with another.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from rise_batch.storage import AnyPath, is_local_path, location, redact


def _prompts_dir() -> Path:
    """The checkout's prompts/ (editable installs, jobs' working dirs); else the copy a wheel installs."""
    here = Path(__file__).resolve().parent.parent / "prompts"
    installed = Path(sys.prefix) / "share" / "rise_batch" / "prompts"
    return here if here.is_dir() or not installed.is_dir() else installed


PROMPTS_DIR = _prompts_dir()


def prompt_path(name: str) -> Path:
    """A file that exists at `name` (absolute, or relative to the working directory) is used as is; any other
    name with a directory part is a path too (so a typo is reported as a missing file, never guessed into
    prompts/); a bare name ("structure_toc") or file name ("structure_toc.txt") resolves inside PROMPTS_DIR."""
    if not str(name).strip():
        raise ValueError("the prompt name is empty: give a name in prompts/ or a file path")
    p = Path(name)
    if p.is_file() or p.is_absolute() or len(p.parts) > 1:
        return p
    if not p.suffix:
        p = p.with_suffix(".txt")
    return PROMPTS_DIR / p.name


def load_prompt(name: str) -> str:
    """The prompt's text; a missing, unreadable or non-UTF-8 prompt is a one-line user error naming the file."""
    if not is_local_path(name):  # a URI: the object itself
        path = location(name)
        if not path.is_file():
            raise FileNotFoundError(f"prompt file {redact(name)!r} not found")
        return _read_text(path)
    path = prompt_path(name)
    if not path.is_file():
        if path.parent != PROMPTS_DIR:
            where = "" if path.is_absolute() else f" (relative to the working directory {Path.cwd()})"
            kind = "is not a file" if path.exists() else "not found"
            raise FileNotFoundError(f"prompt file {str(name)!r} {kind}{where}")
        have = sorted(x.name for x in PROMPTS_DIR.glob("*.txt")) if PROMPTS_DIR.is_dir() else []
        raise FileNotFoundError(
            f"prompt {name!r} not found at {path} (available: {', '.join(have) or 'none'}; or give a file path)"
        )
    return _read_text(path)


def _read_text(path: AnyPath) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"prompt file {path} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"prompt file {path} cannot be read: {e.strerror or e}") from None


def prompt_hash(text: str) -> str:
    """Short stable identity of a prompt's exact text (first 16 hex digits of its SHA-256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def json_schema_format(name: str, schema: dict) -> dict:
    """A chat request's `response_format` for a strict JSON schema, in the shape OpenAI's API defines (vLLM, SGLang
    and the llama.cpp server accept the same): strict mode needs every object to list all its properties as
    required and to forbid others, which the schemas next to the prompts (structure/propose.py, eval/judge.py) do."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
