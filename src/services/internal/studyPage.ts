/**
 * The Study page of `assay serve` on a study's output root (`/study/page`): the tabs Design,
 * Run, Compare, Evidence and Conclusion of a {@link StudyCompare.StudyComparison}, a Pareto
 * scatter plot of two chosen metrics (SVG, its margins measured from its labels' text, a target
 * objective's target drawn as a line with its value, every point labelled with its variant,
 * variants at one point sharing one marker and one label) and per-variant interval plots
 * (uPlot, served by the server from `/assets`; a whisker per variant, every variant's id on the
 * x axis).
 *
 * Escaping: the page is rendered on the server with every value from the store or the study
 * (questions, variable values, trial reasons, case keys) passed through `escapeHtml`; the
 * plots' data reach the script as JSON inside a `<script type="application/json">` element with
 * every `<` written `\u003c`, and the script writes text only through `textContent` (SVG
 * elements made with `createElementNS`) and uPlot's canvas. The page's own script is pinned by its hash in {@link STUDY_CSP}.
 *
 * @since 0.7.0
 */
import { createHash } from "node:crypto"
import { canonicalJsonUnsafe, type Json } from "../../domain/Json.js"
import { noun, range } from "../../domain/internal/words.js"
import { escapeHtml } from "../Dashboard.js"
import { caseValueText, cycleNote, decidingNote, decidingShown, decidingText, degenerateNote, deltaText, type Evidence, fmt, judgeShareText, statusWordsOf, type StudyComparison, tieText, unplacedText, type VariantComparison, versusText } from "../StudyCompare.js"
import { distinctFigures, type BudgetFigure } from "../StudyControl.js"
import { formatCost, STUDY_COST } from "./money.js"

/** A value of an assignment as text (strings as they are, others as canonical JSON). */
const valueText = (v: Json): string => (typeof v === "string" ? v : canonicalJsonUnsafe(v))

const assignmentText = (a: Readonly<Record<string, Json>>): string =>
  Object.entries(a).map(([k, v]) => `${k}=${valueText(v)}`).join(", ")

const pct = (level: number) => `${Math.round(level * 1000) / 10}%`

const intervalText = (i: { readonly lower: number; readonly upper: number; readonly method?: string } | null): string =>
  i === null ? "" : ` ${range(i.lower, i.upper)}${i.method === undefined ? "" : degenerateNote({ ...i, method: i.method })}`

/** `/?experiment=TRIAL`: the dashboard's view of one trial (a suite member): its pipelines. */
const trialHref = (trialId: string): string => `/?experiment=${encodeURIComponent(trialId)}`

/** The metrics the Compare tab shows: the objectives' and the declared ones (else a few built-in ones). */
const shownMetrics = (c: StudyComparison): ReadonlyArray<StudyComparison["metrics"][number]> => {
  const chosen = c.metrics.filter((m) => c.objectives.some((o) => o.metric === m.name) || m.kind !== "builtin")
  return chosen.length > 0 ? chosen : c.metrics.filter((m) => m.name === "calls" || m.name === "costUsd" || m.name === "latencyP95Ms")
}

/**
 * Options of {@link renderStudyPage}: `pipelineTrial` maps a pipeline id to the trial it
 * belongs to (so that an evidence case links to that trial's view); absent ids link nowhere.
 *
 * @since 0.7.0
 * @category models
 */
export interface StudyPageOptions {
  readonly pipelineTrial?: ReadonlyMap<string, string> | undefined
  /**
   * The evidence of each variant with no compared trial (every one broke a hard constraint,
   * or failed), by variant id then metric name (`StudyCompare.Analysis.evidence`): its cases,
   * read from its trials that have values, are shown marked "not compared" with the
   * constraints they broke, as `assay study evidence` shows them. A variant absent here is left
   * out of the Evidence tab.
   */
  readonly notCompared?: ReadonlyMap<string, ReadonlyMap<string, Evidence>> | undefined
}

// A Pareto column's cell: "yes" on the front, else "no" and the variants that dominate it
// (escaped), "—" without a succeeded trial; dominated by nobody, why it is not placed, in the
// text report's words (`none (no objectives to place it by)`, never an empty "dominated by");
// off the front within noise, the deciding comparisons under it (fix16ac F2)
const frontCell = (c: StudyComparison, v: VariantComparison, which: "strict" | "uncertain"): string => {
  const onFront = v.pareto[which]
  const by = v.pareto.dominatedBy[which]
  return v.succeeded === 0
    ? "—"
    : onFront
    ? `yes${
      // on the front only because its dominance cycle is set aside (tester16g F1)
      which === "uncertain" && v.pareto.cycle !== undefined ? `<div class="why muted cycle">${escapeHtml(cycleNote(v).trim().replace(/^\((.*)\)$/, "$1"))}</div>` : ""
    }`
    : by.length === 0
    ? escapeHtml(unplacedText(c, v) ?? "no")
    : `no <span class="by">(dominated by ${escapeHtml(by.join(", "))})</span>${
      // within noise: why, per dominator (a lead within noise is a tie; fix16ac F2)
      which === "strict"
        ? ""
        : (v.pareto.deciding ?? []).map((d) => `<div class="why muted">${escapeHtml(decidingText(d, v.variantId, c.objectives))}</div>`).join("") +
          (decidingShown(v) === "" ? "" : `<div class="why muted">${escapeHtml(decidingShown(v))}</div>`)
    }`
}

/**
 * Renders the Study page of a comparison (every value escaped; see the module docs).
 *
 * @param c the comparison (`StudyCompare.compare`)
 * @param options see {@link StudyPageOptions}
 * @returns the HTML document
 * @since 0.7.0
 * @category rendering
 */
export const renderStudyPage = (c: StudyComparison, options: StudyPageOptions = {}): string => {
  const e = escapeHtml
  const shown = shownMetrics(c)
  const base = c.variants.find((v) => v.variantId === c.baseline)
  const li = (label: string, value: string) => `<li><span class="muted">${e(label)}:</span> ${value}</li>`

  // Design
  const variables = c.variables.length === 0
    ? "none"
    : c.variables.map((v) => `<span class="mono">${e(v.name)}</span> (${e(v.type)})`).join(", ")
  const objectives = c.objectives.length === 0 ? "none" : c.objectives.map((o) =>
    `${e(o.metric)} ${o.direction === "target" ? `→ ${e(o.target)}` : o.direction === "maximize" ? "↑ maximize" : "↓ minimize"}${o.weight !== 1 ? ` (weight ${e(o.weight)})` : ""}${
      o.hardConstraint === undefined ? "" : ` [hard constraint ${e(o.hardConstraint.op)} ${e(o.hardConstraint.value)}]`
    }`
  ).join("; ")
  const variantRows = c.variants.map((v) =>
    `<tr data-variant="${e(v.variantId)}"><td class="mono">${e(v.variantId)}${v.isBaseline ? " <span class=\"tag\">baseline</span>" : ""}</td>${
      c.variables.map((x) => `<td class="assign">${e(v.assignment[x.name] === undefined ? "" : valueText(v.assignment[x.name]!))}</td>`).join("")
    }</tr>`
  ).join("")
  const design = `<ul class="facts">
${li("question", `<span id="study-question">${e(c.question)}</span>`)}
${c.hypothesis === null ? "" : li("hypothesis", e(c.hypothesis))}
${li("protocol version", `<span id="study-version">${e(c.version)}</span>`)}
${li("variables", variables)}
${li("baseline", `<span class="mono">${e(c.baseline)}</span>${base === undefined ? "" : ` (${e(assignmentText(base.assignment))})`}`)}
${li("objectives", objectives)}
${li("analysis", e(`level ${pct(c.level)}, ${c.resamples} bootstrap resamples, seed ${c.seed}; minimum ${c.minPairedCases} paired cases, ${c.minRepeats} repeats`))}
</ul>
<h3>Variants</h3>
<table><thead><tr><th>variant</th>${c.variables.map((x) => `<th>${e(x.name)}</th>`).join("")}</tr></thead><tbody id="design-variants">${variantRows}</tbody></table>`

  // Run
  const budget = c.run.budget as { perTrial?: Record<string, unknown>; total?: Record<string, unknown> }
  const usage = c.run.usage
  // the per-trial limit with the highest trial's use, as the CLI report says it (tester16d F5)
  const perTrialCell = (key: string): string => {
    const limit = budget.perTrial?.[key]
    if (limit === undefined) return "none"
    const high = (c.run.highestTrial as Partial<Record<string, number>> | null | undefined)?.[key]
    if (typeof limit !== "number" || high === undefined) return e(limit)
    const [u, l] = distinctFigures(key as BudgetFigure, high, limit)
    return e(`${l} (highest trial ${u}${limit > 0 ? `, ${Math.round((high / limit) * 100)}%` : ""})`)
  }
  const usageRow = (name: string, used: number, shownUsed: string, key: string) => {
    const limit = budget.total?.[key]
    // the bar stops at its end; the figure is the real use (past 100 %, said so: issue 16 N1)
    const frac = typeof limit === "number" && limit > 0 ? used / limit : null
    // the limit in its unit, as the CLI report's budget line says it (`$1.00`, never a bare `1`: tester16e F6)
    const limitText = typeof limit !== "number" ? "none" : e(distinctFigures(key as BudgetFigure, used, limit)[1])
    return `<tr><td>${e(name)}</td><td>${e(shownUsed)}</td><td>${limitText}</td><td>${
      frac === null ? "" : `<div class="occ"><div class="fill" style="width:${(Math.min(1, frac) * 100).toFixed(1)}%"></div></div> ${
        (frac * 100).toFixed(0)
      }%${frac > 1 + 1e-9 ? ` <span class="over">(over the total budget)</span>` : ""}`
    }</td><td>${perTrialCell(key)}</td></tr>`
  }
  const notCompared = c.variants.flatMap((v) => v.trials.filter((t) => !t.compared).map((t) => ({ ...t, variantId: v.variantId })))
  const run = `<ul class="facts">
${li("status", `<span id="study-status" class="status">${e(c.run.status ?? statusWordsOf(c, null))}</span>`)}
${li("stop reason", `<span id="study-stop">${e(c.run.stopReason ?? "none fired")}</span>`)}
</ul>
<h3>Trials by state</h3>
<table><thead><tr><th>state</th><th>trials</th></tr></thead><tbody id="run-states">${
    Object.entries(c.run.trialsByStatus).map(([s, n]) => `<tr><td>${e(s)}</td><td>${e(n)}</td></tr>`).join("")
  }</tbody></table>
<h3>Budget use</h3>
<table><thead><tr><th>resource</th><th>used</th><th>total budget</th><th>use</th><th>per trial</th></tr></thead><tbody id="run-budget">
${usageRow("model calls", usage.calls, String(usage.calls), "calls")}
${usageRow("tokens", usage.tokens, String(usage.tokens), "tokens")}
${usageRow("cost (USD)", usage.costUsd, `${formatCost(usage.costUsd, usage.unpriced ?? 0, STUDY_COST)}${judgeShareText(usage.judgeCostUsd)}`, "costUsd")}
${usageRow("time", usage.timeMs, `${(usage.timeMs / 1000).toFixed(1)} s`, "timeMs")}
</tbody></table>
<h3>Trials not compared</h3>
<table><thead><tr><th>trial</th><th>variant</th><th>state</th><th>reason</th></tr></thead><tbody id="run-excluded">${
    notCompared.map((t) => `<tr><td class="mono"><a href="${e(trialHref(t.trialId))}">${e(t.trialId)}</a></td><td class="mono">${e(t.variantId)}</td><td>${e(t.status)}</td><td class="msg">${e(t.reason ?? "")}</td></tr>`).join("")
  }${c.run.notStarted.map((id) => `<tr><td class="mono">${e(id)}</td><td></td><td>not started</td><td>left out</td></tr>`).join("")}${
    notCompared.length === 0 && c.run.notStarted.length === 0 ? `<tr><td colspan="4">none</td></tr>` : ""
  }</tbody></table>`

  // Compare
  const head = shown.map((m) => `<th>${e(m.name)}${m.unit === "" ? "" : ` (${e(m.unit)})`} ${m.direction === "maximize" ? "↑" : m.direction === "minimize" ? "↓" : "→"}</th>`).join("")
  const compareRows = c.variants.map((v) => {
    const cells = shown.map((m) => {
      const x = v.values[m.name]
      const vs = v.vsBaseline[m.name]
      const value = x === undefined || x.mean === null
        ? "—"
        : `${fmt(x.mean)}${x.judgeCostUsd === undefined ? "" : `<span class="judge">${e(judgeShareText(x.judgeCostUsd))}</span>`}<span class="ci">${e(intervalText(x.interval))}</span>`
      const delta = v.isBaseline || vs === undefined || vs.paired === null
        ? ""
        : `<div class="delta${vs.sufficiency.sufficient ? "" : " insufficient"}" title="${e(versusText(vs, c.level))}">${e(deltaText(vs.paired.difference))}${
          vs.sufficiency.sufficient ? "" : " · insufficient sample"
        }</div>`
      return `<td class="value" data-metric="${e(m.name)}">${value}${delta}</td>`
    }).join("")
    return `<tr data-variant="${e(v.variantId)}"><td class="mono">${e(v.variantId)}${v.isBaseline ? " <span class=\"tag\">baseline</span>" : ""}</td><td class="assign">${
      e(assignmentText(v.assignment))
    }</td><td>${e(v.succeeded)}</td>${cells}<td class="pareto-strict">${frontCell(c, v, "strict")}</td><td class="pareto-uncertain">${
      frontCell(c, v, "uncertain")
    }</td><td class="msg breaches">${e(v.breaches.join("; "))}</td><td>${e(v.rank ?? "—")}</td></tr>`
  }).join("")
  const versus = c.variants.filter((v) => !v.isBaseline && v.succeeded > 0).flatMap((v) =>
    shown.flatMap((m) => {
      const x = v.vsBaseline[m.name]
      return x === undefined ? [] : [`<li><span class="mono">${e(v.variantId)}</span> ${e(m.name)}: ${e(versusText(x, c.level))}</li>`]
    })
  ).join("")
  const metricOptions = (selected: string | undefined) =>
    c.metrics.map((m) => `<option value="${e(m.name)}"${m.name === selected ? " selected" : ""}>${e(m.name)}</option>`).join("")
  const xDefault = c.objectives[0]?.metric ?? shown[0]?.name
  const yDefault = c.objectives[1]?.metric ?? c.metrics.find((m) => m.name !== xDefault && (m.name === "costUsd" || m.name === "wallMs"))?.name ?? c.metrics.find((m) => m.name !== xDefault)?.name
  const compare = `<p class="muted">per metric: the mean of the repeats with its ${e(pct(c.level))} interval; Δ: the paired difference against the baseline <span class="mono">${e(c.baseline)}</span> (candidate − baseline) with its interval (hover for the wording). Pareto: strict front (point estimates) and front within noise (dominated only by a variant better beyond the intervals on one objective and not worse beyond them on any: a lead within noise is a tie, so the two fronts can differ both ways).${
    // what the "why" lines under the within-noise column are, once (tester16g F5)
    decidingNote(c) === "" ? "" : ` <span id="why-note">Why lines: ${e(decidingNote(c))}.</span>`
  }</p>
<table id="compare-table"><thead><tr><th>variant</th><th>assignment</th><th>compared trials</th>${head}<th>Pareto (strict)</th><th>Pareto (within noise)</th><th>constraint breaches</th><th>weighted rank</th></tr></thead><tbody>${compareRows}</tbody></table>
<h3>Against the baseline</h3><ul id="compare-versus">${versus === "" ? "<li>nothing to compare</li>" : versus}</ul>
<div class="two">
<div><h3>Pareto plot <label>x <select id="pareto-x">${metricOptions(xDefault)}</select></label> <label>y <select id="pareto-y">${metricOptions(yDefault)}</select></label></h3><div id="pareto-plot" class="plot"></div></div>
<div><h3>Intervals per variant <label><select id="interval-metric">${metricOptions(xDefault)}</select></label></h3><div id="interval-plot" class="plot"></div></div>
</div>`

  // Evidence
  const trialOf = options.pipelineTrial ?? new Map<string, string>()
  const pipelineLinks = (ids: ReadonlyArray<string>) =>
    ids.map((id) => {
      const trial = trialOf.get(id)
      return trial === undefined
        ? `<span class="mono pid">${e(id)}</span>`
        : `<a class="mono pid evidence-link" href="${e(trialHref(trial))}" title="${e(`pipeline ${id} of trial ${trial}: open the trial's pipelines`)}">${e(id)}</a>`
    }).join(" ")
  const evidence = c.variants.filter((v) => v.succeeded > 0 || (options.notCompared?.get(v.variantId)?.size ?? 0) > 0).map((v) => {
    const blocks = shown.map((m) => {
      // a variant with no compared trial: the cases of its trials that have values, marked
      const other = v.succeeded > 0 ? undefined : options.notCompared?.get(v.variantId)?.get(m.name)
      const ev = v.succeeded > 0
        ? v.evidence[m.name]
        : other === undefined
        ? undefined
        : { trials: other.trials.map((t) => t.trialId), worstCases: other.worstCases, bestCases: other.bestCases, tie: other.tie }
      if (ev === undefined) return ""
      const marked = other === undefined
        ? ""
        : `<p class="not-compared">not compared${
          other.notCompared === undefined
            ? " (no trial of it has a value)"
            : `${other.notCompared.trials.length === 0 ? "" : `: cases of ${e(other.notCompared.trials.join(", "))}`}${
            other.notCompared.breaches.length === 0 ? "" : ` (${e(other.notCompared.breaches.join("; "))})`
          }`
        }</p>${other.notCompared?.exclusion === undefined ? "" : `<p class="exclusion">${e(other.notCompared.exclusion)}</p>`}`
      const cases = (title: string, list: typeof ev.worstCases) =>
        list.length === 0 ? "" : `<div><b>${title}</b><table class="cases"><tbody>${
          list.map((x) => `<tr><td class="mono">${e(x.caseKey)}</td><td>${e(caseValueText(x))}</td><td>${pipelineLinks(x.pipelineIds)}</td></tr>`).join("")
        }</tbody></table></div>`
      const x = v.values[m.name]
      const json = `/study/evidence?metric=${encodeURIComponent(m.name)}&variant=${encodeURIComponent(v.variantId)}`
      return `<div class="evidence" data-metric="${e(m.name)}" data-variant="${e(v.variantId)}"><h4>${e(m.name)} of <span class="mono">${e(v.variantId)}</span>: ${
        e(x === undefined ? "—" : `${fmt(x.mean)}${intervalText(x.interval)}`)
      } <a class="muted" href="${e(json)}">every pipeline (JSON)</a></h4>
<p class="muted">${e(x?.aggregation ?? "")}</p>${marked}
<p>${noun(ev.trials.length, "trial")}: ${ev.trials.map((t) => `<a class="mono trial-link" href="${e(trialHref(t))}">${e(t)}</a>`).join(", ")}</p>
${ev.tie === undefined ? `<div class="two">${cases("worst cases", ev.worstCases)}${cases("best cases", ev.bestCases)}</div>` : `<p class="tie">${e(tieText(ev.tie))}</p>`}</div>`
    }).join("")
    return `<section class="variant-evidence"><h3><span class="mono">${e(v.variantId)}</span> <span class="muted">${e(assignmentText(v.assignment))}</span></h3>${blocks}</section>`
  }).join("")

  // Conclusion (the weighted ranking numbers tied variants alike: 1, 1, 3)
  const rankOf = new Map(c.variants.map((v) => [v.variantId, v.rank]))
  const conclusion = `<ul class="facts">
${li("status", e(c.conclusion.status ?? statusWordsOf(c, null)))}
${li("conclusion", `<span id="conclusion-summary">${e(c.conclusion.summary)}</span>`)}
${li("wording", `<span id="conclusion-wording">${e(c.conclusion.wording)}</span>`)}
${li("candidates", `<span id="conclusion-candidates">${c.conclusion.candidates.length === 0 ? "none" : c.conclusion.candidates.map((x) => `<span class="mono">${e(x)}</span>`).join(", ")}</span>`)}
${c.conclusion.cycles === undefined ? "" : li("cannot be separated", `<span id="conclusion-cycles">${c.conclusion.cycles.map((g) => g.map((x) => `<span class="mono">${e(x)}</span>`).join(", ")).join("; ")}</span> <span class="muted">(they beat one another in a circle beyond noise: none of them can be ruled out by the others, and none is called best)</span>`)}
${c.conclusion.notRuledOut === undefined ? "" : li("not ruled out", `<span id="conclusion-not-ruled-out">${c.conclusion.notRuledOut.map((x) => `<span class="mono">${e(x)}</span>`).join(", ")}</span> <span class="muted">(the sample is below the declared minimums)</span>`)}
</ul>
<h3>Limitations</h3><ul id="conclusion-limitations">${c.conclusion.limitations.length === 0 ? "<li>none noted</li>" : c.conclusion.limitations.map((l) => `<li>${e(l)}</li>`).join("")}</ul>
${c.weightedRanking.length === 0 ? "" : `<h3>Weighted ranking <span class="muted">(a secondary view, not a choice)</span></h3><ol>${
  c.weightedRanking.map((r) => `<li value="${e(rankOf.get(r.variantId) ?? "")}"><span class="mono">${e(r.variantId)}</span> ${e(fmt(r.score))}</li>`).join("")
}</ol>`}`

  const tabs = [["design", "Design", design], ["run", "Run", run], ["compare", "Compare", compare], ["evidence", "Evidence", evidence === "" ? "<p>no compared trial: no evidence</p>" : evidence], ["conclusion", "Conclusion", conclusion]] as const
  const plotData = {
    candidates: c.conclusion.candidates,
    // each metric's unit and direction, for the axes' labels
    // (and a target objective's target, drawn on the Pareto plot)
    metrics: Object.fromEntries(c.metrics.map((m) => {
      const target = c.objectives.find((o) => o.metric === m.name && o.direction === "target")?.target
      return [m.name, { unit: m.unit, direction: m.direction, ...(target === undefined ? {} : { target }) }]
    })),
    variants: c.variants.map((v) => ({
      id: v.variantId,
      strict: v.pareto.strict,
      uncertain: v.pareto.uncertain,
      compared: v.succeeded > 0,
      values: Object.fromEntries(Object.entries(v.values).map(([k, x]) => [k, { mean: x.mean, lower: x.interval?.lower ?? null, upper: x.interval?.upper ?? null }]))
    }))
  }
  const data = JSON.stringify(plotData).replace(/</g, "\\u003c")
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>assay · study ${e(c.studyId)}</title>
<link rel="stylesheet" href="/assets/uplot.css">
<style>${CSS}</style>
</head>
<body>
<header><h1>Study <span class="mono" id="study-id">${e(c.studyId)}</span></h1><span class="muted">protocol version ${e(c.version)}</span><a class="right" id="to-dashboard" href="/">dashboard</a></header>
<nav id="study-tabs">${tabs.map(([id, label], i) => `<button type="button" class="tab${i === 0 ? " current" : ""}" data-tab="${id}" id="tab-${id}">${label}</button>`).join("")}</nav>
<main>
${tabs.map(([id, , body], i) => `<section class="panel" id="panel-${id}"${i === 0 ? "" : " hidden"}>${body}</section>`).join("\n")}
</main>
<script id="study-data" type="application/json">${data}</script>
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
h1 { font-size:18px; margin:0; } h3 { font-size:15px; margin:16px 0 8px; } h4 { font-size:14px; margin:12px 0 4px; }
main { padding: 0 20px 20px; }
.muted { color: var(--muted); } .right { margin-left:auto; } .mono { font-family: ui-monospace, monospace; }
nav#study-tabs { padding: 8px 20px; background:#fff; border-bottom:1px solid var(--line); }
button.tab { border:1px solid var(--line); background:#f6f8fa; padding:4px 12px; border-radius:6px; cursor:pointer; margin-right:4px; }
button.tab.current { background:var(--run); color:#fff; }
table { border-collapse:collapse; width:100%; background:#fff; border:1px solid var(--line); }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
td.msg, td.assign { white-space:pre-wrap; word-break:break-word; max-width:420px; }
.ci { color:var(--muted); font-size:12px; } .delta { font-size:12px; } .delta.insufficient { color:var(--warn); }
.tag { font-size:11px; background:#ddf4ff; color:var(--run); border-radius:8px; padding:0 6px; }
.facts { list-style:none; padding:0; } .facts li { margin:4px 0; }
.two { display:grid; grid-template-columns: 1fr 1fr; gap:16px; }
.plot { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px; min-height:300px; }
.plot svg { display:block; overflow:hidden; } #interval-plot { overflow-x:auto; } .legend { font-size:12px; margin-top:4px; }
.swatch { display:inline-block; width:9px; height:9px; border-radius:50%; vertical-align:middle; }
.occ { display:inline-block; width:80px; height:10px; vertical-align:middle; background:#eaeef2; border-radius:4px; overflow:hidden; }
.fill { background:var(--run); height:100%; }
.pid { font-size:11px; word-break:break-all; }
.evidence { background:#fff; border:1px solid var(--line); border-radius:6px; padding:4px 12px; margin:8px 0; }
`

// The page's script: tabs, and the two plots drawn with uPlot from the JSON in #study-data. It
// never writes markup: text through textContent, the Pareto plot as SVG elements, the interval
// plot on uPlot's canvas.
const SCRIPT = `
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("study-data").textContent);
  var state = { tab: "design", pareto: null, intervals: null };
  window.__assayStudy = state;
  function $(id) { return document.getElementById(id); }
  function show(tab) {
    Array.prototype.forEach.call(document.querySelectorAll("button.tab"), function (b) {
      b.className = b.getAttribute("data-tab") === tab ? "tab current" : "tab";
    });
    Array.prototype.forEach.call(document.querySelectorAll("section.panel"), function (p) {
      p.hidden = p.id !== "panel-" + tab;
    });
    state.tab = tab;
    if (tab === "compare") draw();
  }
  Array.prototype.forEach.call(document.querySelectorAll("button.tab"), function (b) {
    b.addEventListener("click", function () { show(b.getAttribute("data-tab")); history.replaceState(null, "", "#" + b.getAttribute("data-tab")); });
  });
  function num(x) { return typeof x === "number" && isFinite(x) ? x : null; }
  // an axis's label: the metric, its unit and which way is better
  function axisLabel(name) {
    var m = data.metrics[name] || { unit: "", direction: "" };
    var way = m.direction === "maximize" ? "↑ higher is better" : m.direction === "minimize" ? "↓ lower is better" : m.direction === "target" ? (num(m.target) !== null ? "→ nearer the target " + tickText(m.target) + " is better" : "→ nearer the target is better") : "";
    return name + (m.unit ? " (" + m.unit + ")" : "") + (way ? ", " + way : "");
  }
  // text widths in the SVG's font, measured on a canvas (it measures while the tab is hidden)
  var FONT = 11, LINE = 14;
  var measurer = document.createElement("canvas").getContext("2d");
  function textWidth(str) {
    if (!measurer) return str.length * FONT * 0.62;
    measurer.font = FONT + "px system-ui, sans-serif";
    return Math.ceil(measurer.measureText(str).width) + 2;
  }
  // a label in at most two lines of at most \`room\` pixels: split at its ", ", else cut with an
  // ellipsis (the whole text stays in the element's title)
  function fitLines(str, room) {
    function cut(t) {
      if (textWidth(t) <= room) return t;
      while (t.length > 1 && textWidth(t + "…") > room) t = t.slice(0, -1);
      return t + "…";
    }
    if (textWidth(str) <= room) return [str];
    var at = str.indexOf(", ");
    if (at < 0) return [cut(str)];
    return [cut(str.slice(0, at + 1)), cut(str.slice(at + 2))];
  }
  var SVG = "http://www.w3.org/2000/svg";
  function node(parent, tag, attrs, text) {
    var n = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) n.textContent = text;
    parent.appendChild(n);
    return n;
  }
  function titled(n, text) { node(n, "title", {}, text); return n; }
  // about five round steps over [lo, hi]
  function ticks(lo, hi) {
    var raw = (hi - lo) / 5, mag = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / mag;
    var step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag, out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }
  function tickText(v) { return String(Number(v.toPrecision(6))); }
  // an axis's tick labels: as many decimals as the step needs, then more until no two adjacent
  // labels read the same (values far from 0 with a small spread: 123456.01, 123456.02)
  function tickTexts(values, step) {
    var d = step > 0 && isFinite(step) ? Math.max(0, Math.ceil(-Math.log10(step) - 1e-9)) : 0, out;
    for (; d <= 20; d++) {
      out = values.map(function (v) { return String(Number(v.toFixed(d))); });
      if (out.every(function (t, i) { return i === 0 || t !== out[i - 1]; })) return out;
    }
    return values.map(function (v) { return String(v); });
  }
  // an axis's range: the values padded; values none of which is negative (calls, tokens, a
  // cost; all 0) never get a negative stretch, the axis starts at 0 (tester16g F8)
  function rangeOf(values) {
    var lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    var pad = hi > lo ? (hi - lo) * 0.08 : (Math.abs(lo) * 0.1 || 1);
    return [lo >= 0 && lo - pad < 0 ? 0 : lo - pad, hi + pad];
  }
  function targetOf(name) { var m = data.metrics[name]; return m && m.direction === "target" && num(m.target) !== null ? m.target : null; }
  // the Pareto plot, drawn as SVG: margins from the measured text, so no label is cut whatever
  // the metrics' names; each point labelled inside the plot; a target objective's target drawn
  // the metric and its unit (the interval plot's axis, drawn by uPlot on one line)
  function shortLabel(name) { var m = data.metrics[name] || { unit: "" }; return name + (m.unit ? " (" + m.unit + ")" : ""); }
  function drawPareto() {
    var box = $("pareto-plot"), mx = $("pareto-x").value, my = $("pareto-y").value;
    var pts = data.variants.filter(function (v) {
      return v.compared && v.values[mx] && v.values[my] && num(v.values[mx].mean) !== null && num(v.values[my].mean) !== null;
    }).map(function (v) { return { id: v.id, x: v.values[mx].mean, y: v.values[my].mean, candidate: data.candidates.indexOf(v.id) >= 0, strict: v.strict, uncertain: v.uncertain }; });
    pts.sort(function (a, b) { return a.x - b.x; });
    var tx = targetOf(mx), ty = targetOf(my);
    box.setAttribute("data-points", String(pts.length));
    box.setAttribute("data-candidates", pts.filter(function (p) { return p.candidate; }).map(function (p) { return p.id; }).join(","));
    box.setAttribute("data-variants", pts.map(function (p) { return p.id; }).join(","));
    box.setAttribute("data-axis-x", axisLabel(mx));
    box.setAttribute("data-axis-y", axisLabel(my));
    box.setAttribute("data-targets", [tx === null ? "" : mx + "=" + tx, ty === null ? "" : my + "=" + ty].filter(function (x) { return x !== ""; }).join(","));
    while (box.firstChild) box.removeChild(box.firstChild);
    state.pareto = null;
    if (pts.length === 0) { box.textContent = "no compared variant has both metrics"; return; }
    var W = Math.max(300, box.clientWidth - 16), H = 300;
    var xr = rangeOf(pts.map(function (p) { return p.x; }).concat(tx === null ? [] : [tx]));
    var yr = rangeOf(pts.map(function (p) { return p.y; }).concat(ty === null ? [] : [ty]));
    var xt = ticks(xr[0], xr[1]), yt = ticks(yr[0], yr[1]);
    box.setAttribute("data-range", JSON.stringify([xr, yr]));
    var xtt = tickTexts(xt, xt.length > 1 ? xt[1] - xt[0] : 0), ytt = tickTexts(yt, yt.length > 1 ? yt[1] - yt[0] : 0);
    box.setAttribute("data-ticks-x", JSON.stringify(xtt));
    box.setAttribute("data-ticks-y", JSON.stringify(ytt));
    // margins: the y axis's label lines and tick texts on the left, the x axis's below
    var top = 12, right = 14;
    var yTickW = Math.max.apply(null, ytt.map(function (t) { return textWidth(t); }));
    var xLines = fitLines(axisLabel(mx), W - 20);
    var bottom = 6 + LINE + 4 + xLines.length * LINE + 4;
    var yLines = fitLines(axisLabel(my), H - top - bottom);
    var left = 6 + yLines.length * LINE + 6 + yTickW + 6;
    var pw = W - left - right, ph = H - top - bottom;
    function X(v) { return left + (v - xr[0]) / (xr[1] - xr[0]) * pw; }
    function Y(v) { return top + ph - (v - yr[0]) / (yr[1] - yr[0]) * ph; }
    var svg = node(box, "svg", { id: "pareto-svg", width: W, height: H, viewBox: "0 0 " + W + " " + H, "font-family": "system-ui, sans-serif", "font-size": FONT, role: "img" });
    titled(svg, "Pareto plot: " + axisLabel(mx) + " against " + axisLabel(my));
    node(svg, "rect", { x: left, y: top, width: pw, height: ph, fill: "#fff", stroke: "#d0d7de" });
    xt.forEach(function (v, i) {
      node(svg, "line", { x1: X(v), x2: X(v), y1: top + ph, y2: top + ph + 5, stroke: "#57606a" });
      node(svg, "text", { class: "tick tick-x", x: X(v), y: top + ph + 6 + FONT, "text-anchor": "middle", fill: "#57606a" }, xtt[i]);
    });
    yt.forEach(function (v, i) {
      node(svg, "line", { x1: left - 5, x2: left, y1: Y(v), y2: Y(v), stroke: "#57606a" });
      node(svg, "text", { class: "tick tick-y", x: left - 7, y: Y(v) + 4, "text-anchor": "end", fill: "#57606a" }, ytt[i]);
    });
    // the axes' labels, in full in their titles
    var xl = titled(node(svg, "text", { class: "axis-label axis-x", x: left + pw / 2, y: top + ph + 6 + LINE + 4 + FONT, "text-anchor": "middle", fill: "#1f2328" }), axisLabel(mx));
    xLines.forEach(function (l, i) { node(xl, "tspan", { x: left + pw / 2, dy: i === 0 ? 0 : LINE }, l); });
    var cy = top + ph / 2;
    var yl = titled(node(svg, "text", { class: "axis-label axis-y", transform: "translate(" + (6 + FONT) + "," + cy + ") rotate(-90)", "text-anchor": "middle", fill: "#1f2328" }), axisLabel(my));
    yLines.forEach(function (l, i) { node(yl, "tspan", { x: 0, dy: i === 0 ? 0 : LINE }, l); });
    // a target objective's target: a dashed line with its value, inside the plot
    if (tx !== null) {
      node(svg, "line", { class: "target-line", x1: X(tx), x2: X(tx), y1: top, y2: top + ph, stroke: "#9a6700", "stroke-dasharray": "4 3" });
      var lx = "target " + tickText(tx), toRight = X(tx) + 4 + textWidth(lx) <= left + pw;
      titled(node(svg, "text", { class: "target-label", x: toRight ? X(tx) + 4 : X(tx) - 4, y: top + FONT + 2, "text-anchor": toRight ? "start" : "end", fill: "#9a6700" }, lx), mx + ": target " + tx);
    }
    if (ty !== null) {
      node(svg, "line", { class: "target-line", x1: left, x2: left + pw, y1: Y(ty), y2: Y(ty), stroke: "#9a6700", "stroke-dasharray": "4 3" });
      var ly = "target " + tickText(ty), above = Y(ty) - 4 - FONT >= top;
      titled(node(svg, "text", { class: "target-label", x: left + pw - 4, y: above ? Y(ty) - 4 : Y(ty) + FONT + 2, "text-anchor": "end", fill: "#9a6700" }, ly), my + ": target " + ty);
    }
    // the points by front membership (tester16g F8): the conclusion's candidates dark green,
    // the rest of both fronts light green, the front within noise only amber, the strict front
    // only (dominated beyond noise) blue, neither grey; each labelled with its variant beside
    // it, on the side where the label fits inside the plot, its membership in its title.
    // Variants at one spot (the same values, or within 2 pixels) share one point, drawn once
    // with all their names as its label and in its title (tester16f F7): never one marker
    // hiding another; where their kinds differ, one ring per kind, the outer first
    var KINDS = {
      candidate: { r: 6, color: "#1a7f37", words: "candidate" },
      both: { r: 5, color: "#4ac26b", words: "on both fronts" },
      uncertain: { r: 4.5, color: "#9a6700", words: "front within noise only" },
      strict: { r: 4.5, color: "#0969da", words: "strict front only: dominated beyond noise" },
      dominated: { r: 3.5, color: "#57606a", words: "dominated" }
    };
    var KIND_ORDER = ["candidate", "both", "uncertain", "strict", "dominated"];
    function kindOf(p) { return p.candidate ? "candidate" : p.strict && p.uncertain ? "both" : p.uncertain ? "uncertain" : p.strict ? "strict" : "dominated"; }
    var groups = [];
    pts.forEach(function (p) {
      var px = X(p.x), py = Y(p.y);
      var g = groups.filter(function (q) { return Math.abs(q.px - px) < 2 && Math.abs(q.py - py) < 2; })[0];
      if (g) g.members.push(p); else groups.push({ px: px, py: py, members: [p] });
    });
    function cutTo(str, room) {
      if (textWidth(str) <= room) return str;
      while (str.length > 1 && textWidth(str + "…") > room) str = str.slice(0, -1);
      return str + "…";
    }
    var labelled = [], placed = [];
    groups.forEach(function (g) {
      var ids = g.members.map(function (p) { return p.id; });
      var said = g.members.map(function (p) { return p.id + " (" + KINDS[kindOf(p)].words + "): " + mx + " " + tickText(p.x) + ", " + my + " " + tickText(p.y); }).join("; ");
      var kinds = KIND_ORDER.filter(function (k) { return g.members.some(function (p) { return kindOf(p) === k; }); });
      var px = g.px, py = g.py;
      // one kind: its own size; several: rings 3 pixels apart around the innermost
      function radius(i) { return kinds.length === 1 ? KINDS[kinds[0]].r : 4 + 3 * (kinds.length - 1 - i); }
      var r = radius(0);
      kinds.forEach(function (k, i) {
        var of = g.members.filter(function (p) { return kindOf(p) === k; }).map(function (p) { return p.id; });
        titled(node(svg, "circle", {
          class: "pt " + k + (ids.length > 1 ? " shared" : ""), cx: px, cy: py, r: radius(i), fill: KINDS[k].color,
          stroke: kinds.length > 1 ? "#fff" : "none", "stroke-width": 1, "data-variant": of.join(","), "data-variants": ids.join(",")
        }), said);
      });
      var whole = ids.join(", ");
      var room = pw - 8, label = cutTo(whole, room), w = textWidth(label);
      var lx2 = px + r + 3, anchor = "start";
      if (lx2 + w > left + pw - 2) { lx2 = px - r - 3; anchor = "end"; }
      if (anchor === "end" && lx2 - w < left + 2) { lx2 = left + 2; anchor = "start"; }
      var ly2 = py - r - 2;
      if (ly2 - FONT < top + 2) ly2 = py + r + FONT + 1;
      // a label that would overlap one placed before (two points close together) goes a line
      // further down, or up when that leaves the plot
      var x0 = anchor === "start" ? lx2 : lx2 - w;
      function clash(y) { return placed.some(function (b) { return x0 < b.x1 && x0 + w > b.x0 && y - FONT < b.y1 && y > b.y1 - FONT; }); }
      for (var tries = 0; tries < pts.length && clash(ly2); tries++) ly2 += LINE;
      if (ly2 > top + ph - 3) {
        ly2 = Math.max(top + FONT + 2, py - r - 2);
        for (var up = 0; up < pts.length && clash(ly2) && ly2 - LINE >= top + FONT + 2; up++) ly2 -= LINE;
      }
      if (ly2 > top + ph - 3) ly2 = top + ph - 3;
      placed.push({ x0: x0, x1: x0 + w, y1: ly2 });
      titled(node(svg, "text", { class: "pt-label", x: lx2, y: ly2, "text-anchor": anchor, fill: "#1f2328", "data-variant": ids.join(",") }, label), said);
      labelled.push.apply(labelled, ids);
    });
    box.setAttribute("data-labels", labelled.join(","));
    var legend = document.createElement("div");
    legend.className = "legend muted";
    // the kinds drawn, in their order
    KIND_ORDER.filter(function (k) { return pts.some(function (p) { return kindOf(p) === k; }); }).forEach(function (k) {
      var sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = KINDS[k].color;
      legend.appendChild(sw);
      legend.appendChild(document.createTextNode(" " + KINDS[k].words + "  "));
    });
    if (groups.some(function (g) { return g.members.length > 1; })) {
      legend.appendChild(document.createTextNode("· variants at one point share its marker (a ring per kind) and its label"));
    }
    box.appendChild(legend);
    state.pareto = { points: pts, svg: svg };
  }
  function drawIntervals() {
    var box = $("interval-plot"), m = $("interval-metric").value;
    var vs = data.variants.filter(function (v) { return v.compared && v.values[m] && num(v.values[m].mean) !== null; });
    var xs = vs.map(function (_, i) { return i + 1; });
    var means = vs.map(function (v) { return v.values[m].mean; });
    var lows = vs.map(function (v) { return num(v.values[m].lower); });
    var highs = vs.map(function (v) { return num(v.values[m].upper); });
    box.setAttribute("data-points", String(vs.length));
    if (state.intervals) { state.intervals.destroy(); state.intervals = null; }
    while (box.firstChild) box.removeChild(box.firstChild);
    if (typeof uPlot === "undefined" || vs.length === 0) { box.textContent = vs.length === 0 ? "no compared variant has this metric" : ""; return; }
    var noLine = function () { return null; };
    // the y axis's label on uPlot's canvas (one line, bold 12px): the whole label when it fits
    // the plot's height, else the metric, unit and the direction's arrow, else cut; whole in
    // the box's title
    var H2 = 280, room = H2 - 50 - 16;
    function labelWidth(str) {
      if (!measurer) return str.length * 12 * 0.62;
      measurer.font = 'bold 12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
      return Math.ceil(measurer.measureText(str).width) + 2;
    }
    function tickWidth(str) {
      if (!measurer) return str.length * 12 * 0.62;
      measurer.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
      return Math.ceil(measurer.measureText(str).width) + 2;
    }
    var md = data.metrics[m] || { direction: "" };
    var arrow = md.direction === "maximize" ? " ↑" : md.direction === "minimize" ? " ↓" : md.direction === "target" ? " →" + (num(md.target) !== null ? " " + tickText(md.target) : "") : "";
    var yLabel = [axisLabel(m), shortLabel(m) + arrow, shortLabel(m)].filter(function (t) { return labelWidth(t) <= room; })[0];
    if (yLabel === undefined) {
      yLabel = shortLabel(m);
      while (yLabel.length > 1 && labelWidth(yLabel + "…") > room) yLabel = yLabel.slice(0, -1);
      yLabel += "…";
    }
    box.setAttribute("data-axis-y", yLabel);
    box.setAttribute("data-axis-y-room", String(room));
    // every variant's name under its interval (tester16f F7: past about 7 variants uPlot's
    // default spacing of 50 pixels dropped every one): one tick per variant always; the names
    // turned upright when they do not fit side by side, and the plot made wider (the box then
    // scrolls) when even upright ones would touch
    var ids = vs.map(function (v) { return v.id; });
    var widest = ids.reduce(function (a, id) { return Math.max(a, tickWidth(id)); }, 0);
    var W2 = Math.max(300, box.clientWidth - 16), yAxis = 70;
    var upright = (W2 - yAxis) / (vs.length + 1) < widest + 6;
    if (upright) W2 = Math.max(W2, yAxis + (vs.length + 1) * 16);
    box.setAttribute("data-ticks-upright", String(upright));
    box.setAttribute("data-variants", ids.join(","));
    var yRange = rangeOf(means.concat(lows, highs).filter(function (x) { return x !== null; }));
    box.setAttribute("data-range-y", JSON.stringify(yRange));
    // each interval as a whisker from its lower to its upper bound, behind the points
    function whiskers(u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#0969da";
      ctx.lineWidth = 2 * Math.max(1, Math.round(devicePixelRatio || 1));
      vs.forEach(function (v, i) {
        var lo = num(v.values[m].lower), hi = num(v.values[m].upper);
        if (lo === null || hi === null) return;
        var x = Math.round(u.valToPos(i + 1, "x", true));
        ctx.beginPath();
        ctx.moveTo(x, u.valToPos(lo, "y", true));
        ctx.lineTo(x, u.valToPos(hi, "y", true));
        ctx.stroke();
      });
      ctx.restore();
    }
    state.intervals = new uPlot({
      width: W2, height: H2 + (upright ? Math.max(0, Math.ceil(widest) - 30) : 0),
      hooks: { drawAxes: [whiskers] },
      // y: the values' range, from 0 when none is negative (tester16g F8)
      scales: { x: { time: false, range: [0, vs.length + 1] }, y: { range: function () { return yRange; } } },
      series: [{ label: "variant", value: function (u, v) { return v >= 1 && v <= vs.length ? vs[v - 1].id : ""; } },
               { label: "mean", stroke: "#0969da", paths: noLine, points: { show: true, size: 10, fill: "#0969da" } },
               { label: "lower", stroke: "#57606a", paths: noLine, points: { show: true, size: 6, fill: "#fff" } },
               { label: "upper", stroke: "#57606a", paths: noLine, points: { show: true, size: 6, fill: "#fff" } }],
      axes: [{ label: "variant", incrs: [1], space: function () { return 1; }, rotate: upright ? 90 : 0,
                 size: upright ? Math.ceil(widest) + 10 + 5 + 4 : 50,
                 values: function (u, splits) { return splits.map(function (s) { return s >= 1 && s <= vs.length && s === Math.round(s) ? vs[s - 1].id : ""; }); } }, { label: yLabel, values: function (u, splits, ax, space, incr) { var t = tickTexts(splits, incr); box.setAttribute("data-ticks-y", JSON.stringify(t)); return t; },
                 // wide enough for the widest tick label (ticks 10px, a gap, the text in 12px)
                 size: function (u, values) {
                   var w = (values || []).reduce(function (a, t) { return Math.max(a, tickWidth(String(t))); }, 0), size = Math.max(50, Math.ceil(w) + 10 + 5 + 6);
                   box.setAttribute("data-axis-y-size", String(size));
                   box.setAttribute("data-ticks-y-width", String(Math.ceil(w)));
                   return size;
                 } }]
    }, [xs, means, lows, highs], box);
    box.title = axisLabel(m);
    state.intervals.variants = vs.map(function (v) { return v.id; });
  }
  function draw() { drawPareto(); drawIntervals(); }
  ["pareto-x", "pareto-y", "interval-metric"].forEach(function (id) { $(id).addEventListener("change", draw); });
  var start = (location.hash || "").replace("#", "");
  show(["design", "run", "compare", "evidence", "conclusion"].indexOf(start) >= 0 ? start : "design");
  draw();
  state.ready = true;
})();
`

/**
 * The `Content-Security-Policy` header of the Study page: scripts only from the server and
 * the page's own inline script (pinned by its SHA-256 hash), no other origin.
 *
 * @since 0.7.0
 * @category security
 */
export const STUDY_CSP = `default-src 'none'; script-src 'self' 'sha256-${
  createHash("sha256").update(SCRIPT, "utf8").digest("base64")
}'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`
