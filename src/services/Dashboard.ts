/**
 * The HTML dashboard `assay serve` answers at `/`: one self-refreshing page showing, by
 * default, the whole store (every run's pipelines, each as its last run left it: after a
 * `resume` the full evaluation, not only what the resume ran), with the latest run and every
 * recent run one click away (`?run_id=latest`, `?run_id=<id>`): status (a run whose writer
 * died reads `stale`), progress, throughput over time (a uPlot chart served from `/assets`, no
 * CDN), pool occupancy, health and resource options (secrets masked by the store, variable
 * names such as `apiKeyEnv` shown), reported metrics as cards, recent errors, recent events and
 * a key-paged pipelines table. Pipeline and run ids are shown whole, each with a copy button.
 * Each table links its rows as CSV and JSONL downloads (`/export`): the bytes `assay export`
 * writes for the same rows.
 *
 * Escaping: the page is first rendered on the server from a {@link Snapshot}, with every
 * store value passed through {@link escapeHtml} (`HttpServerResponse.html` escapes nothing);
 * the page's script then refreshes it from the JSON endpoints and writes store values only
 * through `textContent` / attributes, never `innerHTML`. The script first reads `/stats`
 * to learn the selection, then asks `/pipelines` and `/events` for that same selection.
 *
 * On a study's output root (`studyLink`) the header links the Study page (`/study/page`,
 * src/services/internal/studyPage.ts); any other store shows no Study link.
 *
 * On a suite root (the snapshot has `suite`) the page also lists the members (counts, source
 * status, member-scoped metrics), each linking to its detail view (`?experiment=ID`, kept on
 * every request the page makes, with the selected run), and marks each pool shared or private.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import type { MemberWire, MetricRow, ResourceRow, RunView, Snapshot } from "./internal/monitor.js"
import { formatDuration, formatRate, holdOf } from "./internal/monitor.js"
import { callsText, formatCost, formatUsd } from "./internal/money.js"
import { SKIP_REASON_WORDS } from "../domain/internal/words.js"
import { formatMetric } from "./internal/report.js"
import { transitionsText } from "../domain/internal/transitions.js"

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
 * `run_id` the page was opened with (`undefined` = the server's default selection; passed on
 * to every request), and on a suite root the `experiment` it was opened with (likewise).
 *
 * @since 0.1.0
 * @category models
 */
export interface DashboardOptions {
  readonly refreshMs?: number | undefined
  readonly runIdParam?: string | undefined
  /** The `experiment` the page was opened with (a suite member; passed on to every request). */
  readonly experimentParam?: string | undefined
  /**
   * Whether the page of a member links back to the whole suite (default `true`; `false` when the
   * server itself shows one member by default, `serve ROOT --experiment ID`).
   */
  readonly suiteLink?: boolean | undefined
  /** Whether a study ran in the served root: the page then links its Study page (default `false`). */
  readonly studyLink?: boolean | undefined
}

/** The pipeline states in card order, with the words shown for them. */
const STATES = [
  ["succeeded", "succeeded", "finished with a result"],
  ["failed", "failed", "finished with an error (not retried further)"],
  ["interrupted", "interrupted", "stopped before finishing; a resume continues them"],
  ["running", "admitted", "admitted by a run and not finished: in flight, waiting for a worker or for a retry (stored state running)"],
  ["pending", "pending", "recorded, not yet admitted"]
] as const

const when = (ms: number | null): string => (ms === null ? "" : new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"))

/** A copy button for `value` (the page's script copies its `data-copy`). */
const copyButton = (value: string): string =>
  `<button type="button" class="copy" data-copy="${escapeHtml(value)}" title="copy to the clipboard">copy</button>`

/** An id shown whole, in monospace, with its copy button. */
const idCell = (id: string): string => `<td class="mono id">${escapeHtml(id)} ${copyButton(id)}</td>`

const metricCard = (m: MetricRow): string =>
  `<div class="card metric" data-display="${escapeHtml(m.display)}"><div class="label">${escapeHtml(m.label ?? m.name)}</div><div class="value">${
    escapeHtml(formatMetric(m.value, m.display))
  }</div></div>`

/**
 * The status word of a snapshot on the page: a run's stored status, `stale` for a run stored
 * as running whose writer died; for the whole store `running`, `stale` or `finished`.
 */
const statusWord = (s: Snapshot): string =>
  s.run !== null ? (s.run.stale ? "stale" : s.run.status) : s.run_id === null ? "" : s.running ? "running" : s.stale ? "stale" : "finished"

const runStatus = (r: RunView): string => (r.stale ? "stale" : r.status)

/**
 * The `/export` link of a table's rows for the page's selection: `rows` of the export kind,
 * `format`, an optional pipeline `state` filter.
 */
const exportHref = (runId: string | null, rows: string, format: string, state?: string): string => {
  const q = [`rows=${rows}`, `format=${format}`]
  if (runId !== null) q.push(`run_id=${encodeURIComponent(runId)}`)
  if (state !== undefined) q.push(`state=${state}`)
  return `/export?${q.join("&")}`
}

/** The download links of one table (`data-*` attributes let the script re-point them). */
const downloads = (runId: string | null, rows: string, label: string, state?: string): string =>
  `<span class="downloads">${escapeHtml(label)}: ${
    ["csv", "jsonl"].map((f) =>
      `<a class="download" download data-rows="${rows}" data-format="${f}"${state === undefined ? "" : ` data-state="${state}"`} href="${
        escapeHtml(exportHref(runId, rows, f, state))
      }">${f.toUpperCase()}</a>`
    ).join(" · ")
  }</span>`

/** A resource's options as `key: value` pairs (as stored: secrets masked, variable names shown). */
const optionsText = (spec: unknown): string => {
  const options = typeof spec === "object" && spec !== null ? (spec as { options?: unknown }).options : undefined
  if (typeof options !== "object" || options === null) return ""
  return Object.entries(options as Record<string, unknown>)
    .map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(", ")
}

/** A suite pool's scope as the page says it: `shared`, or `private to ID` for `experiment:ID:NAME`. */
const poolScope = (pool: string): string => {
  const m = /^experiment:([^:]+):/.exec(pool)
  return m === null ? "shared" : `private to ${m[1]}`
}

const sourceWord = (m: MemberWire): string =>
  m.source_status === "error"
    ? `source error: ${m.source?.source_error ?? ""}`
    : m.source_status === "exhausted"
    ? "source exhausted"
    : m.source_status === "limit"
    ? "limit reached"
    : m.source_status === "running"
    ? "source not exhausted yet (running)"
    : m.source_status === "interrupted"
    ? "source not exhausted (run ended)"
    : m.source_status === "failures"
    ? "stopped by its own stopAfterFailures"
    : m.source_status === "not_selected"
    ? "not selected"
    : "never run"

/** The members table of a suite root's page: each member links to its detail view. */
const renderMembers = (s: Snapshot, runIdParam: string | undefined, suiteLink: boolean): string => {
  const suite = s.suite!
  const link = (id: string | undefined) => {
    const parts = [runIdParam === undefined ? "" : `run_id=${encodeURIComponent(runIdParam)}`, id === undefined ? "" : `experiment=${encodeURIComponent(id)}`]
      .filter((x) => x !== "")
    return `/${parts.length === 0 ? "" : `?${parts.join("&")}`}`
  }
  const rows = suite.members.map((m) =>
    `<tr class="${m.experiment_id === suite.experiment ? "selected" : ""}"><td class="mono id"><a class="member" href="${escapeHtml(link(m.experiment_id))}">${
      escapeHtml(m.experiment_id)
    }</a></td><td>${escapeHtml(m.label ?? "")}</td><td>${escapeHtml(m.pipelines)}</td><td>${escapeHtml(m.by_state.succeeded)}</td><td>${
      escapeHtml(m.by_state.failed)
    }</td><td>${escapeHtml(m.by_state.interrupted)}</td><td>${escapeHtml(m.skipped ?? (m.skipped_recorded ? "" : "not recorded"))}</td><td class="superseded">${escapeHtml(m.superseded > 0 ? m.superseded : "")}</td><td class="msg">${escapeHtml(sourceWord(m))}</td><td>${
      escapeHtml(m.metrics.map((x) => `${x.label ?? x.name}: ${formatMetric(x.value, x.display)}`).join(", "))
    }</td></tr>`
  ).join("")
  const scope = suite.experiment === null
    ? "all members"
    : `member <span class="mono">${escapeHtml(suite.experiment)}</span>${
      suiteLink ? ` · <a id="whole-suite" href="${escapeHtml(link(undefined))}">whole suite</a>` : ""
    }`
  return `<section id="suite"><h2>Suite <span class="mono">${escapeHtml(suite.suite_id)}</span> (${escapeHtml(suite.layout)}) · ${scope}</h2>
<table><thead><tr><th>member</th><th>label</th><th>pipelines</th><th>succeeded</th><th>failed</th><th>interrupted</th><th>skipped</th><th title="pipelines of input rows edited or removed since they ran (accepted): kept as history, not counted in pipelines">superseded</th><th>source</th><th>metrics</th></tr></thead><tbody id="members">${rows}</tbody></table></section>
`
}

/** The call cache's figures as the dashboard shows them (`–` when the cache did nothing). */
const cacheText = (c: Snapshot["cache"]): string =>
  c === undefined
    ? "\u2013"
    : `${c.hits} / ${c.misses}${c.refreshed > 0 ? ` · refreshed ${c.refreshed}` : ""}${c.bypassed > 0 ? ` · read-only misses ${c.bypassed}` : ""} (${c.tokens_saved.total_tokens} tokens${
      c.cost_saved_usd === null ? "" : `, ${formatUsd(c.cost_saved_usd)}`
    } saved)${
      c.lookup_failures > 0 ? ` · ${c.lookup_failures} cache lookup${c.lookup_failures === 1 ? "" : "s"} failed` : ""
    }${
      c.write_failures > 0 ? ` · ${c.write_failures} cache write${c.write_failures === 1 ? "" : "s"} failed` : ""
    }`

/**
 * The model calls sent, token and cost totals as the dashboard shows them (`–` when no attempt
 * carried usage): `calls 12 (10 answered, 2 refused with 429) · 1200 in / 340 out · $0.0031`
 * (the calls as the run's summary, `report` and `watch` count them: `callsText`).
 */
const accountingText = (a: Snapshot["accounting"]): string =>
  a === undefined
    ? "\u2013"
    : `calls ${callsText({ calls: a.calls, refused: a.refused, failedCalls: a.failed_calls })} · ${a.tokens_in} in / ${a.tokens_out} out${a.estimated > 0 ? ` (${a.estimated} estimated)` : ""} · ${formatCost(a.cost_usd, a.unpriced)}`

/**
 * The scope of the page's tokens and cost when the store holds other runs: a run's figures
 * are that run's only (a resumed experiment's earlier runs are in the whole-store view).
 */
const costScope = (s: Snapshot): string =>
  s.run_id !== null && s.run_id !== "all" && s.runs_total > 1 ? `(this run only; whole experiment: view whole store, ${s.runs_total} runs)` : ""

/** A pool resource's tokens and cost as the dashboard shows them ("" when its scope made no model calls). */
const resourceAccountingText = (a: ResourceRow["accounting"]): string =>
  a === undefined ? "" : a === null ? "\u2013" : `${a.tokens_in} in / ${a.tokens_out} out · ${formatCost(a.cost_usd, a.unpriced)}`

/**
 * Renders the dashboard page for a snapshot (every store value escaped). The returned HTML
 * loads `/assets/uplot.js` and `/assets/uplot.css` and refreshes itself every `refreshMs`.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderDashboard = (s: Snapshot, options: DashboardOptions = {}): string => {
  const refreshMs = Math.max(250, options.refreshMs ?? 2000)
  const member = options.experimentParam
  /** A link to a run of the view shown (the member kept). */
  const withMember = (runId: string) => `/?run_id=${encodeURIComponent(runId)}${member === undefined ? "" : `&experiment=${encodeURIComponent(member)}`}`
  const by = s.pipelines.by_state
  const title = s.run_id === null ? "no run yet" : s.run_id === "all" ? `whole store (${s.runs_total} runs)` : `run ${s.run_id}`
  const status = statusWord(s)
  const rate = s.throughput.recent_per_sec ?? s.throughput.per_sec
  const pct = s.progress === null ? null : s.progress * 100
  const counters = STATES.map(([st, word, help]) =>
    `<div class="card count ${st}" title="${escapeHtml(help)}"><div class="label">${word}</div><div class="value" id="count-${st}">${by[st]}</div></div>`
  ).join("")
  const metricsNote = s.run_id === "all" && s.metrics_run_id !== null ? `of run ${s.metrics_run_id} (the latest that reported any)` : ""
  const metrics = s.metrics.map(metricCard).join("")
  const pools = s.resources.map((r) => {
    const frac = r.capacity === null || r.capacity === 0 ? 0 : Math.min(1, (r.active ?? 0) / r.capacity)
    const hold = holdOf(r, s.generated_at)
    return `<tr><td>${escapeHtml(r.pool)}/${escapeHtml(r.resource_id)}${s.suite === undefined ? "" : ` <span class="muted">(${escapeHtml(poolScope(r.pool))})</span>`}</td><td><span class="state ${escapeHtml(r.state ?? "")}">${
      escapeHtml(r.state ?? "?")
    }</span>${hold === "" ? "" : ` <span class="hold">${escapeHtml(hold)}</span>`}${
      r.algorithm_text === "" ? "" : ` <span class="muted algo">${escapeHtml(r.algorithm_text)}</span>`
    }${r.restored_text === "" ? "" : ` <span class="muted restored">${escapeHtml(r.restored_text)}</span>`}</td><td><div class="occ"><div class="fill" style="width:${(frac * 100).toFixed(1)}%"></div></div> ${escapeHtml(r.active ?? 0)}/${
      escapeHtml(r.capacity ?? "?")
    }</td><td>${r.pool_wait_ms_p95 === null ? "" : escapeHtml(formatDuration(r.pool_wait_ms_p95))}</td><td>${escapeHtml(r.consecutive_failures ?? 0)}</td><td class="cost">${
      escapeHtml(resourceAccountingText(r.accounting))
    }</td><td class="msg">${
      escapeHtml(optionsText(r.spec))
    }</td></tr>`
  }).join("") + (s.pool_totals ?? []).map((t) =>
    `<tr class="subtotal"><td>pool ${escapeHtml(t.pool)} subtotal <span class="muted">(${t.resources} resources, ${t.attempts} attempts)</span></td><td></td><td></td><td></td><td></td><td class="cost">${
      escapeHtml(resourceAccountingText(t))
    }</td><td></td></tr>`
  ).join("")
  const errors = s.recent_errors.map((e) =>
    `<tr>${idCell(e.pipeline_id)}<td>${escapeHtml(e.failed_task)}</td><td>${escapeHtml(e.error_class)}</td><td class="msg">${
      escapeHtml([e.error_type, e.error_message].filter((x) => x !== null).join(": "))
    }</td><td>${escapeHtml(when(e.ended_at))}</td></tr>`
  ).join("")
  const runs = s.recent_runs.map((r) =>
    `<tr class="${r.run_id === s.run_id ? "selected" : ""}"><td class="mono id"><a href="${escapeHtml(withMember(r.run_id))}">${
      escapeHtml(r.run_id)
    }</a> ${copyButton(r.run_id)}</td><td>${escapeHtml(r.label ?? "")}</td><td><span class="status ${escapeHtml(runStatus(r))}">${
      escapeHtml(runStatus(r))
    }</span></td><td>${escapeHtml(when(r.started_at))}</td><td>${escapeHtml(when(r.ended_at))}</td><td>${escapeHtml(r.stop_reason ?? "")}</td></tr>`
  ).join("")
  const latest = s.latest_run
  const nav = `<nav id="views">view: <a id="view-all" class="${s.run_id === "all" ? "current" : ""}" href="${
    escapeHtml(withMember("all"))
  }">${s.suite === undefined ? "whole store" : "cumulative"} (<span id="runs-total">${s.runs_total}</span> runs)</a> · <a id="view-latest" class="${
    latest !== null && s.run_id === latest.run_id ? "current" : ""
  }" href="${escapeHtml(withMember("latest"))}">latest run <span id="latest-id" class="mono">${escapeHtml(latest?.run_id ?? "–")}</span></a></nav>`
  const suiteSection = s.suite === undefined ? "" : renderMembers(s, options.runIdParam, options.suiteLink !== false)
  // the skip reasons in words for the event list (the events' data keep the codes)
  const config = JSON.stringify({ refreshMs, runId: options.runIdParam ?? null, experiment: member ?? null, skipReasons: SKIP_REASON_WORDS })
    .replace(/</g, "\\u003c")
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
  ${nav}${options.studyLink === true ? ` · <a id="study-tab" class="study-tab" href="/study/page">Study</a>` : ""}
  <span class="muted right">read-only · refreshes every ${(refreshMs / 1000).toFixed(refreshMs % 1000 === 0 ? 0 : 1)} s · <span id="updated">${escapeHtml(when(s.generated_at))}</span></span>
</header>
<main>
<section class="progress">
  <div class="bar"><div id="progress-fill" class="fill" style="width:${pct === null ? 0 : pct.toFixed(1)}%"></div></div>
  <div class="figures">
    <span><b id="done">${s.done}</b> / <b id="total">${s.total ?? s.pipelines.total}</b> done <span id="total-kind" class="muted">${
    s.total === null ? "(of the pipelines admitted: source size unknown)" : "(of the source)"
  }</span></span>
    <span id="pct">${pct === null ? "" : `${pct.toFixed(1)}%`}</span>
    <span>interrupted <b id="interrupted">${by.interrupted}</b></span>
    <span>rate <b id="rate">${rate === null ? "–" : escapeHtml(formatRate(rate))}</b></span>
    <span>ETA <b id="eta">${s.eta_ms === null ? "–" : escapeHtml(formatDuration(s.eta_ms))}</b></span>
    <span>elapsed <b id="elapsed">${s.elapsed_ms === null ? "–" : escapeHtml(formatDuration(s.elapsed_ms))}</b></span>
    <span>attempts <b id="attempts">${s.attempts_total}</b></span>
    <span>retries <b id="retries">${s.retries}</b></span>
    <span>transitions <b id="handoffs">${escapeHtml(transitionsText(s.handoffs_total, s.handoffs_budgeted ?? undefined))}</b></span>
    <span>cache hits/misses <b id="cache">${escapeHtml(cacheText(s.cache))}</b></span>
    <span>model calls / tokens / cost <b id="cost">${escapeHtml(accountingText(s.accounting))}</b> <span id="cost-scope" class="muted">${escapeHtml(costScope(s))}</span></span>
    <span title="each ended pipeline's time from admission to end: includes waiting for a worker slot (run.concurrency), so it is not the pipelines' own execution time">time in run p50/p95/p99 (incl. queueing) <b id="latency">${
    s.latency_ms === null
      ? "–"
      : escapeHtml(`${formatDuration(s.latency_ms.p50)} / ${formatDuration(s.latency_ms.p95)} / ${formatDuration(s.latency_ms.p99)}`)
  }</b></span>
  </div>
</section>
${suiteSection}<section class="grid counters">${counters}</section>
<section><h2>Throughput</h2><div id="chart" data-points="${s.throughput.series.length}" data-done="${s.done}"></div></section>
<section><h2>Reported metrics <span id="metrics-note" class="muted">${escapeHtml(metricsNote)}</span></h2><div id="metrics" class="grid">${metrics}</div></section>
<section class="two">
  <div><h2>Pools</h2><table><thead><tr><th>resource</th><th>state</th><th>active / capacity</th><th>wait p95</th><th>failures</th><th title="tokens in / out and known cost in USD of the attempts that leased the resource (unpriced: calls with tokens but no price)">tokens / cost</th><th>options</th></tr></thead><tbody id="pools">${pools}</tbody></table></div>
  <div><h2>Recent events ${downloads(s.run_id, "events", "all events")}</h2><table><thead><tr><th>time</th><th>kind</th><th>pipeline</th><th>detail</th></tr></thead><tbody id="events"></tbody></table></div>
</section>
<section><h2>Recent errors ${downloads(s.run_id, "results", "every failed pipeline", "failed")}</h2><table><thead><tr><th>pipeline</th><th>task</th><th>class</th><th>error</th><th>ended</th></tr></thead><tbody id="errors">${errors}</tbody></table></section>
<section><h2>Pipelines <button id="first-page">first page</button> <button id="next-page" disabled>next page</button> ${
    downloads(s.run_id, "results", "results")
  } ${downloads(s.run_id, "pipelines", "with tasks and artifacts")}</h2>
<table><thead><tr><th>pipeline</th><th>name</th><th>state</th><th>tasks</th><th>attempts</th><th title="model calls of the pipeline's attempts (and call-cache hits, of any cached task)">calls</th><th title="tokens in / out (estimated when the server reported none)">tokens</th><th title="known cost in USD (unpriced: calls with tokens but no price)">cost</th><th>metrics</th><th>error</th></tr></thead><tbody id="pipelines"></tbody></table></section>
<section><h2>Runs <span class="muted">(latest first; open one to see it alone)</span></h2><table><thead><tr><th>run</th><th>label</th><th>status</th><th>started</th><th>ended</th><th>stop</th></tr></thead><tbody id="runs">${runs}</tbody></table></section>
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
.status.stale { background:#ffebe9; color:var(--bad); }
.count.interrupted .value { color:var(--warn); }
nav#views a { color:var(--run); } nav#views a.current { font-weight:600; text-decoration:none; color:#1f2328; }
td.id { word-break:break-all; font-size:12px; }
button.copy { font-size:11px; padding:0 4px; margin-left:4px; cursor:pointer; }
.downloads { font-size:12px; font-weight:normal; color:var(--muted); margin-left:12px; }
.downloads a { color:var(--run); }
tr.selected { background:#ddf4ff; }
`

// The page's script: plain ES2019, no framework. Store values only ever reach the DOM through
// textContent, attribute values set with setAttribute, className tokens checked against a fixed
// list, or numeric style values.
const SCRIPT = `
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("assay-config").textContent);
  var state = { runId: null, after: null, next: null, refreshes: 0, chart: null, errors: 0, copied: null };
  window.__assay = state;
  var STATES = ["succeeded", "failed", "interrupted", "running", "pending"];
  function $(id) { return document.getElementById(id); }
  function q(params) {
    var parts = [];
    Object.keys(params).forEach(function (k) {
      if (params[k] !== null && params[k] !== undefined) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(params[k]));
    });
    return parts.length ? "?" + parts.join("&") : "";
  }
  function getJson(path, params) {
    if (config.experiment !== null) params = Object.assign({}, params, { experiment: config.experiment });
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
  // US dollars and costs as the report prints them (src/services/internal/money.ts formatUsd,
  // formatCost: a total with unpriced attempts never reads as a plain dollar figure; the count
  // is of attempts, as the store's accounting counts them)
  function usd(v) { var r = Number(v.toPrecision(2)); return v === 0 ? "$0" : r < 1 ? "$" + v.toFixed(Math.min(20, 1 - Math.floor(Math.log10(r)))).replace(/(\\.\\d\\d\\d*?)0+$/, "$1") : "$" + v.toFixed(2); }
  // the calls sent as money.ts callsText says them: "12 (10 answered, 2 refused with 429)"
  function callsOf(a) {
    var un = (a.refused || 0) + (a.failed_calls || 0);
    return "calls " + (un === 0 ? a.calls : a.calls + " (" + Math.max(0, a.calls - un) + " answered" + (a.refused > 0 ? ", " + a.refused + " refused with 429" : "") + (a.failed_calls > 0 ? ", " + a.failed_calls + " failed at the endpoint" : "") + ")");
  }
  function cost(c, unpriced) {
    var attempts = function (n) { return n + (n === 1 ? " attempt" : " attempts"); };
    if (c === null || (unpriced > 0 && c === 0)) return "unpriced (" + attempts(unpriced) + ")";
    return unpriced > 0 ? ">= " + usd(c) + " (" + attempts(unpriced) + " unpriced)" : usd(c);
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
  function copyButton(value) {
    var b = el("button", "copy", "copy");
    b.type = "button";
    b.title = "copy to the clipboard";
    b.setAttribute("data-copy", value);
    return b;
  }
  // an id shown whole, with its copy button
  function idCell(id) {
    var td = el("td", "mono id");
    td.appendChild(document.createTextNode(id + " "));
    td.appendChild(copyButton(id));
    return td;
  }
  function row(cells) {
    var tr = document.createElement("tr");
    cells.forEach(function (c) { tr.appendChild(c instanceof Node ? c : el("td", null, c)); });
    return tr;
  }
  function replace(id, nodes) { var t = $(id); while (t.firstChild) t.removeChild(t.firstChild); nodes.forEach(function (n) { t.appendChild(n); }); }
  var KNOWN = { running: 1, completed: 1, interrupted: 1, failed: 1, finished: 1, stale: 1, ready: 1, degraded: 1, cooldown: 1, dead: 1 };
  function safeClass(base, token) { return KNOWN[token] ? base + " " + token : base; }
  function statusWord(s) {
    if (s.run) return s.run.stale ? "stale" : s.run.status;
    return s.run_id === null ? "" : s.running ? "running" : s.stale ? "stale" : "finished";
  }
  function optionsText(spec) {
    var o = spec && typeof spec === "object" ? spec.options : null;
    if (!o || typeof o !== "object") return "";
    return Object.keys(o).map(function (k) { return k + ": " + (typeof o[k] === "string" ? o[k] : JSON.stringify(o[k])); }).join(", ");
  }

  // copy buttons (event delegation: rows are redrawn at every refresh)
  function copyText(value) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(value);
    var area = document.createElement("textarea");
    area.value = value; area.setAttribute("readonly", ""); area.style.position = "fixed"; area.style.opacity = "0";
    document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } finally { document.body.removeChild(area); }
    return Promise.resolve();
  }
  document.addEventListener("click", function (ev) {
    var b = ev.target;
    if (!b || !b.classList || !b.classList.contains("copy")) return;
    var value = b.getAttribute("data-copy");
    copyText(value).then(function () { state.copied = value; b.textContent = "copied"; setTimeout(function () { b.textContent = "copy"; }, 1500); },
      function () { b.textContent = "copy failed"; });
  });

  // the download links follow the selection the page shows
  function pointDownloads(runId) {
    Array.prototype.forEach.call(document.querySelectorAll("a.download"), function (a) {
      a.setAttribute("href", "/export" + q({ rows: a.getAttribute("data-rows"), format: a.getAttribute("data-format"), run_id: runId, state: a.getAttribute("data-state"), experiment: config.experiment }));
    });
  }

  function renderStats(s) {
    var title = s.run_id === null ? "no run yet" : s.run_id === "all" ? "whole store (" + s.runs_total + " runs)" : "run " + s.run_id;
    text("run-title", title);
    document.title = "assay \\u00b7 " + title;
    var status = statusWord(s);
    text("run-status", status);
    $("run-status").className = safeClass("status", status);
    text("run-label", s.run && s.run.label ? s.run.label : "");
    text("updated", when(s.generated_at));
    text("runs-total", s.runs_total);
    text("latest-id", s.latest_run ? s.latest_run.run_id : "\\u2013");
    STATES.forEach(function (st) { text("count-" + st, s.pipelines.by_state[st]); });
    text("done", s.done);
    text("interrupted", s.pipelines.by_state.interrupted);
    text("total", s.total !== null ? s.total : s.pipelines.total);
    text("total-kind", s.total !== null ? "(of the source)" : "(of the pipelines admitted: source size unknown)");
    text("pct", s.progress === null ? "" : (s.progress * 100).toFixed(1) + "%");
    $("progress-fill").style.width = (s.progress === null ? 0 : Math.max(0, Math.min(100, s.progress * 100))) + "%";
    var r = s.throughput.recent_per_sec !== null ? s.throughput.recent_per_sec : s.throughput.per_sec;
    text("rate", rate(r));
    text("eta", dur(s.eta_ms));
    text("elapsed", dur(s.elapsed_ms));
    text("attempts", s.attempts_total);
    text("retries", s.retries);
    // (the same wording as domain/internal/transitions.ts: ends included, split)
    text("handoffs", s.handoffs_total + (s.handoffs_budgeted === null || s.handoffs_budgeted === undefined ? " (end included)" : " (" + s.handoffs_budgeted + " against maxHandoffs, " + (s.handoffs_total - s.handoffs_budgeted) + " end" + (s.handoffs_total - s.handoffs_budgeted === 1 ? "" : "s") + ")"));
    text("cache", s.cache ? s.cache.hits + " / " + s.cache.misses + (s.cache.refreshed > 0 ? " \u00b7 refreshed " + s.cache.refreshed : "") + (s.cache.bypassed > 0 ? " \u00b7 read-only misses " + s.cache.bypassed : "") + " (" + s.cache.tokens_saved.total_tokens + " tokens" + (s.cache.cost_saved_usd === null ? "" : ", " + usd(s.cache.cost_saved_usd)) + " saved)" + (s.cache.lookup_failures > 0 ? " \u00b7 " + s.cache.lookup_failures + " cache lookup" + (s.cache.lookup_failures === 1 ? "" : "s") + " failed" : "") + (s.cache.write_failures > 0 ? " \u00b7 " + s.cache.write_failures + " cache write" + (s.cache.write_failures === 1 ? "" : "s") + " failed" : "") : "\u2013");
    var a = s.accounting;
    text("cost", a ? callsOf(a) + " \u00b7 " + a.tokens_in + " in / " + a.tokens_out + " out" + (a.estimated > 0 ? " (" + a.estimated + " estimated)" : "") + " \u00b7 " + cost(a.cost_usd, a.unpriced) : "\u2013");
    text("cost-scope", s.run_id !== null && s.run_id !== "all" && s.runs_total > 1 ? "(this run only; whole experiment: view whole store, " + s.runs_total + " runs)" : "");
    text("latency", s.latency_ms ? dur(s.latency_ms.p50) + " / " + dur(s.latency_ms.p95) + " / " + dur(s.latency_ms.p99) : "\\u2013");
    replace("pools", s.resources.map(function (x) {
      var frac = x.capacity ? Math.min(1, (x.active || 0) / x.capacity) : 0;
      var occ = el("td"); var bar = el("div", "occ"); var fill = el("div", "fill");
      fill.style.width = (frac * 100).toFixed(1) + "%"; bar.appendChild(fill); occ.appendChild(bar);
      occ.appendChild(document.createTextNode(" " + (x.active || 0) + "/" + (x.capacity === null ? "?" : x.capacity)));
      var st = el("td"); st.appendChild(el("span", safeClass("state", x.state), x.state === null ? "?" : x.state));
      var now = s.generated_at, until = x.throttled_until !== null && x.throttled_until > now ? ["throttled", x.throttled_until] : x.breaker_until !== null && x.breaker_until > now ? ["breaker open", x.breaker_until] : null;
      if (until !== null) { var t = new Date(until[1]); st.appendChild(el("span", "hold", " " + until[0] + " until " + (until[1] - now >= 86400000 ? t.toISOString() : t.toTimeString().slice(0, 8)))); }
      if (x.algorithm_text) st.appendChild(el("span", "muted algo", " " + x.algorithm_text));
      if (x.restored_text) st.appendChild(el("span", "muted restored", " " + x.restored_text));
      var owner = /^experiment:([^:]+):/.exec(x.pool);
      var name = x.pool + "/" + x.resource_id + (s.suite ? (owner ? " (private to " + owner[1] + ")" : " (shared)") : "");
      var ra = x.accounting, spent = ra === undefined ? "" : ra === null ? "\u2013" : ra.tokens_in + " in / " + ra.tokens_out + " out \u00b7 " + cost(ra.cost_usd, ra.unpriced);
      return row([el("td", null, name), st, occ, x.pool_wait_ms_p95 === null ? "" : dur(x.pool_wait_ms_p95), x.consecutive_failures || 0, el("td", "cost", spent), el("td", "msg", optionsText(x.spec))]);
    }).concat((s.pool_totals || []).map(function (t) {
      var name = el("td", null, "pool " + t.pool + " subtotal "); name.appendChild(el("span", "muted", "(" + t.resources + " resources, " + t.attempts + " attempts)"));
      var tr = row([name, "", "", "", "", el("td", "cost", t.tokens_in + " in / " + t.tokens_out + " out \u00b7 " + cost(t.cost_usd, t.unpriced)), ""]);
      tr.className = "subtotal";
      return tr;
    })));
    replace("errors", s.recent_errors.map(function (e) {
      var msg = [e.error_type, e.error_message].filter(function (v) { return v !== null; }).join(": ");
      return row([idCell(e.pipeline_id), e.failed_task || "", e.error_class || "", el("td", "msg", msg), when(e.ended_at)]);
    }));
    text("metrics-note", s.run_id === "all" && s.metrics_run_id !== null ? "of run " + s.metrics_run_id + " (the latest that reported any)" : "");
    replace("metrics", s.metrics.filter(function (x) { return x.pipeline_id === null; }).map(function (x) {
      var card = el("div", "card metric"); card.setAttribute("data-display", x.display);
      card.appendChild(el("div", "label", x.label || x.name)); card.appendChild(el("div", "value", metricText(x)));
      return card;
    }));
    replace("runs", s.recent_runs.map(function (x) {
      var td = el("td", "mono id"); var a = el("a", null, x.run_id); a.setAttribute("href", "/" + q({ run_id: x.run_id, experiment: config.experiment }));
      td.appendChild(a); td.appendChild(document.createTextNode(" ")); td.appendChild(copyButton(x.run_id));
      var st = el("td"); var word = x.stale ? "stale" : x.status; st.appendChild(el("span", safeClass("status", word), word));
      var tr = row([td, x.label || "", st, when(x.started_at), when(x.ended_at), x.stop_reason || ""]);
      if (x.run_id === s.run_id) tr.className = "selected";
      return tr;
    }));
    if (s.suite && $("members")) {
      replace("members", s.suite.members.map(function (m) {
        var td = el("td", "mono id"); var a = el("a", "member", m.experiment_id);
        a.setAttribute("href", "/" + q({ run_id: config.runId, experiment: m.experiment_id }));
        td.appendChild(a);
        var src = m.source_status === "error" ? "source error: " + (m.source && m.source.source_error || "") : m.source_status === "exhausted" ? "source exhausted" : m.source_status === "limit" ? "limit reached" : m.source_status === "running" ? "source not exhausted yet (running)" : m.source_status === "interrupted" ? "source not exhausted (run ended)" : m.source_status === "failures" ? "stopped by its own stopAfterFailures" : m.source_status === "not_selected" ? "not selected" : "never run";
        var tr = row([td, m.label || "", m.pipelines, m.by_state.succeeded, m.by_state.failed, m.by_state.interrupted, m.skipped === null ? (m.skipped_recorded === false ? "not recorded" : "") : m.skipped, m.superseded > 0 ? m.superseded : "", el("td", "msg", src),
          m.metrics.map(function (x) { return (x.label || x.name) + ": " + metricText(x); }).join(", ")]);
        if (m.experiment_id === s.suite.experiment) tr.className = "selected";
        return tr;
      }));
    }
    pointDownloads(s.run_id);
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
                     { label: "completed (cumulative)", stroke: "#1a7f37", scale: "done" }],
        axes: [{}, { scale: "rate", label: "per s" }, { scale: "done", side: 1, label: "completed", grid: { show: false } }],
        scales: { x: { time: true } }
      }, data, box);
    } else {
      state.chart.setData(data);
    }
  }

  function renderPipelines(p) {
    state.next = p.next;
    $("next-page").disabled = p.next === null;
    replace("pipelines", p.rows.map(function (x) {
      var metrics = x.reported_metrics.map(function (m) { return (m.label || m.name) + "=" + metricText(m); }).join(", ");
      var st = el("td"); st.appendChild(el("span", safeClass("state", x.state), x.state === "running" ? "admitted" : x.state));
      var err = [x.error_type, x.error_message].filter(function (v) { return v !== null; }).join(": ");
      // a control pipeline's cursor is a position (it moves back on a rewind): say so, with the budget spent
      var cursor = x.traversal ? "at " + x.traversal.cursor + "/" + x.n_tasks_total + ", " + x.traversal.handoffs + " handoffs" : x.n_tasks_done + "/" + x.n_tasks_total;
      // token and cost figures of the pipeline (absent: no model call, no cache hit)
      var a = x.accounting;
      var calls = a ? a.calls + (a.cache_hits > 0 ? " (+" + a.cache_hits + " cached)" : "") : "";
      var tokens = a ? a.tokens_in + " / " + a.tokens_out + (a.estimated > 0 ? " (est.)" : "") : "";
      var spent = a ? cost(a.cost_usd, a.unpriced) : "";
      return row([idCell(x.pipeline_id), x.name, st, cursor, x.attempts_total, calls, tokens, spent, metrics, el("td", "msg", err)]);
    }));
  }

  // a skipped pipeline's reason in words (the event's data keep the code)
  function eventDetail(x) {
    var d = x.data;
    if (x.kind !== "pipeline.skipped" || !d || typeof d.reason !== "string") return "";
    var words = Object.prototype.hasOwnProperty.call(config.skipReasons, d.reason) ? config.skipReasons[d.reason] : d.reason.replace(/_/g, " ");
    return typeof d.owner === "string" ? words + " (run " + d.owner + ")" : words;
  }
  function renderEvents(e) {
    replace("events", e.rows.slice().reverse().map(function (x) {
      return row([when(x.ts), x.kind, x.pipeline_id ? idCell(x.pipeline_id) : "", eventDetail(x)]);
    }));
  }

  function refresh() {
    return getJson("/stats", { run_id: config.runId }).then(function (s) {
      state.runId = s.run_id;
      renderStats(s);
      if (s.run_id === null) return;
      return Promise.all([
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
