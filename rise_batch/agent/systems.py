"""The systems a run compares: a system prompt, a tool set, which documents it sees, and its budgets.

`rise` explores structured files (with tables of contents) in a per-query workspace; `rise-bm25` is the same
agent on the original files, so the two differ only by the TOCs; `retrieval-agent` is the BrowseComp-Plus-style
baseline (top-5 snippets + get_document); `snippet-toc` is that agent over sections of the structured files
(search returns TOC sections, read fetches a line range: the paper's unrun configuration); `dci` greps the
whole corpus with no retriever and manages its context as the reference harness does. Budgets follow the paper:
100 calls / 1 h, and 300 calls / 1.5 h for DCI.

SYSTEMS is the only list of systems: config validation, sweeps, the CLI's error for an unknown name and the report's
labels all read it. Adding a system with an existing tool kind is one line here plus its prompt in prompts/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rise_batch.agent.loop import DCI_CONTEXT, AgentRun, ContextPolicy
from rise_batch.config import ConfigError
from rise_batch.space.sandbox import SandboxLimits
from rise_batch.space.snippets import SnippetTocTools
from rise_batch.space.tools import DciTools, RetrievalTools, RiseTools, ToolSet
from rise_batch.space.workspace import DocStore, Workspace

STRUCTURED, ORIGINAL = "structured", "original"


@dataclass(frozen=True)
class System:
    name: str
    label: str  # the name reports and plots show
    prompt: str  # file in prompts/
    docs: str  # STRUCTURED or ORIGINAL files
    tools: str  # "rise" | "retrieval" | "snippet-toc" | "dci"
    max_calls: int = 100
    wall_clock_s: float = 3600.0
    context: ContextPolicy | None = None

    @property
    def uses_index(self) -> bool:
        return self.tools != "dci"

    @property
    def uses_sandbox(self) -> bool:
        """Whether its tools run shell commands (bash in bubblewrap); the others only read files themselves."""
        return self.tools in ("rise", "dci")


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("rise", "RISE", "agent_rise", STRUCTURED, "rise"),
        System("rise-bm25", "RISE-BM25", "agent_rise_bm25", ORIGINAL, "rise"),
        System("retrieval-agent", "Retrieval agent", "agent_retrieval", ORIGINAL, "retrieval"),
        System("snippet-toc", "Snippet-TOC", "agent_snippet_toc", STRUCTURED, "snippet-toc"),
        System("dci", "DCI", "agent_dci", ORIGINAL, "dci", max_calls=300, wall_clock_s=5400.0, context=DCI_CONTEXT),
    )
}


def get_system(name: str) -> System:
    try:
        return SYSTEMS[name]
    except KeyError:
        raise ConfigError(f"unknown system {name!r}; choose one of {', '.join(SYSTEMS)}") from None


def open_tools(
    system: System,
    store: DocStore,
    index: Callable[[], Any],
    ws_path: str | Path | None,
    *,
    k: int = 1000,
    limits: SandboxLimits | None = None,
    allow_unsandboxed: bool = False,
    keep_workspace: bool = False,
) -> tuple[ToolSet, Workspace | None]:
    """The system's tools for one query (and the query's fresh workspace, for the RISE systems).

    `index` is called only by systems that search, so DCI never loads the BM25 index.
    """
    if system.tools == "dci":
        return DciTools(store, limits=limits, allow_unsandboxed=allow_unsandboxed), None
    if system.tools == "retrieval":
        return RetrievalTools(index(), store), None
    if system.tools == "snippet-toc":
        return SnippetTocTools(index(), store), None
    if ws_path is None:
        raise ValueError(f"system {system.name} needs a workspace path")
    ws = Workspace(ws_path, store, keep=keep_workspace)
    try:
        return RiseTools(index(), ws, k=k, limits=limits, allow_unsandboxed=allow_unsandboxed), ws
    except BaseException:
        ws.close()
        raise


def workspace_docs(system: System, store: DocStore, ws: Workspace | None, run: AgentRun) -> int:
    """The size of the space the agent could explore: its workspace, the whole corpus (DCI), or what search
    showed it (retrieval agent, snippet-toc)."""
    if ws is not None:
        return len(ws)
    if system.tools == "dci":
        return len(store)
    return len(run.retrieved)
