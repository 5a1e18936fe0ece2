/**
 * The read-only HTTP view of a store (`assay serve`): a small `HttpRouter` app on
 * `@effect/platform`'s `HttpServer`.
 *
 * | route | answer |
 * | --- | --- |
 * | `/` | the self-refreshing dashboard (src/services/Dashboard.ts) |
 * | `/stats` | the {@link Monitor.Snapshot} of the selected run |
 * | `/metrics` | `{ run_id, rows }` reported metrics; `?pipeline_id=` for one pipeline's |
 * | `/events` | `{ run_id, rows }` latest events, oldest first; `?kind=`, `?limit=` (≤ 1000, default 100) |
 * | `/pipelines` | `{ run_id, rows, next }` paged by key: `?after=<next>&limit=` (≤ 1000, default 50) |
 * | `/resources` | `{ run_id, rows }` pool resources with health |
 * | `/errors` | `{ run_id, rows }` latest failed pipelines; `?limit=` (≤ 1000, default 20) |
 * | `/export` | a download of `?rows=` (`results`, `pipelines`, `tasks`, `attempts`, `events`, `artifacts`, `handoffs`) as `?format=` (`csv`, `jsonl`, `json`): the bytes `assay export --rows ROWS --run-id RUN` writes; `?state=` keeps the `results`/`pipelines` rows in that state |
 * | `/experiments` | suite roots only: `{ suite_id, layout, run_id, rows }` the members (counts, source status and facts, member-scoped metrics) |
 * | `/study` | a study's output root only: the `StudyCompare.StudyComparison` of its current protocol version (cached until the study's rows change) |
 * | `/study/evidence` | the `StudyCompare.Evidence` of `?metric=&variant=` (400 naming an unknown one) |
 * | `/study/page` | the Study page (tabs Design, Run, Compare, Evidence, Conclusion; Pareto and interval plots) |
 * | `/assets/uplot.js`, `/assets/uplot.css` | the chart library, served locally |
 *
 * Every route takes `run_id`: absent = the server's default selection (the whole store unless
 * the server was given one), `all` = the whole store (every run), `latest` = the most recently
 * started run, an id = that run (404 when unknown). On a suite root every route also takes
 * `experiment` (one member's view, combined with `run_id`; 404 for an unknown member, 400 on an
 * ordinary store); a run's counts there are its durable outcomes, and pools are marked shared
 * (never attributed to a member) or private. Bad parameters answer 400 with `{ error }`;
 * any method but GET/HEAD answers 405. Only `/export` serves artifact payloads (decoded, as
 * `assay export` does, with the secrets the store never held); nothing writes to the store.
 *
 * @since 0.1.0
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeStream from "@effect/platform-node/NodeStream"
import { Data, Effect, Option, ParseResult, Schema, type Scope, Stream } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as nodePath from "node:path"
import { ConfigError } from "../../domain/Errors.js"
import { PipelineId } from "../../domain/Ids.js"
import { DASHBOARD_CSP, renderDashboard } from "../Dashboard.js"
import * as Export from "./export.js"
import * as Monitor from "./monitor.js"
import * as SuiteViews from "./suiteViews.js"
import { renderStudyPage, STUDY_CSP } from "./studyPage.js"
import * as StudyView from "./studyView.js"
import type { TaskStore } from "../Store.js"
import type * as StudyCompare from "../StudyCompare.js"

/**
 * A request parameter the server cannot accept (answered with 400).
 *
 * @since 0.1.0
 * @category errors
 */
export class BadRequest extends Data.TaggedError("BadRequest")<{ readonly message: string }> {}

/**
 * `?experiment=` names no member of the served suite (answered with 404).
 *
 * @since 0.3.0
 * @category errors
 */
export class UnknownMember extends Data.TaggedError("UnknownMember")<{ readonly message: string }> {}

/**
 * Options of {@link makeApp}.
 *
 * - `store`: the store to read (open it read-only: `SqliteStore.layerReadOnly`);
 * - `allowAnyHost`: skip the `Host` header check ({@link hostAllowed});
 * - `reads`: the keyset/histogram reads ({@link Monitor.storeReads} over the store);
 * - `runId`: the default selection when a request has no `run_id` (`undefined` or `"all"`:
 *   the whole store, the cumulative picture after any number of runs and resumes; `"latest"`:
 *   the most recently started run; or an id);
 * - `errors`: recent errors in `/stats` (default 10);
 * - `refreshMs`: the dashboard's refresh period (default 2000 ms).
 *
 * @since 0.1.0
 * @category models
 */
export interface AppOptions {
  readonly store: TaskStore
  /**
   * Answer requests whatever their `Host` header names (default `false`: only
   * `127.0.0.1`, `localhost` and `[::1]` with the port the request came in on are answered;
   * any other host gets 403, which defeats DNS rebinding). `serve`'s `allowRemote` sets it.
   */
  readonly allowAnyHost?: boolean | undefined
  readonly reads: Monitor.MonitorReads
  readonly runId?: Monitor.RunSelector
  readonly errors?: number | undefined
  readonly refreshMs?: number | undefined
  /**
   * The suite when `store` is a suite root's merged view: every route then takes
   * `?experiment=ID` (one member's view, combined with `run_id`), `/experiments` lists the
   * members, and pools are marked shared or private.
   */
  readonly suite?: SuiteViews.SuiteReads | undefined
  /** With `suite`: the member shown when a request names none (default: the whole suite). */
  readonly experiment?: string | undefined
  /**
   * The study when `store` is a study's output root: `/study` answers its comparison,
   * `/study/evidence` the evidence of one number, `/study/page` the Study page, and the
   * dashboard links it. Absent (or a root whose study never ran): those routes answer 404 and
   * the dashboard shows no Study link.
   */
  readonly study?: StudyView.StudyReads | undefined
}

/** Largest `limit` any endpoint accepts. */
const MAX_LIMIT = 1000

/** The pipeline states a `?state=` filter of `/export` accepts. */
const STATES = ["pending", "running", "succeeded", "failed", "interrupted"] as const

const loadAsset = (specifier: string): Option.Option<Uint8Array> => {
  try {
    return Option.some(fs.readFileSync(createRequire(import.meta.url).resolve(specifier)))
  } catch {
    return Option.none()
  }
}

// ---------------------------------------------------------------------------------------------
// Query parameters (decoded by Schema; a bad one answers 400 naming it)
// ---------------------------------------------------------------------------------------------

/** A parameter given once (a repeated one, which arrives as an array, is refused). */
const Once = Schema.String.annotations({ message: () => "given more than once" })

/** An optional parameter given at most once. */
const optionalOnce = Schema.optionalWith(Once, { exact: true })

/** `limit`: an integer in 1..{@link MAX_LIMIT}, `fallback` when absent. */
const limitParam = (fallback: number) =>
  Schema.optionalWith(
    Schema.compose(
      Once.pipe(Schema.pattern(/^\d+$/, { message: (i) => `must be an integer between 1 and ${MAX_LIMIT}, got ${JSON.stringify(i.actual)}` })),
      Schema.NumberFromString.pipe(
        Schema.between(1, MAX_LIMIT, { message: (i) => `must be between 1 and ${MAX_LIMIT}, got ${String(i.actual)}` })
      )
    ),
    { default: () => fallback, exact: true }
  )

/** One of `values`, given once. */
const choiceParam = <const L extends ReadonlyArray<string>>(values: L) =>
  Once.pipe(
    Schema.filter((s): s is L[number] => values.includes(s), {
      message: (i) => `must be one of ${values.join(", ")}, got ${JSON.stringify(i.actual)}`
    })
  )

/** `run_id`: absent, or a non-empty selector (`all`, `latest` or a run id). */
const RunIdParams = Schema.Struct({
  run_id: Schema.optionalWith(Once.pipe(Schema.filter((s) => s.trim() !== "", { message: () => "must not be empty" })), {
    exact: true
  }),
  // a suite root only: one member's view (combined with run_id)
  experiment: Schema.optionalWith(Once.pipe(Schema.filter((s) => s.trim() !== "", { message: () => "must not be empty" })), {
    exact: true
  })
})

/** `after`: a cursor `/pipelines` returned (empty = the first page). */
const CursorParam = Schema.transformOrFail(Once, Schema.Unknown, {
  strict: true,
  decode: (token, _, ast) =>
    token === ""
      ? ParseResult.succeed(undefined)
      : Option.match(Monitor.decodeCursor(token), {
        onNone: () => ParseResult.fail(new ParseResult.Type(ast, token, "is not a cursor returned by /pipelines")),
        onSome: (cursor) => ParseResult.succeed(cursor)
      }),
  encode: (cursor) => ParseResult.succeed(cursor === undefined ? "" : Monitor.encodeCursor(cursor as Monitor.PipelineCursor))
})

/**
 * The query parameters of each route, as Schemas of the parsed search parameters (unknown
 * parameters are ignored).
 *
 * @since 0.1.0
 * @category parameters
 */
export const QueryParams = {
  "/": RunIdParams,
  "/study/evidence": Schema.Struct({ metric: Once, variant: Once }),
  "/stats": RunIdParams,
  "/experiments": RunIdParams,
  "/resources": RunIdParams,
  "/metrics": Schema.Struct({
    ...RunIdParams.fields,
    // branded here, at the boundary
    pipeline_id: Schema.optionalWith(Once.pipe(Schema.compose(PipelineId)), { exact: true })
  }),
  "/events": Schema.Struct({ ...RunIdParams.fields, kind: optionalOnce, limit: limitParam(100) }),
  "/errors": Schema.Struct({ ...RunIdParams.fields, limit: limitParam(20) }),
  "/pipelines": Schema.Struct({
    ...RunIdParams.fields,
    limit: limitParam(50),
    after: Schema.optionalWith(CursorParam, { exact: true }),
    state: Schema.optionalWith(choiceParam(STATES), { exact: true })
  }),
  "/export": Schema.Struct({
    ...RunIdParams.fields,
    rows: Schema.optionalWith(choiceParam(Export.ROW_KINDS), { default: () => "results" as const, exact: true }),
    format: Schema.optionalWith(choiceParam(Export.FORMATS), { default: () => "csv" as const, exact: true }),
    state: Schema.optionalWith(choiceParam(STATES), { exact: true })
  }).pipe(
    Schema.filter((p) =>
      p.state === undefined || p.rows === "results" || p.rows === "pipelines"
        ? undefined
        : { path: ["state"], message: "filters results or pipelines rows only" }
    )
  )
} as const

/**
 * Decodes the request's query parameters with `schema`; a bad parameter fails with
 * {@link BadRequest} naming it: `"limit": must be between 1 and 1000, got 0` (every problem,
 * separated by `; `).
 */
const queryParams = <A, I extends Readonly<Record<string, string | ReadonlyArray<string> | undefined>>>(
  schema: Schema.Schema<A, I>
) =>
  HttpServerRequest.schemaSearchParams(schema, { errors: "all" }).pipe(
    Effect.mapError((e) =>
      new BadRequest({
        message: ParseResult.ArrayFormatter.formatErrorSync(e).map((issue) =>
          issue.path.length === 0 ? issue.message : `"${issue.path.join(".")}": ${issue.message}`
        ).join("; ")
      })
    )
  )

const json = (body: unknown, status = 200) =>
  HttpServerResponse.unsafeJson(body, { status, headers: { "cache-control": "no-store" } })

/** Content types of the `/export` formats. */
const EXPORT_TYPES: Readonly<Record<Export.Format, string>> = {
  csv: "text/csv; charset=utf-8",
  jsonl: "application/x-ndjson; charset=utf-8",
  json: "application/json; charset=utf-8"
}


/**
 * The file name of an `/export` download: `assay-ROWS[-STATE][-RUN].FORMAT` (the run id
 * reduced to `[A-Za-z0-9._-]`).
 *
 * @since 0.2.0
 * @category exports
 */
export const exportFileName = (rows: string, format: string, runId: string | null, state: string | undefined): string =>
  `assay-${rows}${state === undefined ? "" : `-${state}`}${runId === null || runId === "all" ? "" : `-${runId.replace(/[^A-Za-z0-9._-]/g, "_")}`}.${format}`

/**
 * The rows of `/export` as a byte stream, exactly as `assay export` writes them: the rows of
 * {@link Export.iterRows} are written by {@link Export.writeRows} into a private temporary
 * directory (the export service encodes only into files), whose file is then streamed and
 * removed when the stream ends, fails or is interrupted (a client gone mid-download).
 * `keep` filters rows (the `?state=` filter). Fails with the store's read errors or
 * `ExportError`; the directory is removed on every failure.
 */
const exportBytes = (
  store: TaskStore,
  suiteId: string | undefined,
  options: Export.RowOptions,
  format: Export.Format,
  keep: ((row: Export.Row) => boolean) | undefined
) =>
  Effect.gen(function*() {
    const dir = yield* Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-serve-export-")))
    const remove = Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    const file = nodePath.join(dir, `rows.${format}`)
    const items = Export.rowItems(store, options)
    // a suite's audit rows keep their member identity, and its rows show the read state (as
    // `assay export ROOT` writes them): `keep` filters on what is shown
    const rows = Stream.mapEffect(
      suiteId === undefined
        ? items
        : SuiteViews.withReadState(store, options.kind, SuiteViews.withMemberIdentity(store, suiteId, options.kind, items)),
      Export.materialize
    )
    yield* Export.writeRows(keep === undefined ? rows : Stream.filter(rows, keep), file, format).pipe(Effect.onExit((exit) =>
      exit._tag === "Success" ? Effect.void : remove
    ))
    const size = yield* Effect.sync(() => fs.statSync(file).size)
    // nothing to stream (no rows, e.g. the ledger of a store without control): no file kept
    if (size === 0) {
      yield* remove
      return { body: Stream.empty, size }
    }
    const body = NodeStream.fromReadable<Error, Uint8Array>(() => fs.createReadStream(file), (e) => e as Error).pipe(
      Stream.ensuring(remove)
    )
    return { body, size }
  })

/**
 * Builds the server's HTTP app (an Effect answering one request). The uPlot assets are read
 * once here. The app never fails: errors become JSON answers (400 bad parameter, 404 unknown
 * route or run, 405 non-GET, 503 store unavailable).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeApp = (
  options: AppOptions
): HttpApp.Default<never, never> => {
  const { reads, store } = options
  const errorsN = options.errors ?? 10
  const uplotJs = loadAsset("uplot/dist/uPlot.iife.min.js")
  const uplotCss = loadAsset("uplot/dist/uPlot.min.css")

  /** The selection a request's `run_id` names, else the server's default. */
  const selectionOf = (runId: string | undefined) => Monitor.resolveSelection(store, runId ?? options.runId ?? "all")

  const suite = options.suite
  /** Member views already opened (by member id). */
  const views = new Map<string, { readonly store: TaskStore; readonly reads: Monitor.MonitorReads }>()
  /**
   * The store a request reads: the server's, or (`?experiment=ID`, suite roots only) that
   * member's view; 400 outside a suite, 404 for an unknown member.
   */
  const scopeOf = (requested: string | undefined) =>
    Effect.gen(function*() {
      const experiment = requested ?? options.experiment
      if (experiment === undefined) return { store, reads, experiment }
      if (suite === undefined) return yield* new BadRequest({ message: `"experiment": only a suite root has members` })
      // member ids are unique ignoring case: `?experiment=FULL` is the member `full`
      const member = yield* SuiteViews.checkMember(suite, experiment).pipe(
        Effect.catchTag("ConfigError", (e) => Effect.fail(new UnknownMember({ message: e.message })))
      )
      const canonical = member.experimentId
      const known = views.get(canonical)
      if (known !== undefined) return { ...known, experiment: canonical }
      const view = yield* suite.view(canonical)
      const opened = { store: view, reads: Monitor.storeReads(view) }
      views.set(canonical, opened)
      return { ...opened, experiment: canonical }
    })
  /** The monitoring picture of a selection in a scope (the suite's when serving a suite root). */
  const snapshotIn = (sel: Monitor.Selection, scope: { readonly store: TaskStore; readonly reads: Monitor.MonitorReads; readonly experiment: string | undefined }) =>
    suite === undefined
      ? Monitor.snapshotOf(scope.store, sel, errorsN, scope.reads)
      : SuiteViews.suiteSnapshot(suite, sel, { experiment: scope.experiment, errors: errorsN })

  /** The study's analysis, cached per change of the study's rows (`None`: not a study root). */
  const studyCache = options.study === undefined ? undefined : StudyView.makeCache(options.study)
  const analysis = studyCache === undefined ? Effect.succeed(Option.none<StudyCompare.Analysis>()) : studyCache.get
  const notStudy = () => json({ error: "not a study's output root: no study ran here" }, 404)

  const router = HttpRouter.empty.pipe(
    HttpRouter.get(
      "/study",
      Effect.map(analysis, Option.match({ onNone: notStudy, onSome: (a) => json(a.comparison) }))
    ),
    HttpRouter.get(
      "/study/evidence",
      Effect.gen(function*() {
        const { metric, variant } = yield* queryParams(QueryParams["/study/evidence"])
        const a = yield* analysis
        if (Option.isNone(a)) return notStudy()
        return json(yield* a.value.evidence(metric, variant))
      })
    ),
    HttpRouter.get(
      "/study/page",
      Effect.gen(function*() {
        const a = yield* analysis
        if (Option.isNone(a)) return notStudy()
        // each variant's pipelines by trial (read from the cached analysis: nothing recomputed)
        const pipelineTrial = new Map<string, string>()
        const c = a.value.comparison
        const first = c.metrics[0]
        // a variant with no compared trial (every one broke a hard constraint, say): its cases
        // per metric, marked not compared, as `study evidence` shows them (tester16b N6)
        const notCompared = new Map<string, Map<string, StudyCompare.Evidence>>()
        if (first !== undefined) {
          for (const v of c.variants) {
            if (v.succeeded === 0) {
              if (v.trials.length === 0) continue
              const byMetric = new Map<string, StudyCompare.Evidence>()
              for (const m of c.metrics) {
                const ev = yield* a.value.evidence(m.name, v.variantId)
                if (ev.notCompared !== undefined) byMetric.set(m.name, ev)
                for (const t of ev.trials) for (const p of t.pipelines) pipelineTrial.set(p, t.trialId)
              }
              if (byMetric.size > 0) notCompared.set(v.variantId, byMetric)
              continue
            }
            const ev = yield* a.value.evidence(first.name, v.variantId)
            for (const t of ev.trials) for (const p of t.pipelines) pipelineTrial.set(p, t.trialId)
          }
        }
        // (HttpServerResponse.html escapes nothing: renderStudyPage escapes every value)
        return HttpServerResponse.text(renderStudyPage(c, { pipelineTrial, notCompared }), {
          contentType: "text/html; charset=utf-8",
          headers: { "cache-control": "no-store", "content-security-policy": STUDY_CSP, "x-content-type-options": "nosniff" }
        })
      })
    ),
    HttpRouter.get(
      "/",
      Effect.gen(function*() {
        const { experiment, run_id: raw } = yield* queryParams(QueryParams["/"])
        const scope = yield* scopeOf(experiment)
        const sel = yield* selectionOf(raw)
        const snapshot = yield* snapshotIn(sel, scope)
        // a study ran here (its row read only; the comparison is computed by the Study page)
        const study = options.study === undefined ? false : Option.isSome(yield* options.study.study.study(options.study.studyId))
        // (HttpServerResponse.html escapes nothing: renderDashboard escapes every store value)
        return HttpServerResponse.text(renderDashboard(snapshot, { refreshMs: options.refreshMs, runIdParam: raw, experimentParam: scope.experiment, suiteLink: options.experiment === undefined, studyLink: study }), {
          contentType: "text/html; charset=utf-8",
          headers: { "cache-control": "no-store", "content-security-policy": DASHBOARD_CSP, "x-content-type-options": "nosniff" }
        })
      })
    ),
    HttpRouter.get(
      "/stats",
      Effect.gen(function*() {
        const { experiment, run_id } = yield* queryParams(QueryParams["/stats"])
        const scope = yield* scopeOf(experiment)
        return json(yield* snapshotIn(yield* selectionOf(run_id), scope))
      })
    ),
    HttpRouter.get(
      "/experiments",
      Effect.gen(function*() {
        const { experiment, run_id } = yield* queryParams(QueryParams["/experiments"])
        if (suite === undefined) return json({ error: "not a suite root: /experiments lists the members of a suite" }, 404)
        const scope = yield* scopeOf(experiment)
        const sel = yield* selectionOf(run_id)
        const rows = sel._tag === "Empty"
          ? []
          : yield* SuiteViews.memberSummaries(suite, { experiment: scope.experiment, runId: sel._tag === "Run" ? sel.run.runId : undefined })
        return json({
          suite_id: suite.suiteId,
          layout: suite.layout,
          run_id: Monitor.selectionRunId(sel),
          rows: rows.map(SuiteViews.memberWire)
        })
      })
    ),
    HttpRouter.get(
      "/metrics",
      Effect.gen(function*() {
        const { experiment, pipeline_id: pipelineId, run_id } = yield* queryParams(QueryParams["/metrics"])
        const { store } = yield* scopeOf(experiment)
        const sel = yield* selectionOf(run_id)
        const runs = sel._tag === "Run" ? [sel.run.runId] : sel._tag === "All" ? sel.runs.map((r) => r.runId) : []
        const rows: Array<Monitor.MetricRow> = []
        for (const runId of runs) {
          for (const m of yield* store.metrics({ runId, pipelineId: pipelineId ?? undefined })) rows.push(Monitor.metricRow(m))
        }
        return json({ run_id: Monitor.selectionRunId(sel), pipeline_id: pipelineId ?? null, rows })
      })
    ),
    HttpRouter.get(
      "/events",
      Effect.gen(function*() {
        const { experiment, kind, limit, run_id } = yield* queryParams(QueryParams["/events"])
        const { store } = yield* scopeOf(experiment)
        const sel = yield* selectionOf(run_id)
        const runId = sel._tag === "Run" ? sel.run.runId : undefined
        const rows = sel._tag === "Empty" ? [] : yield* store.events({ runId, kind, limit })
        return json({ run_id: Monitor.selectionRunId(sel), rows: rows.map(Monitor.eventRow) })
      })
    ),
    HttpRouter.get(
      "/pipelines",
      Effect.gen(function*() {
        const q = yield* queryParams(QueryParams["/pipelines"])
        const { limit } = q
        const after = q.after as Monitor.PipelineCursor | undefined
        const { reads, store } = yield* scopeOf(q.experiment)
        const sel = yield* selectionOf(q.run_id)
        if (sel._tag === "Empty") return json({ run_id: null, rows: [], next: null })
        const o = { runId: sel._tag === "Run" ? sel.run.runId : undefined, state: q.state, after, limit }
        // a suite root: a row left running by a run that is no longer running reads interrupted
        // (its stored state kept as `stored_state`; nothing is written), and `?state=` filters on
        // what is shown
        const page = suite === undefined
          ? yield* reads.pipelinesPage(o)
          : yield* SuiteViews.readPipelinesPage(reads, yield* SuiteViews.liveRuns(store), o)
        return json({
          run_id: Monitor.selectionRunId(sel),
          rows: page.rows,
          next: page.next === null ? null : Monitor.encodeCursor(page.next)
        })
      })
    ),
    HttpRouter.get(
      "/resources",
      Effect.gen(function*() {
        const { experiment, run_id } = yield* queryParams(QueryParams["/resources"])
        const { store } = yield* scopeOf(experiment)
        const sel = yield* selectionOf(run_id)
        const runId = sel._tag === "Run" ? sel.run.runId : undefined
        const stored = (yield* store.resources).map(Monitor.resourceRow)
        // a run's resources whose row a later run overwrote: kept when the run leased them
        const leased = runId !== undefined && stored.some((r) => r.run_id !== null && r.run_id !== runId) &&
            typeof (store as Partial<typeof store>).resourceUsage === "function"
          ? new Set((yield* store.resourceUsage(runId)).filter((u) => u.attempts > 0).map((u) => u.target))
          : new Set<string>()
        const rows = Monitor.scopeResourceRows(stored, runId, leased).filter((r) => suite === undefined || SuiteViews.poolVisible(r.pool, experiment ?? options.experiment)).map((r) =>
          // a suite's pools: shared ones are never attributed to a member
          suite === undefined ? r : { ...r, shared: SuiteViews.poolOwner(r.pool) === null, experiment_id: SuiteViews.poolOwner(r.pool) }
        )
        return json({ run_id: Monitor.selectionRunId(sel), rows })
      })
    ),
    HttpRouter.get(
      "/errors",
      Effect.gen(function*() {
        const { experiment, limit, run_id } = yield* queryParams(QueryParams["/errors"])
        const { store } = yield* scopeOf(experiment)
        const sel = yield* selectionOf(run_id)
        const rows = sel._tag === "Empty"
          ? []
          : yield* store.errors({ runId: sel._tag === "Run" ? sel.run.runId : undefined, limit })
        const wires = rows.map(Monitor.errorRow)
        // suite pipelines: each row names its member and local key
        return json({ run_id: Monitor.selectionRunId(sel), rows: suite === undefined ? wires : yield* SuiteViews.errorWiresWithMember(store, wires) })
      })
    ),
    HttpRouter.get(
      "/export",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const { experiment, format, rows: kind, run_id, state } = yield* queryParams(QueryParams["/export"])
        const { store } = yield* scopeOf(experiment)
        const sel = yield* selectionOf(run_id)
        const runId = Monitor.selectionRunId(sel)
        const headers = {
          "cache-control": "no-store",
          "content-disposition": `attachment; filename="${exportFileName(kind, format, runId, state)}"`,
          "x-content-type-options": "nosniff"
        }
        // HEAD: the headers only (no body is sent, so none is made)
        if (request.method === "HEAD") return HttpServerResponse.empty({ status: 200, headers: { ...headers, "content-type": EXPORT_TYPES[format] } })
        const { body, size } = yield* exportBytes(
          store,
          suite?.suiteId,
          { kind, runId: sel._tag === "Run" ? sel.run.runId : undefined, limit: sel._tag === "Empty" ? 0 : undefined },
          format,
          state === undefined ? undefined : (row) => row["state"] === state
        )
        // an empty body (no rows) with an explicit `content-length: 0` (Node sends none for it)
        return size === 0
          ? HttpServerResponse.uint8Array(new Uint8Array(0), { contentType: EXPORT_TYPES[format], headers: { ...headers, "content-length": "0" } })
          : HttpServerResponse.stream(body, { contentType: EXPORT_TYPES[format], contentLength: size, headers })
      })
    ),
    HttpRouter.get(
      "/assets/uplot.js",
      Option.match(uplotJs, {
        onNone: () => Effect.succeed(json({ error: "uplot is not installed" }, 404)),
        onSome: (body) =>
          Effect.succeed(HttpServerResponse.uint8Array(body, {
            contentType: "text/javascript; charset=utf-8",
            headers: { "cache-control": "max-age=3600" }
          }))
      })
    ),
    HttpRouter.get(
      "/assets/uplot.css",
      Option.match(uplotCss, {
        onNone: () => Effect.succeed(json({ error: "uplot is not installed" }, 404)),
        onSome: (body) =>
          Effect.succeed(HttpServerResponse.uint8Array(body, {
            contentType: "text/css; charset=utf-8",
            headers: { "cache-control": "max-age=3600" }
          }))
      })
    ),
    HttpRouter.catchTags({
      BadRequest: (e) => Effect.succeed(json({ error: e.message }, 400)),
      UnknownRun: (e) => Effect.succeed(json({ error: e.message }, 404)),
      UnknownMember: (e) => Effect.succeed(json({ error: e.message }, 404)),
      ConfigError: (e) => Effect.succeed(json({ error: e.message }, 400)),
      StoreUnavailable: (e) => Effect.succeed(json({ error: e.message }, 503)),
      ExportError: (e) => Effect.succeed(json({ error: e.message }, 500)),
      RouteNotFound: () => Effect.succeed(json({ error: "not found" }, 404))
    })
  )

  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (options.allowAnyHost !== true) {
      const source = request.source as { readonly socket?: { readonly localPort?: number } }
      const hostHeader = request.headers["host"]
      if (!hostAllowed(hostHeader, source.socket?.localPort)) {
        return HttpServerResponse.unsafeJson({
          error:
            `host ${JSON.stringify(hostHeader ?? "")} not allowed: this server answers only requests addressed to 127.0.0.1, localhost or [::1] with its own port (serve --allow-remote lifts this)`
        }, { status: 403, headers: { "cache-control": "no-store" } })
      }
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      return HttpServerResponse.unsafeJson({ error: `method ${request.method} not allowed: this server is read-only` }, {
        status: 405,
        headers: { allow: "GET, HEAD" }
      })
    }
    return yield* router
  }).pipe(
    // No route matched → 404; a request whose URL cannot be parsed (search params) → 400.
    Effect.catchAll((e) =>
      Effect.succeed(
        (e as { _tag?: unknown })._tag === "RouteNotFound"
          ? json({ error: "not found" }, 404)
          : json({ error: String((e as { message?: unknown }).message ?? e) }, 400)
      )
    )
  )
}

/**
 * Whether `host` is a loopback address (`127.0.0.0/8`, `::1`, `localhost`).
 *
 * @since 0.1.0
 * @category security
 */
export const isLoopback = (host: string): boolean =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)

/**
 * Whether a request's `Host` header names this loopback server: the host part is
 * `127.0.0.1`, `localhost` or `[::1]` (case-insensitive) and the port, when the header has
 * one, is `localPort` (the port the request arrived on); a header without a port is accepted
 * only for port 80. A missing header is refused (HTTP/1.1 requires it).
 *
 * This is the standard defence against DNS rebinding (a web page whose own host name is made
 * to resolve to 127.0.0.1 still sends its own name in `Host`), as in Jupyter's and webpack
 * dev server's host checks.
 *
 * @param host the raw `Host` header (`undefined` when absent)
 * @param localPort the local TCP port of the connection (`undefined` when unknown: then any port is accepted)
 * @since 0.1.0
 * @category security
 */
export const hostAllowed = (host: string | undefined, localPort: number | undefined): boolean => {
  if (host === undefined) return false
  const m = /^(\[::1\]|[^:\[\]]+)(?::(\d{1,5}))?$/.exec(host.trim().toLowerCase())
  if (m === null) return false
  const name = m[1]!
  if (name !== "127.0.0.1" && name !== "localhost" && name !== "[::1]") return false
  if (localPort === undefined) return true
  return (m[2] === undefined ? 80 : Number(m[2])) === localPort
}

/**
 * Options of {@link serve}: the app's options plus where to listen. `host` defaults to
 * `127.0.0.1`, `port` to 8787 (0 = any free port). A non-loopback `host` is refused unless
 * `allowRemote` is set: the views expose stored error messages and event data, with no
 * authentication.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends AppOptions {
  readonly host?: string | undefined
  readonly port?: number | undefined
  readonly allowRemote?: boolean | undefined
}

/**
 * Where a started server listens.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServeInfo {
  readonly host: string
  readonly port: number
  readonly url: string
  readonly loopback: boolean
}

/**
 * What to tell a user whose server cannot listen on `host:port`, from the listen error's
 * Node code: a busy port names the port and suggests `--port` (or `--port 0` for any free
 * one); a privileged port, an address that is not this machine's, and an unknown host each say
 * so; anything else keeps Node's message.
 *
 * @param cause the error `listen` failed with (a Node `SystemError` with `code`)
 * @since 0.1.0
 * @category security
 */
export const listenErrorMessage = (host: string, port: number, cause: unknown): string => {
  const code = typeof cause === "object" && cause !== null ? (cause as { code?: unknown }).code : undefined
  const where = `${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${port}`
  switch (code) {
    case "EADDRINUSE":
      return `port ${port} on ${host} is already in use (another assay serve?): choose another with --port N, or --port 0 for any free port`
    case "EACCES":
      return `not allowed to listen on ${where}: ports below 1024 need privileges; use --port with a port of 1024 or more (or --port 0)`
    case "EADDRNOTAVAIL":
      return `cannot listen on ${where}: ${host} is not an address of this machine (--host)`
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `cannot listen on ${where}: cannot resolve host ${host} (--host)`
    default:
      return `cannot listen on ${where}: ${cause instanceof Error ? cause.message : String(cause)}`
  }
}

/**
 * Starts the server in the current scope (closing the scope stops it) and returns where it
 * listens. Fails with `ConfigError` for a non-loopback host without `allowRemote`, an
 * invalid port, or a port that cannot be bound (busy, privileged: {@link listenErrorMessage}).
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (options: ServeOptions): Effect.Effect<ServeInfo, ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? 8787
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      return yield* new ConfigError({ message: `--port must be an integer in 0..65535, got ${port}` })
    }
    const loopback = isLoopback(host)
    if (!loopback && options.allowRemote !== true) {
      return yield* new ConfigError({
        message:
          `refusing to listen on ${host}: the monitor has no authentication and shows stored error messages and event data; it binds loopback only (use --allow-remote behind your own proxy)`
      })
    }
    const server = yield* NodeHttpServer.make(() => http.createServer(), { host, port }).pipe(
      Effect.mapError((e) => new ConfigError({ message: listenErrorMessage(host, port, e.cause) }))
    )
    yield* HttpServer.serveEffect(makeApp({ ...options, allowAnyHost: options.allowAnyHost ?? options.allowRemote === true })).pipe(Effect.provideService(HttpServer.HttpServer, server))
    const address = server.address
    const boundPort = address._tag === "TcpAddress" ? address.port : port
    const shown = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host
    return { host, port: boundPort, url: `http://${shown}:${boundPort}`, loopback }
  })
