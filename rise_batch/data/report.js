// report.html's script (rise_batch/eval/report_html.py inlines it): the query table and the trajectory viewer.
// Every value from a run is put in the page as text (textContent, append of strings), never parsed as markup.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const NONCE = document.currentScript ? document.currentScript.nonce : "";
  const runs = DATA.runs;
  const rows = DATA.rows;
  const byQuery = new Map();
  for (const r of rows) {
    if (!byQuery.has(r.qid)) byQuery.set(r.qid, []);
    byQuery.get(r.qid).push(r);
  }
  const hasInteraction = rows.some((r) => r.interaction);
  const cache = new Map();
  const waiting = new Map();
  let savedScroll = 0;
  const SHORT = 600; // characters of a tool output shown before "show all"

  // A trajectory's data file calls this when it has loaded.
  window.RISE = {
    loaded(run, n, view) {
      const key = run + "/" + n;
      cache.set(key, view);
      for (const done of waiting.get(key) || []) done(view);
      waiting.delete(key);
    },
  };

  function el(tag, cls, ...kids) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  const fmt = {
    usd: (x) => (x === null || x === undefined ? "–" : "$" + Number(x).toFixed(x < 0.1 ? 4 : 3)),
    pct: (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(0) + "%"),
    num: (x, d) => (x === null || x === undefined ? "–" : Number(x).toFixed(d || 0)),
    sec: (x) => (x === null || x === undefined ? "" : Number(x).toFixed(x < 10 ? 2 : 1) + " s"),
    text: (x) => (x === null || x === undefined ? "–" : String(x)),
    step: (x) => (x === null || x === undefined ? "–" : String(x)),
  };

  // ---- the query table ----
  const COLUMNS = [
    ["run", "System", (r) => runs[r.run].name],
    ["qid", "Query id", (r) => r.qid],
    ["query", "Query", (r) => fmt.text(r.query)],
    ["answer", "Answer", (r) => fmt.text(r.answer)],
    ["gold", "Gold", (r) => fmt.text(r.gold)],
    ["verdict", "Verdict", (r) => r.verdict],
    ["confidence", "Conf.", (r) => fmt.num(r.confidence)],
    ["cost", "Cost", (r) => fmt.usd(r.cost)],
    ["model_calls", "Model calls", (r) => fmt.text(r.model_calls)],
    ["tool_calls", "Tool calls", (r) => fmt.text(r.tool_calls)],
    ["stop", "Stop reason", (r) => fmt.text(r.stop)],
    ["gold_R", "gold_R", (r) => fmt.pct(r.gold_R)],
  ];
  if (hasInteraction) {
    const i = (k) => (r) => (r.interaction ? r.interaction[k] : null);
    COLUMNS.push(["gold_ws", "Gold in ws @", (r) => fmt.step(i("gold_in_workspace_step")(r)), i("gold_in_workspace_step")]);
    COLUMNS.push(["gold_seen", "Gold surfaced @", (r) => fmt.step(i("gold_surfaced_step")(r)), i("gold_surfaced_step")]);
    COLUMNS.push(["gold_read", "Gold read", (r) => (i("gold_read")(r) === null ? "–" : i("gold_read")(r) ? "yes" : "no"), i("gold_read")]);
  }
  const PAGE = 200; // rows drawn at a time: laying out 2,000 table rows took seconds, 200 take milliseconds
  const state = { sort: null, dir: 1, verdict: "", stop: "", run: "", text: "", limit: PAGE };

  function sortValue(col, r) {
    if (col[3]) return col[3](r);
    const v = col[0] === "run" ? runs[r.run].name : r[col[0]];
    return v === undefined ? null : v;
  }

  function select(label, key, values) {
    const s = el("select");
    s.setAttribute("aria-label", label);
    s.append(el("option", null, "any " + label));
    s.options[0].value = "";
    for (const [value, text] of values) {
      const o = el("option", null, text);
      o.value = value;
      s.append(o);
    }
    s.addEventListener("change", () => {
      state[key] = s.value;
      drawTable();
    });
    return s;
  }

  function distinct(f) {
    return [...new Set(rows.map(f))].sort();
  }

  function drawFilters() {
    const box = document.getElementById("filters");
    const search = el("input");
    search.type = "search";
    search.placeholder = "filter by query id, query or answer";
    search.addEventListener("input", () => {
      state.text = search.value.toLowerCase();
      drawTable();
    });
    box.append(
      select("verdict", "verdict", distinct((r) => r.verdict).map((v) => [v, v])),
      select("stop reason", "stop", distinct((r) => String(r.stop)).map((v) => [v, v])),
      select("system", "run", runs.map((run, i) => [String(i), run.name])),
      search,
      el("span", "count")
    );
  }

  function visibleRows() {
    const t = state.text;
    let out = rows.filter(
      (r) =>
        (!state.verdict || r.verdict === state.verdict) &&
        (!state.stop || String(r.stop) === state.stop) &&
        (!state.run || String(r.run) === state.run) &&
        (!t || [r.qid, r.query, r.answer].some((x) => x && String(x).toLowerCase().includes(t)))
    );
    if (state.sort !== null) {
      const col = COLUMNS[state.sort];
      const d = state.dir;
      out = out.slice().sort((a, b) => {
        const x = sortValue(col, a);
        const y = sortValue(col, b);
        if (x === y) return 0;
        if (x === null) return 1;
        if (y === null) return -1;
        return (x < y ? -1 : 1) * d;
      });
    }
    return out;
  }

  function drawTable() {
    const shown = visibleRows();
    const head = el("tr");
    COLUMNS.forEach((col, i) => {
      const arrow = state.sort === i ? (state.dir > 0 ? " ▲" : " ▼") : "";
      const th = el("th", null, col[1] + arrow);
      th.addEventListener("click", () => {
        state.dir = state.sort === i ? -state.dir : 1;
        state.sort = i;
        drawTable();
      });
      head.append(th);
    });
    const body = document.createDocumentFragment();
    for (const r of shown.slice(0, state.limit)) {
      const tr = el("tr", "v-" + r.verdict.replace(/\W/g, "-"));
      for (const col of COLUMNS) {
        const text = col[2](r);
        const td = el("td", "c-" + col[0], text);
        if (col[0] === "query" || col[0] === "answer" || col[0] === "gold") td.title = text;
        tr.append(td);
      }
      tr.addEventListener("click", () => {
        location.hash = "q=" + encodeURIComponent(r.qid);
      });
      body.append(tr);
    }
    const table = el("table", "queries", el("thead", null, head), el("tbody", null, body));
    const more = [];
    if (shown.length > state.limit) {
      const next = el("button", "more", "show " + Math.min(PAGE, shown.length - state.limit) + " more");
      next.addEventListener("click", () => {
        state.limit += PAGE;
        drawTable();
      });
      const all = el("button", "more", "show all " + shown.length);
      all.addEventListener("click", () => {
        state.limit = Infinity;
        drawTable();
      });
      more.push(next, all);
    }
    document.getElementById("queries").replaceChildren(table, ...more);
    const drawn = Math.min(shown.length, state.limit);
    document.querySelector("#filters .count").textContent =
      shown.length + " of " + rows.length + " rows" + (drawn < shown.length ? " (first " + drawn + " shown)" : "");
  }

  // ---- the trajectory viewer ----
  function load(row) {
    const key = row.run + "/" + row.n;
    if (cache.has(key)) return Promise.resolve(cache.get(key));
    return new Promise((resolve, reject) => {
      if (!waiting.has(key)) {
        waiting.set(key, []);
        const s = document.createElement("script");
        if (NONCE) s.nonce = NONCE;
        s.src = row.file;
        s.onerror = () => reject(new Error("could not load " + row.file + " (is report_html/ beside report.html?)"));
        document.head.append(s);
      }
      waiting.get(key).push(resolve);
    });
  }

  function expandable(text, cls) {
    text = text === null || text === undefined ? "" : String(text);
    const pre = el("pre", cls || "out", text.length > SHORT ? text.slice(0, SHORT) + " …" : text);
    if (text.length <= SHORT) return pre;
    const button = el("button", "expand", "show all " + text.length + " characters");
    button.addEventListener("click", () => {
      const full = pre.textContent.length < text.length;
      pre.textContent = full ? text : text.slice(0, SHORT) + " …";
      button.textContent = full ? "show less" : "show all " + text.length + " characters";
    });
    return el("div", null, pre, button);
  }

  function args(a) {
    if (a && typeof a === "object" && typeof a.command === "string" && Object.keys(a).length === 1) return a.command;
    return typeof a === "string" ? a : JSON.stringify(a);
  }

  function marks(step, inter) {
    const out = [];
    if (!inter) return out;
    const has = (k) => Array.isArray(inter[k]) && inter[k].includes(step.step);
    if (inter.gold_in_workspace_step === step.step) out.push(["gold-ws", "gold entered the workspace"]);
    if (inter.gold_surfaced_step === step.step) out.push(["gold-seen", "gold first surfaced"]);
    else if (has("gold_surfaced_steps")) out.push(["gold-seen2", "gold surfaced"]);
    if (has("gold_read_steps")) out.push(["gold-read", "gold read"]);
    return out;
  }

  function drawStep(step, inter) {
    const m = marks(step, inter);
    const ws = step.workspace
      ? "workspace " + fmt.text(step.workspace.docs) + " docs" + (step.workspace.added === null ? "" : " (+" + step.workspace.added + ")")
      : "";
    const head = el("div", "step-head", el("b", "tool", step.tool), " #" + step.step, " ", el("span", "meta", fmt.sec(step.seconds)));
    if (ws) head.append(" ", el("span", "ws", ws));
    for (const [cls, label] of m) head.append(" ", el("span", "badge " + cls, label));
    const box = el("div", "step " + m.map((x) => x[0]).join(" "), head, el("pre", "args", args(step.arguments)));
    box.append(expandable(step.output));
    return box;
  }

  function drawTurn(turn, inter) {
    const box = el("div", "turn");
    if (turn.call !== null && turn.call !== undefined) {
      const tokens = turn.input_tokens === undefined ? "" : turn.input_tokens + " → " + turn.output_tokens + " tokens";
      box.append(el("div", "turn-head", "model call " + turn.call, " ", el("span", "meta", [fmt.sec(turn.seconds), tokens, turn.cost_usd === undefined || turn.cost_usd === null ? "" : "≈" + fmt.usd(turn.cost_usd)].filter(Boolean).join(" · "))));
    }
    for (const key of ["reasoning", "text"]) {
      if (!turn[key]) continue; // what the model wrote before its tool calls, shown before them
      const box2 = el("div", "model-" + key, el("div", "said", key === "text" ? "model text" : "reasoning"), expandable(turn[key], "model-said"));
      const whole = turn[key + "_chars"];
      if (whole > turn[key].length) box2.append(el("div", "meta", "cut: the trajectory file keeps " + turn[key].length + " of its " + whole + " characters"));
      box.append(box2);
    }
    for (const s of turn.steps) box.append(drawStep(s, inter));
    return box;
  }

  function facts(pairs) {
    const dl = el("dl", "facts");
    for (const [k, v] of pairs) dl.append(el("dt", null, k), el("dd", null, fmt.text(v)));
    return dl;
  }

  function drawTrajectory(view, row) {
    const inter = view.interaction;
    const col = el("div", "traj");
    col.append(el("h3", null, runs[row.run].name, " ", el("span", "badge v-" + row.verdict.replace(/\W/g, "-"), row.verdict)));
    col.append(facts([
      ["answer", view.exact_answer], ["gold", view.answer], ["confidence", view.confidence],
      ["stop reason", view.stop_reason], ["cost", fmt.usd(view.cost_usd)], ["time", fmt.sec(view.elapsed_s)],
      ["model calls", view.model_calls], ["tool calls", row.tool_calls], ["workspace docs", view.workspace_docs],
      ["gold docs", (view.gold_doc_ids || []).join(", ") || null],
    ]));
    if (inter) {
      col.append(el("div", "inter", facts([
        ["gold in workspace at step", inter.gold_in_workspace_step], ["gold surfaced at step", inter.gold_surfaced_step],
        ["gold read", inter.gold_read === undefined ? null : inter.gold_read ? "yes" : "no"],
        ["gold lines read", inter.gold_lines_read], ["lines read", inter.lines_read],
        ["TOC lines read", inter.toc_lines_read], ["search calls", inter.search_calls],
      ])));
    }
    if (view.error) col.append(el("pre", "error", view.error));
    for (const t of view.turns) col.append(drawTurn(t, inter));
    col.append(el("div", "final", el("div", "turn-head", "final reply"), expandable(view.final_text)));
    return col;
  }

  function openQuery(qid) {
    const matches = byQuery.get(qid) || [];
    const viewer = document.getElementById("viewer");
    const close = el("button", "close", "close ✕");
    close.addEventListener("click", () => history.replaceState(null, "", location.pathname + location.search) || route());
    const head = el("div", "viewer-head", close, el("h2", null, "Query ", el("code", null, qid)));
    if (matches[0]) head.append(el("p", "question", fmt.text(matches[0].query)));
    const cols = el("div", "columns");
    cols.style.gridTemplateColumns = "repeat(" + Math.max(matches.length, 1) + ", minmax(0, 1fr))";
    if (!matches.length) cols.append(el("p", null, "no trajectory of this query in the report"));
    for (const r of matches) {
      const col = el("div", "traj", "loading " + r.file + " …");
      cols.append(col);
      load(r).then(
        (view) => {
          col.replaceWith(drawTrajectory(view, r));
          document.documentElement.dataset.trajectoryMs = Math.round(performance.now()); // read by bench and tests
        },
        (e) => (col.textContent = e.message)
      );
    }
    viewer.replaceChildren(head, cols);
    if (viewer.hidden) savedScroll = window.scrollY;
    viewer.hidden = false;
    document.body.classList.add("viewing");
    viewer.scrollTop = 0;
  }

  function route() {
    const h = location.hash;
    if (h.startsWith("#q=")) {
      let qid;
      try {
        qid = decodeURIComponent(h.slice(3));
      } catch (e) {
        qid = h.slice(3);
      }
      openQuery(qid);
    } else {
      document.getElementById("viewer").hidden = true;
      document.body.classList.remove("viewing");
      window.scrollTo(0, savedScroll); // back where the reader left the table
    }
  }

  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && location.hash.startsWith("#q=")) history.back();
  });
  window.addEventListener("hashchange", route);
  drawFilters();
  drawTable();
  void document.body.offsetHeight; // the layout is part of the first view: the bench's mark comes after it
  document.documentElement.dataset.firstViewMs = Math.round(performance.now()); // since navigation: bench reads it
  route();
})();
