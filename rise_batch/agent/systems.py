"""The systems a run compares: a system prompt, a tool set, which documents it sees, and its budgets.

`rise` explores structured files (with tables of contents) in a per-query workspace; `rise-bm25` is the same
agent on the original files, so the two differ only by the TOCs; `retrieval-agent` is the BrowseComp-Plus-style
baseline (top-5 snippets + get_document); `snippet-toc` is that agent over sections of the structured files
(search returns TOC sections, read fetches a line range: the paper's unrun configuration); `dci` greps the
whole corpus with no retriever and manages its context as the reference harness does. Budgets follow the paper:
100 calls / 1 h, and 300 calls / 1.5 h for DCI.

`rise-toc` is RISE over TOC-only files (agent/views.py): its workspace holds each retrieved document's table of
contents alone, and `read` opens the structured file's lines the entries point at.

SYSTEMS is the only list of systems: config validation, sweeps, the CLI's error for an unknown name, the report's
labels and the guides' list all read it. Adding a system with an existing tool kind is one `System(...)` here plus its
prompt in prompts/; a new tool kind is one `ToolKind(...)` in TOOL_KINDS (a system naming an unknown kind is refused).
A system names the document view its tools open (`docs`, an entry of agent/views.py:VIEWS); what the view offers and
what the tool kind needs are checked against each other when the system is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rise_batch.agent.context_policy import DCI_CONTEXT, ContextPolicy
from rise_batch.agent.views import ORIGINAL, STRUCTURED, TOC, VIEWS, View
from rise_batch.config import ConfigError
from rise_batch.registry import Lazy, Registry

if TYPE_CHECKING:
    from rise_batch.agent.loop import AgentRun
    from rise_batch.space.docstore import DocStore
    from rise_batch.space.sandbox import SandboxLimits
    from rise_batch.space.tools import ToolSet
    from rise_batch.space.workspace import Workspace

__all__ = ["ORIGINAL", "STRUCTURED", "SYSTEMS", "TOOL_KINDS", "System", "ToolKind", "get_system", "open_tools"]


class ToolOpener(Protocol):
    def __call__(
        self, system: System, store: DocStore, index: Callable[[], Any], ws_path: str | Path | None, *,
        k: int, limits: SandboxLimits | None, allow_unsandboxed: bool, keep_workspace: bool,
        lines: DocStore | None,
    ) -> tuple[ToolSet, Workspace | None]: ...  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ToolKind:
    """A tool set a system can have: how one query's tools are opened, and what they need (capabilities the job asks
    before it starts: an index to load, a sandbox to probe, a workspace per query)."""

    name: str
    open: ToolOpener
    uses_index: bool
    uses_sandbox: bool  # its tools run shell commands (bash in bubblewrap); the others only read files themselves
    help: str
    cites_docids: bool = False  # its answers cite documents by docid (get_document's argument), not by path
    needs_toc: bool = False  # its tools cut documents along their tables of contents (a view with `toc`)
    follows_lines: bool = False  # its `read` opens the file a view's entries point at (a view with `lines_of`)


TOOL_KINDS: Registry[ToolKind] = Registry(
    "tool kind",
    [
        ToolKind(
            name="rise", open=Lazy("rise_batch.agent.tool_sets:open_rise"), uses_index=True, uses_sandbox=True,
            follows_lines=True, help="search (hardlinks the union of top-K into the query's workspace), bash, read",
        ),
        ToolKind(
            name="retrieval", open=Lazy("rise_batch.agent.tool_sets:open_retrieval"), uses_index=True,
            uses_sandbox=False, help="search (top-5 snippets), get_document", cites_docids=True,
        ),
        ToolKind(
            name="snippet-toc", open=Lazy("rise_batch.agent.tool_sets:open_snippet_toc"), uses_index=True,
            uses_sandbox=False, needs_toc=True, help="search (TOC sections), read a line range",
        ),
        ToolKind(
            name="dci", open=Lazy("rise_batch.agent.tool_sets:open_dci"), uses_index=False, uses_sandbox=True,
            help="bash and read over the whole corpus, no retriever",
        ),
    ],
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class System:
    name: str
    label: str  # the name reports and plots show
    prompt: str  # file in prompts/
    docs: str  # the document view its tools open: a name in VIEWS (checked when the system is made)
    tools: str  # a name in TOOL_KINDS (checked when the system is made)
    help: str  # what the guides' list of systems says
    max_calls: int = 100
    wall_clock_s: float = 3600.0
    context: ContextPolicy | None = None

    def __post_init__(self) -> None:
        kind = TOOL_KINDS.lookup(self.tools)  # an unknown tool kind is refused here, never given RISE's tools
        view = VIEWS.lookup(self.docs)  # so is an unknown view
        if kind.needs_toc and not view.toc:
            raise ConfigError(f"system {self.name}: {self.tools} tools cut documents along their TOC; view "
                              f"{self.docs!r} has none")  # fmt: skip
        if view.lines_of and not kind.follows_lines:
            raise ConfigError(f"system {self.name}: view {self.docs!r} points into the {view.lines_of} files, which "
                              f"{self.tools} tools do not open")  # fmt: skip

    @property
    def view(self) -> View:
        return VIEWS.lookup(self.docs)

    @property
    def tool_kind(self) -> ToolKind:
        return TOOL_KINDS.lookup(self.tools)

    @property
    def uses_index(self) -> bool:
        return self.tool_kind.uses_index

    @property
    def uses_sandbox(self) -> bool:
        """Whether its tools run shell commands (bash in bubblewrap); the others only read files themselves."""
        return self.tool_kind.uses_sandbox


SYSTEMS: Registry[System] = Registry(
    "system",
    [
        System(name="rise", label="RISE", prompt="agent_rise", docs=STRUCTURED, tools="rise",
               help="structured files (with tables of contents) in a per-query workspace"),
        System(name="rise-bm25", label="RISE-BM25", prompt="agent_rise_bm25", docs=ORIGINAL, tools="rise",
               help="the same agent on the original files"),
        System(name="retrieval-agent", label="Retrieval agent", prompt="agent_retrieval", docs=ORIGINAL,
               tools="retrieval", help="BM25 top-5 snippets + `get_document`"),
        System(name="rise-toc", label="RISE-TOC", prompt="agent_rise_toc", docs=TOC, tools="rise",
               help="the same agent on TOC-only files: it greps the tables of contents and reads the structured "
                    "files' lines"),
        System(name="snippet-toc", label="Snippet-TOC", prompt="agent_snippet_toc", docs=STRUCTURED,
               tools="snippet-toc", help="TOC sections of the structured files, read by line range"),
        System(name="dci", label="DCI", prompt="agent_dci", docs=ORIGINAL, tools="dci",
               help="bash + read over the whole corpus, no retriever", max_calls=300, wall_clock_s=5400.0,
               context=DCI_CONTEXT),
    ],
)  # fmt: skip


def get_system(name: str) -> System:
    return SYSTEMS.lookup(name)


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
    lines: DocStore | None = None,
) -> tuple[ToolSet, Workspace | None]:
    """The system's tools for one query (and the query's fresh workspace, for the RISE systems).

    `index` is called only by systems that search, so DCI never loads the BM25 index. `lines`: the files the view's
    entries point at (its `lines_of`), which a `follows_lines` tool kind's `read` opens.
    """
    return system.tool_kind.open(
        system, store, index, ws_path,
        k=k, limits=limits, allow_unsandboxed=allow_unsandboxed, keep_workspace=keep_workspace, lines=lines,
    )  # fmt: skip


def workspace_docs(system: System, store: DocStore, ws: Workspace | None, run: AgentRun) -> int:
    """The size of the space the agent could explore: its workspace, the whole corpus (DCI), or what search
    showed it (retrieval agent, snippet-toc)."""
    if ws is not None:
        return len(ws)
    if not system.uses_index:  # DCI: the whole corpus
        return len(store)
    return len(run.retrieved)
