/**
 * The HTML dashboard `assay serve` answers at `/`: one self-refreshing page showing run
 * status and progress, throughput over time (a uPlot chart served from `/assets`, no CDN),
 * pool occupancy and health, reported metrics as cards, recent errors, recent events and a
 * key-paged pipelines table.
 *
 * Escaping: the page is first rendered on the server from a {@link Snapshot}, with every
 * store value passed through {@link escapeHtml} (`HttpServerResponse.html` escapes nothing);
 * the page's script then refreshes it from the JSON endpoints and writes store values only
 * through `textContent` / attributes, never `innerHTML`. The script first reads `/stats`
 * to learn the run id, then asks `/metrics`, `/pipelines` and `/events` for that same id.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import type { MetricRow, Snapshot } from "./Monitor.js"
import { formatDuration, formatRate, holdOf } from "./Monitor.js"
import { formatMetric } from "./Report.js"

/**
 * Escapes text for HTML element content and quoted attribute values: `& < > " '` become
 * entities. `null`/`undefined` become the empty string; other values are stringified first.
 *
 * @since 0.1.0
 * @category escaping
 */
export const escapeHtml = (value: unknown): string =>
  (value === null || value === undefined ? "" : String(value)).replace(/[&<>"']/g, (c) =>
    c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&#39;")

/**
 * Options of {@link renderDashboard}: the page's refresh period (ms, default 2000) and the
 * `run_id` the page was opened with (`undefined` = latest run; passed on to every request).
 *
 * @since 0.1.0
 * @category models
 */
export interface DashboardOptions {
  readonly refreshMs?: number | undefined
  readonly runIdParam?: string | undefined
}

const STATES = ["succeeded", "failed", "running", "pending", "interrupted"] as const

const when = (ms: number | null): string => (ms === null ? "" : new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"))

const metricCard = (m: MetricRow): string =>
  `<div class="card metric" data-display="${escapeHtml(m.display)}"><div class="label">${escapeHtml(m.label ?? m.name)}</div><div class="value">${
    escapeHtml(formatMetric(m.value, m.display))
  }</div></div>`

/**
 * Renders the dashboard page for a snapshot (every store value escaped). The returned HTML
 * loads `/assets/uplot.js` and `/assets/uplot.css` and refreshes itself every `refreshMs`.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderDashboard = (s: Snapshot, options: DashboardOptions = {}): string => {
  const refreshMs = Math.max(250, options.refreshMs ?? 2000)
  const by = s.pipelines.by_state
  const title = s.run_id === null ? "no run yet" : s.run_id === "all" ? `all runs (${s.runs_total})` : `run ${s.run_id}`
  const status = s.run?.status ?? (s.run_id === null ? "" : s.running ? "running" : "finished")
  const rate = s.throughput.recent_per_sec ?? s.throughput.per_sec
  const pct = s.progress === null ? null : s.progress * 100
  const counters = STATES.map((st) =>
    `<div class="card count ${st}"><div class="label">${st}</div><div class="value" id="count-${st}">${by[st]}</div></div>`
  ).join("")
  const metrics = s.run_id === "all"
    ? `<p class="muted">Reported metrics are per run: open a run to see them.</p>`
    : s.metrics.map(metricCard).join("")
  const pools = s.resources.map((r) => {
    const frac = r.capacity === null || r.capacity === 0 ? 0 : Math.min(1, (r.active ?? 0) / r.capacity)
    const hold = holdOf(r, s.generated_at)
    return `<tr><td>${escapeHtml(r.pool)}/${escapeHtml(r.resource_id)}</td><td><span class="state ${escapeHtml(r.state ?? "")}">${
      escapeHtml(r.state ?? "?")
    }</span>${hold === "" ? "" : ` <span class="hold">${escapeHtml(hold)}</span>`}</td><td><div class="occ"><div class="fill" style="width:${(frac * 100).toFixed(1)}%"></div></div> ${escapeHtml(r.active ?? 0)}/${
      escapeHtml(r.capacity ?? "?")
    }</td><td>${r.pool_wait_ms_p95 === null ? "" : escapeHtml(formatDuration(r.pool_wait_ms_p95))}</td><td>${escapeHtml(r.consecutive_failures ?? 0)}</td></tr>`
  }).join("")
  const errors = s.recent_errors.map((e) =>
    `<tr><td class="mono">${escapeHtml(e.pipeline_id.slice(0, 12))}</td><td>${escapeHtml(e.failed_task)}</td><td>${escapeHtml(e.error_class)}</td><td class="msg">${
      escapeHtml([e.error_type, e.error_message].filter((x) => x !== null).join(": "))
    }</td><td>${escapeHtml(when(e.ended_at))}</td></tr>`
  ).join("")
  const config = JSON.stringify({ refreshMs, runId: options.runIdParam ?? null }).replace(/</g, "\\u003c")
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>assay · ${escapeHtml(title)}</title>
<link rel="stylesheet" href="/assets/uplot.css">
<style>${CSS}</style>
</head>
<body>
<header>
  <h1>assay <span id="run-title">${escapeHtml(title)}</span></h1>
  <span id="run-status" class="status ${escapeHtml(status)}">${escapeHtml(status)}</span>
  <span id="run-label" class="muted">${escapeHtml(s.run?.label ?? "")}</span>
  <span class="muted right">read-only · refreshes every ${(refreshMs / 1000).toFixed(refreshMs % 1000 === 0 ? 0 : 1)} s · <span id="updated">${escapeHtml(when(s.generated_at))}</span></span>
</header>
<main>
<section class="progress">
  <div class="bar"><div id="progress-fill" class="fill" style="width:${pct === null ? 0 : pct.toFixed(1)}%"></div></div>
  <div class="figures">
    <span><b id="done">${s.done}</b> / <b id="total">${s.total ?? s.pipelines.total}</b> <span id="total-kind" class="muted">${s.total === null ? "admitted (source size unknown)" : "from source"}</span></span>
    <span id="pct">${pct === null ? "" : `${pct.toFixed(1)}%`}</span>
    <span>rate <b id="rate">${rate === null ? "–" : escapeHtml(formatRate(rate))}</b></span>
    <span>ETA <b id="eta">${s.eta_ms === null ? "–" : escapeHtml(formatDuration(s.eta_ms))}</b></span>
    <span>elapsed <b id="elapsed">${s.elapsed_ms === null ? "–" : escapeHtml(formatDuration(s.elapsed_ms))}</b></span>
    <span>attempts <b id="attempts">${s.attempts_total}</b></span>
    <span>retries <b id="retries">${s.retries}</b></span>
    <span>latency p50/p95/p99 <b id="latency">${
    s.latency_ms === null
      ? "–"
      : escapeHtml(`${formatDuration(s.latency_ms.p50)} / ${formatDuration(s.latency_ms.p95)} / ${formatDuration(s.latency_ms.p99)}`)
  }</b></span>
  </div>
</section>
<section class="grid counters">${counters}</section>
<section><h2>Throughput</h2><div id="chart" data-points="${s.throughput.series.length}" data-done="${s.done}"></div></section>
<section><h2>Reported metrics</h2><div id="metrics" class="grid">${metrics}</div></section>
<section class="two">
  <div><h2>Pools</h2><table><thead><tr><th>resource</th><th>state</th><th>active / capacity</th><th>wait p95</th><th>failures</th></tr></thead><tbody id="pools">${pools}</tbody></table></div>
  <div><h2>Recent events</h2><table><thead><tr><th>time</th><th>kind</th><th>pipeline</th></tr></thead><tbody id="events"></tbody></table></div>
</section>
<section><h2>Recent errors</h2><table><thead><tr><th>pipeline</th><th>task</th><th>class</th><th>error</th><th>ended</th></tr></thead><tbody id="errors">${errors}</tbody></table></section>
<section><h2>Pipelines <button id="first-page">first page</button> <button id="next-page" disabled>next page</button></h2>
<table><thead><tr><th>pipeline</th><th>name</th><th>state</th><th>tasks</th><th>attempts</th><th>metrics</th><th>error</th></tr></thead><tbody id="pipelines"></tbody></table></section>
</main>
<script id="assay-config" type="application/json">${config}</script>
<script src="/assets/uplot.js"></script>
<script>${SCRIPT}</script>
</body>
</html>
`
}

const CSS = `
:root { --ok:#1a7f37; --bad:#cf222e; --warn:#9a6700; --run:#0969da; --muted:#57606a; --line:#d0d7de; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
header { display:flex; gap:12px; align-items:baseline; padding:12px 20px; background:#fff; border-bottom:1px solid var(--line); }
h1 { font-size:18px; margin:0; } h2 { font-size:15px; margin:16px 0 8px; }
main { padding: 0 20px 20px; }
.muted { color: var(--muted); } .right { margin-left:auto; } .mono { font-family: ui-monospace, monospace; }
.status { padding:2px 8px; border-radius:10px; background:#eaeef2; }
.status.running { background:#ddf4ff; color:var(--run); } .status.completed { background:#dafbe1; color:var(--ok); }
.status.interrupted, .status.failed { background:#fff8c5; color:var(--warn); }
.progress { margin-top:16px; background:#fff; border:1px solid var(--line); border-radius:6px; padding:12px; }
.bar, .occ { background:#eaeef2; border-radius:4px; height:14px; overflow:hidden; }
.occ { display:inline-block; width:80px; height:10px; vertical-align:middle; }
.fill { background:var(--run); height:100%; transition: width .3s; }
.figures { display:flex; flex-wrap:wrap; gap:18px; margin-top:8px; }
.grid { display:flex; flex-wrap:wrap; gap:10px; margin-top:12px; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px 14px; min-width:110px; }
.card .label { color:var(--muted); font-size:12px; } .card .value { font-size:22px; font-weight:600; }
.count.succeeded .value { color:var(--ok); } .count.failed .value { color:var(--bad); } .count.running .value { color:var(--run); }
#chart { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px; min-height:240px; }
table { border-collapse:collapse; width:100%; background:#fff; border:1px solid var(--line); }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
td.msg { white-space:pre-wrap; word-break:break-word; max-width:600px; }
.state.ready { color:var(--ok); } .state.degraded, .state.cooldown { color:var(--warn); } .state.dead { color:var(--bad); }
.two { display:grid; grid-template-columns: 1fr 1fr; gap:16px; }
`

// The page's script: plain ES2019, no framework. Store values only ever reach the DOM through
// textContent, className tokens checked against a fixed list, or numeric style values.
const SCRIPT = `
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("assay-config").textContent);
  var state = { runId: null, after: null, next: null, refreshes: 0, chart: null, errors: 0 };
  window.__assay = state;
  var STATES = ["succeeded", "failed", "running", "pending", "interrupted"];
  function $(id) { return document.getElementById(id); }
  function q(params) {
    var parts = [];
    Object.keys(params).forEach(function (k) {
      if (params[k] !== null && params[k] !== undefined) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(params[k]));
    });
    return parts.length ? "?" + parts.join("&") : "";
  }
  function getJson(path, params) {
    return fetch(path + q(params), { headers: { accept: "application/json" } }).then(function (r) {
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return r.json();
    });
  }
  function text(id, value) { var el = $(id); if (el) el.textContent = value === null || value === undefined ? "" : String(value); }
  function dur(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "\\u2013";
    if (ms < 1000) return Math.round(ms) + "ms";
    var s = Math.round(ms / 1000); if (s < 60) return s + "s";
    var m = Math.floor(s / 60); if (m < 60) return m + "m" + String(s % 60).padStart(2, "0") + "s";
    var h = Math.floor(m / 60); if (h < 24) return h + "h" + String(m % 60).padStart(2, "0") + "m";
    return Math.floor(h / 24) + "d" + String(h % 24).padStart(2, "0") + "h";
  }
  function rate(r) { return r === null || r === undefined ? "\\u2013" : r >= 1000 ? (r / 1000).toFixed(1) + "k/s" : r >= 10 ? r.toFixed(1) + "/s" : r.toFixed(2) + "/s"; }
  function when(ms) { return ms === null || ms === undefined ? "" : new Date(ms).toISOString().replace("T", " ").replace(/\\.\\d+Z$/, "Z"); }
  function metricText(m) {
    if (m.display === "percent" && typeof m.value === "number") return (m.value * 100).toFixed(1) + "%";
    if (m.display === "number" && typeof m.value === "number") return String(Number(m.value.toPrecision(6)));
    return typeof m.value === "string" ? m.value : JSON.stringify(m.value);
  }
  function el(tag, cls, content) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined && content !== null) e.textContent = String(content);
    return e;
  }
  function row(cells) {
    var tr = document.createElement("tr");
    cells.forEach(function (c) { tr.appendChild(c instanceof Node ? c : el("td", null, c)); });
    return tr;
  }
  function replace(id, nodes) { var t = $(id); while (t.firstChild) t.removeChild(t.firstChild); nodes.forEach(function (n) { t.appendChild(n); }); }
  var KNOWN = { running: 1, completed: 1, interrupted: 1, failed: 1, finished: 1, ready: 1, degraded: 1, cooldown: 1, dead: 1 };
  function safeClass(base, token) { return KNOWN[token] ? base + " " + token : base; }

  function renderStats(s) {
    var title = s.run_id === null ? "no run yet" : s.run_id === "all" ? "all runs (" + s.runs_total + ")" : "run " + s.run_id;
    text("run-title", title);
    document.title = "assay \\u00b7 " + title;
    var status = s.run ? s.run.status : (s.run_id === null ? "" : s.running ? "running" : "finished");
    text("run-status", status);
    $("run-status").className = safeClass("status", status);
    text("run-label", s.run && s.run.label ? s.run.label : "");
    text("updated", when(s.generated_at));
    STATES.forEach(function (st) { text("count-" + st, s.pipelines.by_state[st]); });
    text("done", s.done);
    text("total", s.total !== null ? s.total : s.pipelines.total);
    text("total-kind", s.total !== null ? "from source" : "admitted (source size unknown)");
    text("pct", s.progress === null ? "" : (s.progress * 100).toFixed(1) + "%");
    $("progress-fill").style.width = (s.progress === null ? 0 : Math.max(0, Math.min(100, s.progress * 100))) + "%";
    var r = s.throughput.recent_per_sec !== null ? s.throughput.recent_per_sec : s.throughput.per_sec;
    text("rate", rate(r));
    text("eta", dur(s.eta_ms));
    text("elapsed", dur(s.elapsed_ms));
    text("attempts", s.attempts_total);
    text("retries", s.retries);
    text("latency", s.latency_ms ? dur(s.latency_ms.p50) + " / " + dur(s.latency_ms.p95) + " / " + dur(s.latency_ms.p99) : "\\u2013");
    replace("pools", s.resources.map(function (x) {
      var frac = x.capacity ? Math.min(1, (x.active || 0) / x.capacity) : 0;
      var occ = el("td"); var bar = el("div", "occ"); var fill = el("div", "fill");
      fill.style.width = (frac * 100).toFixed(1) + "%"; bar.appendChild(fill); occ.appendChild(bar);
      occ.appendChild(document.createTextNode(" " + (x.active || 0) + "/" + (x.capacity === null ? "?" : x.capacity)));
      var st = el("td"); st.appendChild(el("span", safeClass("state", x.state), x.state === null ? "?" : x.state));
      var now = s.generated_at, until = x.throttled_until !== null && x.throttled_until > now ? ["throttled", x.throttled_until] : x.breaker_until !== null && x.breaker_until > now ? ["breaker open", x.breaker_until] : null;
      if (until !== null) { var t = new Date(until[1]); st.appendChild(el("span", "hold", " " + until[0] + " until " + (until[1] - now >= 86400000 ? t.toISOString() : t.toTimeString().slice(0, 8)))); }
      return row([el("td", null, x.pool + "/" + x.resource_id), st, occ, x.pool_wait_ms_p95 === null ? "" : dur(x.pool_wait_ms_p95), x.consecutive_failures || 0]);
    }));
    replace("errors", s.recent_errors.map(function (e) {
      var msg = [e.error_type, e.error_message].filter(function (v) { return v !== null; }).join(": ");
      return row([el("td", "mono", e.pipeline_id.slice(0, 12)), e.failed_task || "", e.error_class || "", el("td", "msg", msg), when(e.ended_at)]);
    }));
    renderChart(s);
  }

  function renderChart(s) {
    var series = s.throughput.series;
    var box = $("chart");
    box.setAttribute("data-points", String(series.length));
    box.setAttribute("data-done", String(s.done));
    if (typeof uPlot === "undefined") return;
    var bucketS = s.throughput.bucket_ms / 1000;
    var xs = [], perSec = [], cumulative = [], acc = 0;
    series.forEach(function (p) { xs.push(p[0] / 1000); perSec.push(p[1] / bucketS); acc += p[1]; cumulative.push(acc); });
    var data = [xs, perSec, cumulative];
    if (state.chart === null) {
      state.chart = new uPlot({
        width: Math.max(300, box.clientWidth - 16), height: 220,
        series: [{}, { label: "completed / s", stroke: "#0969da", fill: "rgba(9,105,218,0.1)", scale: "rate" },
                     { label: "done (cumulative)", stroke: "#1a7f37", scale: "done" }],
        axes: [{}, { scale: "rate", label: "per s" }, { scale: "done", side: 1, label: "done", grid: { show: false } }],
        scales: { x: { time: true } }
      }, data, box);
    } else {
      state.chart.setData(data);
    }
  }

  function renderMetrics(m) {
    if (state.runId === "all") {
      replace("metrics", [el("p", "muted", "Reported metrics are per run: open a run to see them.")]);
      return;
    }
    replace("metrics", m.rows.filter(function (x) { return x.pipeline_id === null; }).map(function (x) {
      var card = el("div", "card metric"); card.setAttribute("data-display", x.display);
      card.appendChild(el("div", "label", x.label || x.name)); card.appendChild(el("div", "value", metricText(x)));
      return card;
    }));
  }

  function renderPipelines(p) {
    state.next = p.next;
    $("next-page").disabled = p.next === null;
    replace("pipelines", p.rows.map(function (x) {
      var metrics = x.reported_metrics.map(function (m) { return (m.label || m.name) + "=" + metricText(m); }).join(", ");
      var st = el("td"); st.appendChild(el("span", safeClass("state", x.state), x.state));
      var err = [x.error_type, x.error_message].filter(function (v) { return v !== null; }).join(": ");
      return row([el("td", "mono", x.pipeline_id.slice(0, 12)), x.name, st, x.n_tasks_done + "/" + x.n_tasks_total, x.attempts_total, metrics, el("td", "msg", err)]);
    }));
  }

  function renderEvents(e) {
    replace("events", e.rows.slice().reverse().map(function (x) {
      return row([when(x.ts), x.kind, el("td", "mono", x.pipeline_id ? x.pipeline_id.slice(0, 12) : "")]);
    }));
  }

  function refresh() {
    return getJson("/stats", { run_id: config.runId }).then(function (s) {
      state.runId = s.run_id;
      renderStats(s);
      if (s.run_id === null) return;
      var sel = { run_id: s.run_id };
      return Promise.all([
        getJson("/metrics", sel).then(renderMetrics),
        getJson("/pipelines", { run_id: s.run_id, after: state.after, limit: 25 }).then(renderPipelines),
        getJson("/events", { run_id: s.run_id, limit: 15 }).then(renderEvents)
      ]);
    }).then(function () { state.refreshes++; }, function (err) { state.errors++; text("updated", "refresh failed: " + err.message); });
  }
  $("first-page").addEventListener("click", function () { state.after = null; refresh(); });
  $("next-page").addEventListener("click", function () { if (state.next) { state.after = state.next; refresh(); } });
  function loop() { refresh().then(function () { setTimeout(loop, config.refreshMs); }); }
  loop();
})();
`

/**
 * The `Content-Security-Policy` header of the dashboard: scripts only from the server and the
 * page's own inline script (pinned by its SHA-256 hash), so that markup that slipped through
 * escaping still could not run; no other origin is contacted.
 *
 * @since 0.1.0
 * @category security
 */
export const DASHBOARD_CSP = `default-src 'none'; script-src 'self' 'sha256-${
  createHash("sha256").update(SCRIPT, "utf8").digest("base64")
}'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`
