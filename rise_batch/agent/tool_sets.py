"""How each tool kind of agent/systems.py (TOOL_KINDS) opens one query's tools: named there by "module:function", so
reading the registry (the CLI's help, the guides' list) loads no tool, sandbox or index code."""

from __future__ import annotations

from typing import Any

from rise_batch.space.snippets import SnippetTocTools
from rise_batch.space.tools import DciTools, RetrievalTools, RiseTools
from rise_batch.space.workspace import Workspace


def open_rise(system, store, index, ws_path, *, k, limits, allow_unsandboxed, keep_workspace, lines):  # noqa: ANN001
    if ws_path is None:
        raise ValueError(f"system {system.name} needs a workspace path")
    ws = Workspace(ws_path, store, keep=keep_workspace)
    try:
        return RiseTools(index(), ws, k=k, limits=limits, allow_unsandboxed=allow_unsandboxed, lines=lines), ws
    except BaseException:
        ws.close()
        raise


def open_retrieval(system, store, index, ws_path, **_: Any):  # noqa: ANN001
    return RetrievalTools(index(), store), None


def open_snippet_toc(system, store, index, ws_path, **_: Any):  # noqa: ANN001
    return SnippetTocTools(index(), store), None


def open_dci(system, store, index, ws_path, *, limits, allow_unsandboxed, **_: Any):  # noqa: ANN001
    return DciTools(store, limits=limits, allow_unsandboxed=allow_unsandboxed), None
