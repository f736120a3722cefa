"""report.html: the report's tables and figures, a sortable and filterable table of queries, and a trajectory viewer.

The page is one file that opens from disk (file://): its CSS and JS are inline, its figures are data: URIs, and
nothing is fetched from a network. A trajectory is not in the page: each is its own data file,
report_html/traj/<run>/<n>.js, which the page loads with a <script> tag when the trajectory is opened (fetch() is
refused on file://, a script tag is not), so the first view stays small at 1,000 queries x 100 steps. Files are
named by position, never by query id: query ids, answers and tool outputs come from anywhere and are only ever
data, JSON with every `<` escaped, put into the page as text by the script (never as markup).
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from rise_batch.eval.forkmap import fork_map
from rise_batch.eval.report_rows import Block
from rise_batch.eval.trajectory_view import interaction_of, read_events, trajectory_view, verdict
from rise_batch.io import write_bytes_atomic, write_text_atomic
from rise_batch.storage import AnyPath

HTML_NAME, DATA_DIR = "report.html", "report_html"


def js_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element and a .js file: `<`, `>`, `&` and the two JS line separators
    are escaped, so no value can close the element or start markup."""
    text = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def query_row(run: int, n: int, trajectory: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """A line of the page's query table (what the table shows, sorts and filters on; the steps stay in the
    trajectory's data file `file`)."""
    out = {
        "run": run,
        "n": n,
        "qid": str(trajectory.get("query_id")),
        "query": trajectory.get("query"),
        "answer": trajectory.get("exact_answer"),
        "gold": trajectory.get("answer"),
        "verdict": verdict(row),
        "confidence": trajectory.get("confidence"),
        "cost": row.get("agent_usd"),
        "model_calls": row.get("model_calls"),
        "tool_calls": row.get("tool_calls"),
        "stop": row.get("stop_reason"),
        "gold_R": row.get("gold_R"),
        "file": f"{DATA_DIR}/traj/{run}/{n}.js",
    }
    inter = interaction_of(row)
    if inter:
        keep = ("gold_in_workspace_step", "gold_surfaced_step", "gold_read")
        out["interaction"] = {k: inter.get(k) for k in keep}
    return out


def write_trajectories(
    out: Path,
    run: int,
    run_dir: AnyPath,
    trajectories: dict[str, dict[str, Any]],
    rows: Sequence[dict[str, Any]],
    bad: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Each trajectory of run number `run` as out/report_html/traj/<run>/<n>.js; the page's rows for them.
    `rows` are the run's per-query rows, in the order of `trajectories`; events files or lines skipped go to `bad`."""
    events = read_events(run_dir, bad)
    folder = out / DATA_DIR / "traj" / str(run)
    folder.mkdir(parents=True, exist_ok=True)
    items = list(zip(trajectories.values(), rows, strict=True))

    def write(start: int, stop: int) -> list[dict[str, Any]]:
        page_rows = []
        for n in range(start, stop):
            t, row = items[n]
            view = trajectory_view(t, events.get(str(t.get("query_id")), ()), interaction_of(row))
            write_bytes_atomic(folder / f"{n}.js", f"RISE.loaded({run},{n},{js_json(view)});\n".encode())
            page_rows.append(query_row(run, n, t, row))
        return page_rows

    return fork_map(write, len(items))  # the data files written by forked workers on a large run


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    # in a box of its own that scrolls sideways: a wide table never pushes the page past a 1,400 px window
    return f"<div class='scroll'><table class='summary'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"


def html_block(block: Block) -> str:
    """One of the report's blocks (report_rows.py) as static HTML, every text escaped."""
    kind = block[0]
    if kind == "table":
        return _table(block[1], block[2])
    if kind == "warnings":
        return "".join(f"<p class='warning'><b>Warning:</b> {html.escape(w)}</p>" for w in block[1])
    if kind == "runs":
        items = (f"<li><code>{html.escape(d)}</code>{html.escape(note)}</li>" for d, note in block[1])
        return "<ol class='runs'>" + "".join(items) + "</ol>"
    return {"h2": "<h2>{}</h2>", "h3": "<h3>{}</h3>", "p": "<p class='note'>{}</p>"}[kind].format(html.escape(block[1]))


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    alt = html.escape(path.stem)
    return f"<figure><img alt='{alt}' src='data:image/png;base64,{data}'><figcaption>{alt}</figcaption></figure>"


def _asset(name: str) -> str:
    return resources.files("rise_batch.data").joinpath(name).read_text(encoding="utf-8")


def render_html(
    blocks: Sequence[Block],
    figures: Sequence[Path],
    runs: Sequence[dict[str, Any]],
    rows: Sequence[dict[str, Any]],
) -> str:
    """The page: the report's `blocks` (what report.md says) as static HTML, `figures` inline, then the query table
    and viewer that the inline script draws from `runs` (name, system, run_dir each) and `rows` (query_row)."""
    parts = [html_block(b) for b in blocks]
    if figures:
        parts.append("<h2>Figures</h2><div class='figures'>" + "".join(_figure(f) for f in figures) + "</div>")
    data = js_json({"runs": list(runs), "rows": list(rows)})
    # only the page's own script and the data files it inserts run (they carry the nonce); no request leaves the disk
    nonce = hashlib.sha256(data.encode()).hexdigest()[:32]
    csp = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\">"
        f"<title>RISE evaluation report</title><style>{_asset('report.css')}</style></head><body>"
        "<h1>RISE evaluation report</h1><p class='nav'><a href='#queries-title'>Queries and trajectories ↓</a></p>"
        f"{''.join(parts)}"
        "<h2 id='queries-title'>Queries</h2><div id='filters'></div><div id='queries'></div>"
        "<div id='viewer' hidden></div>"
        f"<script id='report-data' type='application/json'>{data}</script>"
        f"<script nonce='{nonce}'>{_asset('report.js')}</script></body></html>"
    )


def write_html(out: Path, html_text: str) -> Path:
    write_text_atomic(out / HTML_NAME, html_text)
    return out / HTML_NAME
