/**
 * Export: a store's facts as rows (`iterRows`, `rowItems`) and as files (`writeRows`,
 * `exportStore`, `exportStores`).
 *
 * Nine row kinds ({@link ROW_KINDS}) in three formats ({@link FORMATS}):
 *
 * | kind | one row per | order (the order `limit` cuts) |
 * | --- | --- | --- |
 * | `pipelines` | pipeline, nested: `tasks`, `artifacts` (decoded payloads), `attemptsTotal`, `repeat`; for a pipeline that declares `control`, also `control` (its traversal record) and `handoffs` (its ledger rows) | createdAt, pipelineId |
 * | `tasks` | task run | the store's pipeline order (admission order on SQLite v3), seq, visit (0 first), taskRunId |
 * | `attempts` | attempt (with its retry `decision`) | attemptId |
 * | `events` | event | eventId |
 * | `artifacts` | artifact (seeds and intermediates included, its occurrence `address`, decoded payload) | pipeline order, seq, artifactId |
 * | `results` | pipeline: key, repeat, state, final payload, failure fields (failed and interrupted included) | createdAt, pipelineId |
 * | `handoffs` | control transition (handoff ledger row: from/to seq and task, operation, entry artifact, reused, reason) | handoffId |
 * | `resources` | pool resource: the token and cost totals of the attempts that leased it (see {@link usageRows}) | pool, resourceId |
 * | `pools` | pool: the sum of its resources' rows | pool |
 *
 * Artifact rows (top-level or nested) carry `address`, the occurrence address
 * (`pipelineId:seq`, `pipelineId:seq#visit`), beside the store's numeric `artifactId`. Task and
 * artifact rows (top-level or nested) carry `visit` (which entry of the station made
 * them) and `active` (part of the current traversal, or history superseded by a rewind, a
 * retry-all or a restart); attempt rows carry `visit`.
 *
 * **Memory is bounded by bytes, not by row counts.** Pipelines are paged ({@link NESTED_BATCH}
 * or the store's `PAGE_SIZE` at a time); each page is read once with its payloads up to
 * {@link BATCH_BYTES} (the store's `payloadBytes` budget: with small payloads, the whole page in
 * one read); the pipelines that read could not return whole are then loaded in groups whose
 * payload bytes add up to at most {@link BATCH_BYTES}. A pipeline whose payloads exceed that budget on their
 * own is read one artifact at a time: for `artifacts` each artifact is its own row; for
 * `pipelines` the row is a {@link LargeRow} whose `artifacts` are loaded, encoded and written
 * one by one, so no two of its payloads are in memory together. The encoders write each row's
 * bytes into 1 MiB buffers handed to the output with backpressure, so no batch is ever one
 * large string, and the CSV header's look-ahead is bounded in bytes as well as rows.
 *
 * Files go through `OutputFile.open`: a regular file (or a symbolic link's target) is written
 * to a temp file beside it and renamed over it only when every row is written (a failure or an
 * interruption leaves no partial output and no temp file; a killed export's temp is swept by
 * the next export to the same path); `-` is standard output and a device or FIFO is streamed.
 *
 * Payloads: an artifact written by the JSON codec is exported as its JSON value; any other
 * codec (bytes, schema codecs, plugins) is exported as a descriptor
 * `{ typeName, codec, size, digest, base64 }` (the stored bytes, base64-encoded); a payload
 * that is not available (`journal: "summary"`, the null backend, a deleted blob) is `null`.
 *
 * Shaping ({@link ShapeOptions}): `time: "iso"` writes the records' epoch-ms times as ISO-8601
 * strings; `flatten` spreads nested objects (payload fields, tags, decisions, event data) into
 * dotted columns up to a depth; `csvSafe` protects CSV cells from formula injection.
 *
 * @since 0.1.0
 */
import { knownCost } from "./money.js"
import { stringify } from "csv-stringify/sync"
import { Array as Arr, Chunk, Effect, Either, Option, Schema, type Scope, Stream } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { fileURLToPath } from "node:url"
import { CodecRegistry } from "../../domain/Codec.js"
import { ConfigError, type PluginError, type StoreUnavailable } from "../../domain/Errors.js"
import type { PipelineId, RunId } from "../../domain/Ids.js"
import type { HandoffRecord } from "../../domain/Handoff.js"
import type { ArtifactRecord, PipelineRecord, TaskRecord } from "../../domain/Records.js"
import * as Traversal from "../../domain/Traversal.js"
import type { VisitState } from "../../domain/Traversal.js"
import * as SpecUri from "../../domain/SpecUri.js"
import * as OutputFile from "../OutputFile.js"
import * as StoreFiles from "../StoreFiles.js"
import type { AccountingFigures, BundleOptions, Limit, LoadedArtifact, PipelineBundle, ReadError, ResourceUsage, StoreService, TaskStore } from "../Store.js"
import * as Store from "../Store.js"
import { PAGE_SIZE, sumUsage, usageAccumulator } from "./store/shared.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * The row kinds, in documentation order.
 *
 * @since 0.1.0
 * @category constants
 */
export const ROW_KINDS = ["pipelines", "tasks", "attempts", "events", "artifacts", "results", "handoffs", "resources", "pools"] as const

/**
 * One of {@link ROW_KINDS}.
 *
 * @since 0.1.0
 * @category models
 */
export type RowKind = (typeof ROW_KINDS)[number]

/**
 * The file formats: `jsonl` (one JSON object per line), `json` (one array) and `csv`
 * (RFC 4180, header from the first {@link CSV_HEADER_ROWS} rows plus an `extra` column).
 *
 * @since 0.1.0
 * @category constants
 */
export const FORMATS = ["jsonl", "json", "csv"] as const

/**
 * One of {@link FORMATS}.
 *
 * @since 0.1.0
 * @category models
 */
export type Format = (typeof FORMATS)[number]

/**
 * Rows a CSV header is taken from: the union of the keys of the first this-many rows, in
 * order of first appearance. Keys first seen later go, as a JSON object, into the `extra`
 * column, so no field is silently dropped.
 *
 * @since 0.1.0
 * @category constants
 */
export const CSV_HEADER_ROWS = 100

/**
 * Pipelines whose tasks and artifact metadata are read together (one `BulkReader.bundles`
 * call), for `pipelines` and `artifacts` rows. Smaller than the store's {@link PAGE_SIZE}: the
 * rows of a batch are alive while it is encoded, and a batch of 1000 nested pipelines (several
 * MB of young objects) made every scavenge copy it, which cost up to ~40 % of an export's CPU
 * in the garbage collector; at 200 the extra queries cost less than the collections they save
 * (measured by `bench/export.ts`). Payloads are further grouped by {@link BATCH_BYTES}.
 *
 * @since 0.1.0
 * @category constants
 */
export const NESTED_BATCH = 200

/**
 * Payload bytes (stored sizes, summed over the artifacts whose payloads are read) loaded
 * together: 4 MiB. A group of pipelines is read with its payloads only while their sizes add
 * up to at most this; a pipeline above it on its own is read one artifact at a time. With the
 * decoded values and the encoded text of a group alive at once, an export's working set stays
 * a small multiple of this whatever the payload sizes (`bench/export.ts`, `BENCHMARKS.md`).
 *
 * @since 0.1.0
 * @category constants
 */
export const BATCH_BYTES = 4 * 1024 * 1024

/**
 * Bytes of encoded cells the CSV encoder holds while it looks ahead for the header: at most
 * {@link CSV_HEADER_ROWS} rows and at most this many bytes (8 MiB, UTF-16 code units of the
 * pre-encoded cells), whichever comes first.
 *
 * @since 0.1.0
 * @category constants
 */
export const CSV_HEADER_BYTES = 8 * 1024 * 1024

/**
 * The default `flatten` depth: columns get at most this many dots (`payload.a.b.c`).
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_FLATTEN_DEPTH = 3

/**
 * An exported row: a plain JSON object.
 *
 * @since 0.1.0
 * @category models
 */
export type Row = Record<string, unknown>

/**
 * A row too large to hold at once: `head` (every field but one) plus `field`, an array whose
 * elements are read one at a time (`parts[i]` reads element `i` when run). The encoders write
 * `head`'s fields, then the elements in order, each loaded, encoded, written and dropped before
 * the next; the row's text is the same as that of the plain row `{ ...head, [field]: [...] }`
 * (in CSV the field's cell is always quoted, as RFC 4180 allows, where the plain row's cell is
 * quoted when it needs to be: a part that is a record always does).
 * `rowItems` makes one for a pipeline whose payloads exceed {@link BATCH_BYTES}.
 *
 * @since 0.1.0
 * @category models
 */
export class LargeRow {
  constructor(
    readonly head: Row,
    readonly field: string,
    readonly parts: ReadonlyArray<Effect.Effect<Row, ReadError>>
  ) {}
}

/**
 * What the row streams carry: a plain {@link Row}, or a {@link LargeRow}.
 *
 * @since 0.1.0
 * @category models
 */
export type RowItem = Row | LargeRow

/**
 * What rows to read: the kind, an optional owner run (`runId`: pipelines owned by the run;
 * tasks, attempts, events of the run; artifacts of the run's pipelines; for `resources` and
 * `pools`, the totals of the run's attempts), and a row limit
 * (`undefined` = all, `0` = none, `N` = the first N rows of the kind's order; negative or
 * non-integer fails with `ConfigError`).
 *
 * @since 0.1.0
 * @category models
 */
export interface RowOptions {
  readonly kind: RowKind
  readonly runId?: RunId | undefined
  readonly limit?: Limit
}

/**
 * How rows are shaped when written (every field optional; the default writes rows as stored):
 *
 * - `time`: `"ms"` (default: epoch milliseconds, as stored) or `"iso"` (ISO-8601 UTC strings,
 *   `2024-05-01T12:00:00.000Z`) for the records' time fields ({@link TIME_FIELDS}) at the top
 *   of a row and in its nested `tasks`, `artifacts` and `handoffs`; payloads and event data are never
 *   touched;
 * - `flatten`: a depth ≥ 1, or `undefined` (no flattening): every non-empty plain object in a
 *   row (a payload, `tags`, a `decision`, event `data`) becomes one field per key, named with
 *   dots (`payload.label`), recursively, as long as names get at most `flatten` dots; arrays,
 *   empty objects and deeper objects stay JSON cells. An object whose dotted names would clash
 *   with another field (a key that itself contains a dot) is kept whole, so nothing is lost;
 * - `csvSafe` (CSV only): a string cell starting with `=`, `+`, `-`, `@`, a tab or a carriage
 *   return (or their full-width forms) is written with a leading `'`, so a spreadsheet shows
 *   it as text instead of evaluating it (OWASP "CSV Injection"; csv-stringify's
 *   `escape_formulas`). Off by default: cells are written as stored (fidelity).
 *
 * @since 0.1.0
 * @category models
 */
export interface ShapeOptions {
  readonly time?: "ms" | "iso" | undefined
  readonly flatten?: number | undefined
  readonly csvSafe?: boolean | undefined
}

/**
 * What `writeRows` needs: the format and the {@link ShapeOptions}.
 *
 * @since 0.1.0
 * @category models
 */
export interface WriteOptions extends ShapeOptions {
  readonly format: Format
}

/**
 * {@link RowOptions} plus the output format and shaping ({@link WriteOptions}).
 *
 * @since 0.1.0
 * @category models
 */
export interface ExportOptions extends RowOptions, WriteOptions {}

/**
 * Writing an export file failed (cannot create, write, or rename the output). Nothing is left
 * at `path` that was not there before (when the output is a file; standard output and devices
 * keep what was written).
 *
 * @since 0.1.0
 * @category errors
 */
export class ExportError extends Schema.TaggedError<ExportError>("assay/ExportError")("ExportError", {
  message: Schema.String,
  path: Schema.String
}) {}

/**
 * The bulk reads nested rows need, for one group of pipelines at a time: their task rows (by
 * seq, then visit, then taskRunId) and their artifacts (by seq, then artifactId) with the payloads asked
 * for; optionally `artifact`, one artifact with its payload (for pipelines too large to read
 * whole). {@link storeBulk} answers both with the store's `loadBundles` and `getArtifact` (on
 * SQLite one query per table per 500 pipelines). Without `artifact`, one artifact is read
 * through `bundles` of its pipeline (all of that pipeline's payloads at once).
 *
 * @since 0.1.0
 * @category models
 */
export interface BulkReader {
  readonly bundles: (
    ids: ReadonlyArray<PipelineId>,
    options: BundleOptions
  ) => Effect.Effect<ReadonlyMap<PipelineId, PipelineBundle>, ReadError>
  readonly artifact?: ((artifact: ArtifactRecord) => Effect.Effect<LoadedArtifact, ReadError>) | undefined
}

// ---------------------------------------------------------------------------------------------
// Limits, payloads, row shapes
// ---------------------------------------------------------------------------------------------

/**
 * Validates a row limit: `undefined` (all) or a non-negative integer; anything else fails
 * with `ConfigError`. The store's own check (`Store.checkLimit`), re-exported: one check for
 * every read and export.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkLimit: (limit: Limit) => Effect.Effect<number | undefined, ConfigError> = Store.checkLimit

const registry = CodecRegistry.default()
const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * The exported form of an artifact payload: the JSON value for the JSON codec, a descriptor
 * `{ typeName, codec, size, digest, base64 }` for any other codec (or for JSON bytes that do
 * not decode, with an `error` field), `null` when the payload is not available.
 *
 * @since 0.1.0
 * @category payloads
 */
export const decodePayload = (artifact: ArtifactRecord, payload: Uint8Array | undefined): unknown => {
  if (payload === undefined) return null
  const describe = (error?: string) => ({
    typeName: artifact.typeName,
    codec: artifact.codec,
    size: payload.byteLength,
    digest: artifact.digest,
    base64: Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString("base64"),
    ...(error === undefined ? {} : { error })
  })
  if (artifact.codec !== "json") return describe()
  try {
    // the JSON codec's decoding (strict UTF-8, then JSON.parse) without the registry's lookups;
    // bytes it refuses take the registry's path below, for its error message
    return JSON.parse(utf8.decode(payload)) as unknown
  } catch {
    // fall through
  }
  return Either.match(registry.load({ typeName: artifact.typeName, codec: artifact.codec, data: payload }), {
    onLeft: (e) => describe(e.message),
    onRight: (v) => v
  })
}

const plain = (record: object): Row => ({ ...record })

/**
 * An artifact row: `artifactId` (the store's number), then `address`, the occurrence address
 * people and `getArtifactById` use (`pipelineId:seq`, `pipelineId:seq#visit` for a revisit,
 * `pipelineId:-1` for the seed), then the record's other fields and the decoded `payload`.
 */
const artifactRow = (loaded: LoadedArtifact): Row => {
  const { artifactId, ...rest } = loaded.artifact
  return {
    artifactId,
    address: Traversal.address(rest.pipelineId, rest.seq, rest.visit),
    ...rest,
    payload: decodePayload(loaded.artifact, loaded.payload)
  }
}

/**
 * The repeat index of a pipeline when it can be known from the row: its stored `repeat` field
 * (when the store records one), else a `repeat` tag, else the `#N` suffix of an explicit key (`` `${key}#${repeat}` ``), else `null` (content-addressed
 * ids do not record it).
 *
 * @since 0.1.0
 * @category rows
 */
export const repeatOf = (p: PipelineRecord): number | null => {
  // a store that records the repeat index on the row (a `repeat` field) is believed first
  const stored = (p as { readonly repeat?: unknown }).repeat
  if (typeof stored === "number" && Number.isInteger(stored)) return stored
  const tag = p.tags["repeat"]
  if (tag !== undefined && /^\d+$/.test(tag)) return Number(tag)
  const m = p.key === null ? null : /#(\d+)$/.exec(p.key)
  return m === null ? null : Number(m[1])
}

/**
 * What a pipeline that declares `control` adds to its `pipelines` row: its traversal state
 * and its handoff ledger rows (oldest first, every budget lifetime).
 *
 * @since 0.1.0
 * @category models
 */
export interface ControlOf {
  readonly state: VisitState
  readonly handoffs: ReadonlyArray<HandoffRecord>
}

/**
 * The `control` record of a `pipelines` row: the traversal state's fields (`version`,
 * `cursor` (a position: the pending entry's seq, `nTasksTotal` once complete), `pending`,
 * `active`, `counters`, `handoffs` consumed from the current budget, `payloads`, `ledger`,
 * `floor`, `seed`), `cursorKind: "position"`, `input` (the occurrence address of the pending
 * entry's exact input, `null` when complete) and `terminal` (the occurrence address of the
 * final artifact, `null` while there is none).
 *
 * @since 0.1.0
 * @category rows
 */
export const controlRecord = (state: VisitState, artifacts: ReadonlyArray<ArtifactRecord>): Row => {
  const final = artifacts.find((a) => a.isFinal)
  return {
    version: state.version,
    cursor: state.cursor,
    cursorKind: "position",
    pending: state.pending === null ? null : { ...state.pending },
    active: state.active.map((a) => ({ ...a })),
    counters: [...state.counters],
    handoffs: state.handoffs,
    payloads: state.payloads,
    ledger: state.ledger,
    floor: state.floor,
    seed: state.seed,
    input: state.pending?.input ?? null,
    terminal: final === undefined ? null : Traversal.address(final.pipelineId, final.seq, final.visit)
  }
}

/**
 * A nested `pipelines` row: every field of the pipeline record, `repeat`, the pipeline's token
 * and cost figures over all its attempts (`calls`, `cacheHits`, `modelCallHits`, `tokensIn`, `tokensOut`,
 * `costUsd`, `estimated`, `unpriced`; see `AccountingFigures`; 0 when it made no model call;
 * `costUsd` a lower bound when `unpriced` > 0 and `null` when none of its calls had a price),
 * then `tasks` (task rows) and `artifacts` (artifact metadata with decoded `payload`); with
 * `control` (a pipeline that declares control), `control` ({@link controlRecord}) and
 * `handoffs` (its ledger rows) after `tasks`. A plain pipeline's row has neither.
 *
 * @since 0.1.0
 * @category rows
 */
export const pipelineRow = (
  p: PipelineRecord,
  tasks: ReadonlyArray<TaskRecord>,
  artifacts: ReadonlyArray<LoadedArtifact>,
  control?: ControlOf | undefined,
  accounting?: AccountingFigures | undefined
): Row => ({
  ...pipelineHead(p, tasks, control, artifacts.map((a) => a.artifact), accounting),
  artifacts: artifacts.map(artifactRow)
})

const noFigures: AccountingFigures = { calls: 0, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 }

/** A `pipelines` row without its `artifacts` (the head of a {@link LargeRow}). */
const pipelineHead = (
  p: PipelineRecord,
  tasks: ReadonlyArray<TaskRecord>,
  control: ControlOf | undefined,
  artifacts: ReadonlyArray<ArtifactRecord>,
  accounting: AccountingFigures | undefined
): Row => ({
  ...p,
  repeat: repeatOf(p),
  calls: (accounting ?? noFigures).calls,
  refused: (accounting ?? noFigures).refused,
  failedCalls: (accounting ?? noFigures).failedCalls,
  cacheHits: (accounting ?? noFigures).cacheHits,
  modelCallHits: (accounting ?? noFigures).modelCallHits,
  tokensIn: (accounting ?? noFigures).tokensIn,
  tokensOut: (accounting ?? noFigures).tokensOut,
  // unknown (null), not 0, when every call of the pipeline was unpriced
  costUsd: knownCost((accounting ?? noFigures).costUsd, (accounting ?? noFigures).unpriced),
  estimated: (accounting ?? noFigures).estimated,
  unpriced: (accounting ?? noFigures).unpriced,
  tasks: tasks.map(plain),
  ...(control === undefined ? {} : { control: controlRecord(control.state, artifacts), handoffs: control.handoffs.map(plain) })
})

/**
 * Reads the traversal state and ledger rows of the pipelines that declare `control`, for one
 * export stream. Whether a pipeline declares control is a property of its definition, and the
 * definition is folded into its `specDigest`; so the state of one pipeline per digest is read
 * first, and a digest whose first pipeline has none (a plain definition) costs no further read:
 * a plain store pays one `visitState` read per definition, not per pipeline. A digest with a
 * state is read for every pipeline (state, then its ledger rows). A store without the traversal
 * capability answers empty maps without reading.
 *
 * The returned function reads a group of pipelines; it remembers digests across calls.
 *
 * @since 0.1.0
 * @category rows
 */
export const controlReader = (
  store: TaskStore
): ((ps: ReadonlyArray<PipelineRecord>) => Effect.Effect<ReadonlyMap<PipelineId, ControlOf>, ReadError>) => {
  const traversal = store.traversal
  if (traversal === undefined) return () => Effect.succeed(new Map())
  /** specDigest → whether its pipelines declare control (absent: not probed yet). */
  const declares = new Map<string, boolean>()
  return (ps) =>
    Effect.map(
      Effect.forEach(ps, (p) => {
        if (declares.get(p.specDigest) === false) return Effect.succeedNone
        return Effect.flatMap(traversal.visitState(p.pipelineId), (state) => {
          if (!declares.has(p.specDigest)) declares.set(p.specDigest, Option.isSome(state))
          return Option.isNone(state)
            ? Effect.succeedNone
            : Effect.map(traversal.handoffs({ pipelineId: p.pipelineId }), (handoffs) =>
              Option.some([p.pipelineId, { state: state.value, handoffs }] as const)
            )
        })
      }),
      (pairs) => new Map(Arr.getSomes(pairs))
    )
}

/**
 * Reads the token and cost figures of a group of pipelines (all their attempts): one
 * `pipelineAccounting` aggregate per group; a store without it (a plugin written before it)
 * gives none (the rows then say 0).
 *
 * @since 0.8.0
 * @category rows
 */
export const accountingReader = (
  store: TaskStore
): ((ps: ReadonlyArray<PipelineRecord>) => Effect.Effect<ReadonlyMap<PipelineId, AccountingFigures>, ReadError>) => {
  if (typeof (store as Partial<TaskStore>).pipelineAccounting !== "function") return () => Effect.succeed(new Map())
  return (ps) =>
    Effect.map(
      store.pipelineAccounting({ pipelineIds: ps.map((p) => p.pipelineId) }),
      (rows) => new Map(rows.map((r) => [r.pipelineId, r] as const))
    )
}

/**
 * A store's per-resource usage in a scope (`runId`, or every run): its `resourceUsage`
 * aggregate, or, for a store without it (a plugin written before it, in JavaScript), its
 * attempts folded in attempt order.
 */
const usageIn = (store: TaskStore, runId: RunId | undefined): Effect.Effect<ReadonlyArray<ResourceUsage>, ReadError> => {
  if (typeof (store as Partial<TaskStore>).resourceUsage === "function") return store.resourceUsage(runId)
  return Effect.suspend(() => {
    const acc = usageAccumulator()
    return Effect.as(Stream.runForEach(store.streamAttempts({ runId }), (a) => Effect.sync(() => acc.add(a))), acc.result())
  })
}

/**
 * The token and cost totals of the `resources` and `pools` row kinds, for the scope `runId`
 * (`null`: every run). A `resources` row is one pool resource the store knows (its `resources`
 * table) or one that attempts leased without a record: `pool`, `resourceId`, `kind` (`null`
 * when unrecorded), `runId` (the scope), `attempts` (the attempts that leased it; an attempt
 * that leased several resources counts on each), `retries`, `rateLimited` (answered 429),
 * `tokensIn`, `tokensOut`, `estimated` (attempts whose tokens were estimated), `unpriced`
 * (attempts with tokens but no price) and `costUsd` (the known cost in US dollars; `null` when
 * none of its calls had a price, a lower bound when `unpriced` > 0), ordered by pool then
 * resource. A `pools` row sums its resources' rows (the same figures, with `resources` the
 * count of its rows), ordered by pool. These are the figures `report` prints per resource and
 * as pool subtotals, and the dashboard's Pools table shows.
 *
 * @since 0.9.0
 * @category rows
 */
export const usageRows = (
  store: TaskStore,
  runId: RunId | undefined,
  kind: "resources" | "pools"
): Effect.Effect<ReadonlyArray<Row>, ReadError> =>
  Effect.gen(function*() {
    const usage = new Map((yield* usageIn(store, runId)).map((u) => [u.target, u] as const))
    const known = yield* store.resources
    const rows: Array<{ pool: string; resourceId: string; kind: string | null; figures: Omit<ResourceUsage, "target"> | undefined }> = []
    const seen = new Set<string>()
    for (const r of known) {
      const target = `${r.pool}/${r.resourceId}`
      seen.add(target)
      rows.push({ pool: r.pool, resourceId: r.resourceId, kind: r.kind, figures: usage.get(target) })
    }
    for (const [target, u] of usage) {
      if (seen.has(target)) continue
      const slash = target.indexOf("/")
      rows.push({ pool: slash < 0 ? target : target.slice(0, slash), resourceId: slash < 0 ? "" : target.slice(slash + 1), kind: null, figures: u })
    }
    rows.sort((a, b) => (a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : a.resourceId < b.resourceId ? -1 : a.resourceId > b.resourceId ? 1 : 0))
    const figuresOf = (u: Omit<ResourceUsage, "target"> | undefined) => ({
      attempts: u?.attempts ?? 0,
      retries: u?.retries ?? 0,
      rateLimited: u?.rateLimited ?? 0,
      tokensIn: u?.tokensIn ?? 0,
      tokensOut: u?.tokensOut ?? 0,
      estimated: u?.estimated ?? 0,
      unpriced: u?.unpriced ?? 0,
      costUsd: u?.costUsd ?? 0
    })
    const scope = runId ?? null
    if (kind === "resources") {
      return rows.map((r) => {
        const f = figuresOf(r.figures)
        return { pool: r.pool, resourceId: r.resourceId, kind: r.kind, runId: scope, ...f, costUsd: knownCost(f.costUsd, f.unpriced) }
      })
    }
    const pools = new Map<string, { resources: number } & ReturnType<typeof figuresOf>>()
    for (const r of rows) {
      const f = figuresOf(r.figures)
      const t = pools.get(r.pool)
      pools.set(r.pool, t === undefined ? { resources: 1, ...f } : { ...sumUsage(t, f), resources: t.resources + 1 })
    }
    return Array.from(pools, ([pool, t]) => ({ pool, runId: scope, ...t, costUsd: knownCost(t.costUsd, t.unpriced) }))
  })

/**
 * A `results` row: `pipelineId`, `key`, for a suite member's pipeline `suiteId`,
 * `experimentId` and `localKey` (absent outside suites), `name`, `repeat`, `state`, `runId`, the cursor,
 * `attemptsTotal`, times, the final artifact's decoded `payload` (`null` when there is none),
 * and the failure fields (`failedTask`, `errorType`, `errorMessage`, `errorClass`).
 *
 * @since 0.1.0
 * @category rows
 */
export const resultRow = (p: PipelineRecord, final: LoadedArtifact | undefined): Row => ({
  pipelineId: p.pipelineId,
  key: p.key,
  // a suite member's pipeline: which suite and member, and the spec's own key (C14)
  ...(p.suiteId === null && p.experimentId === null ? {} : { suiteId: p.suiteId, experimentId: p.experimentId, localKey: p.localKey }),
  name: p.name,
  // which definition made the row: two configurations in one store are told apart (C16)
  specDigest: p.specDigest,
  repeat: repeatOf(p),
  state: p.state,
  runId: p.runId,
  nTasksDone: p.nTasksDone,
  nTasksTotal: p.nTasksTotal,
  attemptsTotal: p.attemptsTotal,
  startedAt: p.startedAt,
  endedAt: p.endedAt,
  payload: final === undefined ? null : decodePayload(final.artifact, final.payload),
  failedTask: p.failedTask,
  errorType: p.errorType,
  errorMessage: p.errorMessage,
  errorClass: p.errorClass
})

// ---------------------------------------------------------------------------------------------
// Bulk reader
// ---------------------------------------------------------------------------------------------

/** One artifact with its payload through `bundles` of its pipeline (the fallback of `BulkReader.artifact`). */
const artifactViaBundles = (
  bundles: BulkReader["bundles"],
  a: ArtifactRecord
): Effect.Effect<LoadedArtifact, ReadError> =>
  Effect.map(
    bundles([a.pipelineId], { payloads: "all", tasks: false }),
    (m) => m.get(a.pipelineId)?.artifacts.find((x) => x.artifact.artifactId === a.artifactId) ?? { artifact: a, payload: undefined }
  )

/**
 * The {@link BulkReader} of any store: its `loadBundles`, and single artifacts through
 * `getArtifact` (the latest artifact at a seq; an older artifact at the same seq, which only a
 * re-checkpointed task leaves, is read through `loadBundles` of its pipeline).
 *
 * @since 0.1.0
 * @category bulk
 */
export const storeBulk = (store: TaskStore): BulkReader => ({
  bundles: store.loadBundles,
  artifact: (a) =>
    Effect.flatMap(store.getArtifact(a.pipelineId, a.seq), (found) =>
      Option.isSome(found) && found.value.artifact.artifactId === a.artifactId
        ? Effect.succeed(found.value)
        : artifactViaBundles(store.loadBundles, a))
})

// ---------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------

/** Stored bytes of the payloads of `artifacts` that a payload read returns. */
const payloadBytes = (artifacts: ReadonlyArray<LoadedArtifact>): number => {
  let n = 0
  for (const a of artifacts) if (a.artifact.available) n += a.artifact.size
  return n
}

/**
 * Consecutive pipelines read together: `large` is one pipeline above {@link BATCH_BYTES} alone;
 * `load` says whether the group's payloads still have to be read (a group of pipelines the
 * page's first read returned whole, or without any payload, has `load: false`).
 */
interface Group {
  readonly ps: Array<PipelineRecord>
  bytes: number
  load: boolean
  readonly large: boolean
}

/** Whether a payload that `options` asks for is available but was not returned (the budget ran out). */
const incomplete = (b: PipelineBundle | undefined, options: BundleOptions): boolean => {
  if (b === undefined || options.payloads === "none") return false
  for (const a of b.artifacts) {
    if (a.payload === undefined && a.artifact.available && (options.payloads === "all" || a.artifact.isFinal)) return true
  }
  return false
}

/**
 * Splits a page into groups, in order: consecutive pipelines that `first` returned whole form
 * one group that needs no further read; the others are grouped so that their payload bytes add
 * up to at most `budget`, a pipeline above `budget` alone in a group marked `large`. Returns the
 * groups and the bundles to build rows from: those returned whole as they are, the others
 * without payloads (a partly loaded pipeline is read again with its group, and its payloads
 * are not held meanwhile).
 */
const groupByBytes = (
  ps: ReadonlyArray<PipelineRecord>,
  first: ReadonlyMap<PipelineId, PipelineBundle>,
  options: BundleOptions,
  budget: number
): { readonly groups: Array<Group>; readonly meta: Map<PipelineId, PipelineBundle> } => {
  const groups: Array<Group> = []
  const meta = new Map<PipelineId, PipelineBundle>()
  let current: Group | undefined
  let whole: Group | undefined
  for (const p of ps) {
    const b = first.get(p.pipelineId)
    if (!incomplete(b, options)) {
      if (b !== undefined) meta.set(p.pipelineId, b)
      current = undefined
      if (whole === undefined) {
        whole = { ps: [], bytes: 0, load: false, large: false }
        groups.push(whole)
      }
      whole.ps.push(p)
      continue
    }
    whole = undefined
    const artifacts = b!.artifacts.map((a) => a.payload === undefined ? a : { artifact: a.artifact, payload: undefined })
    meta.set(p.pipelineId, { pipelineId: b!.pipelineId, tasks: b!.tasks, artifacts })
    const bytes = payloadBytes(artifacts)
    if (bytes > budget) {
      current = undefined
      groups.push({ ps: [p], bytes, load: true, large: true })
      continue
    }
    if (current === undefined || current.bytes + bytes > budget) {
      current = { ps: [], bytes: 0, load: true, large: false }
      groups.push(current)
    }
    current.ps.push(p)
    current.bytes += bytes
  }
  return { groups, meta }
}

/** One artifact with its payload when it has one (through `bulk.artifact`, else `bulk.bundles`). */
const loadOne = (bulk: BulkReader, a: ArtifactRecord): Effect.Effect<LoadedArtifact, ReadError> =>
  !a.available
    ? Effect.succeed({ artifact: a, payload: undefined })
    : bulk.artifact !== undefined
    ? bulk.artifact(a)
    : artifactViaBundles(bulk.bundles, a)

/**
 * The pages of pipelines, each read once with its payloads up to {@link BATCH_BYTES}
 * (`options.payloadBytes`): in the common case (small payloads) that read is the whole page.
 * The pipelines it could not return whole are cut into {@link BATCH_BYTES} groups read
 * afterwards; `rows` turns one group into a chunk of items (`meta`: the page's bundles, whole
 * for a group with `load: false`, without payloads otherwise). A group's bundles are dropped
 * once its rows are made.
 */
const byPayloadGroups = (
  store: TaskStore,
  runId: RunId | undefined,
  limit: number | undefined,
  batch: number,
  options: BundleOptions,
  bulk: BulkReader,
  rows: (group: Group, meta: ReadonlyMap<PipelineId, PipelineBundle>) => Stream.Stream<RowItem, ReadError>
): Stream.Stream<RowItem, ReadError> =>
  store.streamPipelines({ runId, limit }).pipe(
    Stream.rechunk(batch),
    Stream.mapChunks((chunk) => Chunk.of(Chunk.toReadonlyArray(chunk))),
    Stream.flatMap((ps) =>
      Stream.unwrap(
        Effect.map(
          bulk.bundles(ps.map((p) => p.pipelineId), { ...options, payloadBytes: BATCH_BYTES }),
          (first) => {
            const { groups, meta } = groupByBytes(ps, first, options, BATCH_BYTES)
            return Stream.flatMap(
              Stream.fromIterable(groups),
              (g) => Stream.ensuring(rows(g, meta), Effect.sync(() => g.ps.forEach((p) => meta.delete(p.pipelineId))))
            )
          }
        )
      )
    )
  )

/** The payloads of a group's pipelines (one `bundles` call), or the metadata when none has one. */
const groupPayloads = (
  bulk: BulkReader,
  group: Group,
  meta: ReadonlyMap<PipelineId, PipelineBundle>,
  options: BundleOptions
): Effect.Effect<ReadonlyMap<PipelineId, PipelineBundle>, ReadError> =>
  group.load ? bulk.bundles(group.ps.map((p) => p.pipelineId), options) : Effect.succeed(meta)

const chunkOf = <A>(as: ReadonlyArray<A>): Chunk.Chunk<A> => Chunk.unsafeFromArray(as as Array<A>)

/** A stream of the one chunk `effect` reads, read when the stream is first pulled. */
const chunkStream = <A, E>(effect: Effect.Effect<Chunk.Chunk<A>, E>): Stream.Stream<A, E> =>
  Stream.unwrap(Effect.map(effect, (c) => Stream.fromChunk(c)))

/**
 * The items of one kind of one store, as a stream, in the kind's order (see the module docs):
 * plain rows, and for `pipelines` a {@link LargeRow} for each pipeline whose payloads exceed
 * {@link BATCH_BYTES}. Reads are bounded in rows (pages) and in payload bytes (groups): one
 * chunk of the stream holds at most {@link BATCH_BYTES} of stored payload bytes, except a
 * single artifact above it, which is alone in its chunk (or its part of a `LargeRow`). `bulk`
 * answers nested reads (default {@link storeBulk}).
 *
 * Fails with `ConfigError` on an invalid limit, `StoreUnavailable` when the store cannot be
 * read.
 *
 * @since 0.1.0
 * @category rows
 */
export const rowItems = (
  store: TaskStore,
  options: RowOptions,
  bulk: BulkReader = storeBulk(store)
): Stream.Stream<RowItem, ReadError> =>
  Stream.unwrap(Effect.map(checkLimit(options.limit), (limit): Stream.Stream<RowItem, ReadError> => {
    if (limit === 0) return Stream.empty
    const { runId } = options
    switch (options.kind) {
      case "tasks":
        return Stream.map(store.streamTasks({ runId, limit }), plain)
      case "attempts":
        return Stream.map(store.streamAttempts({ runId, limit }), plain)
      case "events":
        return Stream.map(store.streamEvents({ runId, limit }), plain)
      case "pipelines": {
        const controlsOf = controlReader(store)
        const figuresOf = accountingReader(store)
        return byPayloadGroups(store, runId, limit, NESTED_BATCH, { payloads: "all" }, bulk, (g, meta) => {
          if (g.large) {
            const p = g.ps[0]!
            const b = meta.get(p.pipelineId)
            const parts = (b?.artifacts ?? []).map((a) => Effect.map(loadOne(bulk, a.artifact), artifactRow))
            return chunkStream(
              Effect.zipWith(controlsOf(g.ps), figuresOf(g.ps), (controls, figures) =>
                Chunk.of<RowItem>(
                  new LargeRow(
                    pipelineHead(
                      p,
                      b?.tasks ?? [],
                      controls.get(p.pipelineId),
                      (b?.artifacts ?? []).map((a) => a.artifact),
                      figures.get(p.pipelineId)
                    ),
                    "artifacts",
                    parts
                  )
                ))
            )
          }
          return chunkStream(
            Effect.zipWith(
              groupPayloads(bulk, g, meta, { payloads: "all", tasks: false }),
              Effect.zip(controlsOf(g.ps), figuresOf(g.ps)),
              (loaded, [controls, figures]) =>
                chunkOf<RowItem>(g.ps.map((p) =>
                  pipelineRow(
                    p,
                    meta.get(p.pipelineId)?.tasks ?? [],
                    loaded.get(p.pipelineId)?.artifacts ?? [],
                    controls.get(p.pipelineId),
                    figures.get(p.pipelineId)
                  )
                ))
            )
          )
        })
      }
      case "handoffs": {
        // the ledger in write order (handoffId); a store without the capability has none
        const traversal = store.traversal
        if (traversal === undefined) return Stream.empty
        return Stream.flatMap(
          Stream.fromEffect(traversal.handoffs({ runId })),
          (rows) => Stream.fromIterable((limit === undefined ? rows : rows.slice(0, limit)).map(plain))
        )
      }
      case "resources":
      case "pools":
        return Stream.flatMap(
          Stream.fromEffect(usageRows(store, runId, options.kind)),
          (rows) => Stream.fromIterable(limit === undefined ? rows : rows.slice(0, limit))
        )
      case "results": {
        const finals: BundleOptions = { payloads: "final", artifacts: "final", tasks: false }
        return byPayloadGroups(store, runId, limit, PAGE_SIZE, finals, bulk, (g, meta) =>
          chunkStream(
            Effect.map(groupPayloads(bulk, g, meta, finals), (loaded) =>
              chunkOf(g.ps.map((p) => resultRow(p, loaded.get(p.pipelineId)?.artifacts.at(-1)))))
          ))
      }
      case "artifacts": {
        const rows = byPayloadGroups(store, runId, undefined, NESTED_BATCH, { payloads: "all", tasks: false }, bulk, (g, meta) =>
          g.large
            // one artifact at a time, each its own chunk, read only when the writer pulls it
            ? Stream.mapEffect(
              Stream.fromIterable(meta.get(g.ps[0]!.pipelineId)?.artifacts ?? []),
              (a) => Effect.map(loadOne(bulk, a.artifact), artifactRow)
            )
            : chunkStream(
              Effect.map(groupPayloads(bulk, g, meta, { payloads: "all", tasks: false }), (loaded) =>
                chunkOf(g.ps.flatMap((p) => (loaded.get(p.pipelineId)?.artifacts ?? []).map(artifactRow))))
            ))
        return limit === undefined ? rows : Stream.take(rows, limit)
      }
    }
  }))

/**
 * A {@link LargeRow} as the plain row it stands for: `{ ...head, [field]: parts }` with every
 * part read (all of them in memory at once).
 *
 * @since 0.1.0
 * @category rows
 */
export const materialize = (item: RowItem): Effect.Effect<Row, ReadError> =>
  item instanceof LargeRow
    ? Effect.map(Effect.all(item.parts), (parts) => ({ ...item.head, [item.field]: parts }))
    : Effect.succeed(item)

/**
 * The rows of one kind of one store as plain JSON objects: {@link rowItems} with every
 * {@link LargeRow} materialized (so a pipeline row holds all of its payloads at once; to write
 * a file, pass `rowItems` to {@link writeRows}, which streams them).
 *
 * Fails with `ConfigError` on an invalid limit, `StoreUnavailable` when the store cannot be
 * read.
 *
 * @since 0.1.0
 * @category rows
 */
export const iterRows = (
  store: TaskStore,
  options: RowOptions,
  bulk: BulkReader = storeBulk(store)
): Stream.Stream<Row, ReadError> => Stream.mapEffect(rowItems(store, options, bulk), materialize)

// ---------------------------------------------------------------------------------------------
// Shaping
// ---------------------------------------------------------------------------------------------

/**
 * The records' time fields (epoch ms), converted by `time: "iso"`: `createdAt`, `updatedAt`,
 * `startedAt`, `endedAt`, `heartbeatAt`, `ts`.
 *
 * @since 0.1.0
 * @category shaping
 */
export const TIME_FIELDS: ReadonlySet<string> = new Set(["createdAt", "updatedAt", "startedAt", "endedAt", "heartbeatAt", "ts"])

/** Row fields whose elements are records (their time fields are converted too). */
const NESTED_RECORDS: ReadonlySet<string> = new Set(["tasks", "artifacts", "handoffs"])

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** `ms` as ISO-8601 UTC; a number outside the Date range stays a number. */
const isoOf = (ms: number): string | number => {
  const d = new Date(ms)
  return Number.isNaN(d.getTime()) ? ms : d.toISOString()
}

/**
 * `row` with its time fields ({@link TIME_FIELDS}, numbers only) as ISO-8601 strings, at the
 * top and in the elements of its `tasks` and `artifacts`; other values (payloads, event data)
 * are left alone. Returns `row` itself when nothing changes.
 *
 * @since 0.1.0
 * @category shaping
 */
export const isoTimes = (row: Row): Row => {
  let out: Row | undefined
  for (const k in row) {
    const v = row[k]
    let w: unknown = v
    if (typeof v === "number" && TIME_FIELDS.has(k)) w = isoOf(v)
    else if (Array.isArray(v) && NESTED_RECORDS.has(k)) w = v.map((e) => (isObject(e) ? isoTimes(e) : e))
    if (w !== v) (out ??= { ...row })[k] = w
  }
  return out ?? row
}

/**
 * `row` with its nested objects spread into dotted fields, at most `depth` dots per name (see
 * {@link ShapeOptions}): `{ payload: { label: "spam", p: { a: 1 } } }` at depth 1 is
 * `{ "payload.label": "spam", "payload.p": { a: 1 } }`. Arrays and empty objects stay whole; an
 * object whose names would clash (with a field of the row or among themselves) stays whole.
 *
 * @since 0.1.0
 * @category shaping
 */
export const flattenRow = (row: Row, depth: number): Row => {
  const out: Row = {}
  const spread = (name: string, v: unknown, dots: number, into: Array<readonly [string, unknown]>) => {
    if (dots < depth && isObject(v)) {
      let any = false
      for (const k in v) {
        any = true
        spread(`${name}.${k}`, v[k], dots + 1, into)
      }
      if (any) return
    }
    into.push([name, v])
  }
  for (const k in row) {
    const v = row[k]
    if (!isObject(v) || depth < 1) {
      out[k] = v
      continue
    }
    const entries: Array<readonly [string, unknown]> = []
    spread(k, v, 0, entries)
    const names = new Set<string>()
    let clash = false
    for (const [name] of entries) {
      if (names.has(name) || (name !== k && Object.hasOwn(row, name))) clash = true
      names.add(name)
    }
    if (clash) out[k] = v
    else for (const [name, x] of entries) out[name] = x
  }
  return out
}

/** The shaping of whole rows, or `undefined` when rows are written as they are. */
const rowShaper = (o: ShapeOptions): ((row: Row) => Row) | undefined => {
  const iso = o.time === "iso"
  const depth = o.flatten
  if (depth !== undefined && depth >= 1) return iso ? (r) => flattenRow(isoTimes(r), depth) : (r) => flattenRow(r, depth)
  return iso ? isoTimes : undefined
}

/** The shaping of one element of a {@link LargeRow}'s field (as `isoTimes` treats nested records). */
const partShaper = (o: ShapeOptions, field: string): ((row: Row) => Row) | undefined =>
  o.time === "iso" && NESTED_RECORDS.has(field) ? isoTimes : undefined

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/** Bytes of one output buffer. */
const SINK_BYTES = 1 << 20

/** Written output buffers kept for reuse. */
const SINK_POOL = 8

/** A {@link LargeRow}'s parts, written in place: each part read, encoded, written, `sep` between. */
interface Deferred {
  readonly parts: ReadonlyArray<Effect.Effect<Row, ReadError>>
  readonly encode: (part: Row) => string
  readonly sep: string
}

/**
 * Collects encoded text as UTF-8 bytes in buffers of {@link SINK_BYTES}: each row's text is
 * copied into the current buffer as soon as it is made (so it dies young, and no batch is
 * ever one large string); full buffers, and the parts of large rows to write in place, wait in
 * `ready` for the output, in order.
 */
class ByteSink {
  private buf: Buffer = Buffer.allocUnsafeSlow(SINK_BYTES)
  private used = 0
  /**
   * Written buffers to fill again: without reuse, every MiB written was a fresh external
   * allocation that lived until a major GC (~75 MB of dead buffers at the peak of a 1 GB export).
   */
  private readonly free: Array<Buffer> = []

  /** Takes back a buffer the output has written (a whole {@link SINK_BYTES} slab of ours). */
  readonly release = (b: Uint8Array): void => {
    if (b.byteOffset === 0 && b.buffer.byteLength === SINK_BYTES && this.free.length < SINK_POOL) {
      this.free.push(Buffer.from(b.buffer, 0, SINK_BYTES))
    }
  }
  /** Filled buffers (views) and deferred parts, in order, not yet handed to the output. */
  ready: Array<Buffer | Deferred> = []

  /** Appends the UTF-8 bytes of `s`. */
  text(s: string): void {
    // a UTF-16 code unit is at most 3 UTF-8 bytes; below that bound the copy always fits
    if (s.length * 3 > this.buf.length - this.used) {
      if (Buffer.byteLength(s) > this.buf.length - this.used) {
        this.seal()
        if (s.length * 3 > this.buf.length) {
          this.ready.push(Buffer.from(s))
          return
        }
      }
    }
    this.used += this.buf.write(s, this.used)
  }

  /** Appends parts written in place when the output gets this far. */
  defer(d: Deferred): void {
    this.seal()
    this.ready.push(d)
  }

  /** Moves the filled part of the current buffer to `ready` and starts a fresh buffer. */
  seal(): void {
    if (this.used === 0) return
    this.ready.push(this.buf.subarray(0, this.used))
    this.buf = this.free.pop() ?? Buffer.allocUnsafeSlow(SINK_BYTES)
    this.used = 0
  }

  /** What to write now: the sealed buffers and deferred parts, plus the current buffer when `all`. */
  take(all: boolean): Array<Buffer | Deferred> {
    if (all) this.seal()
    const out = this.ready
    this.ready = []
    return out
  }
}

/** Incremental encoder of one format: items per batch into the sink, then `end`. */
interface Encoder {
  readonly push: (items: ReadonlyArray<RowItem>, sink: ByteSink) => void
  readonly end: (sink: ByteSink) => void
}

/**
 * Writes a {@link LargeRow} as JSON: its head's fields, then `field` as an array whose elements
 * are written in place; `before` and `after` frame the object.
 */
const largeJson = (row: LargeRow, sink: ByteSink, o: ShapeOptions, before: string, after: string) => {
  const shape = rowShaper(o)
  const head = JSON.stringify(shape === undefined ? row.head : shape(row.head))
  const open = head === "{}" ? "{" : head.slice(0, -1) + ","
  sink.text(before + open + JSON.stringify(row.field) + ":[")
  const part = partShaper(o, row.field)
  sink.defer({ parts: row.parts, sep: ",", encode: part === undefined ? (p) => JSON.stringify(p) : (p) => JSON.stringify(part(p)) })
  sink.text("]}" + after)
}

const jsonlEncoder = (o: ShapeOptions): Encoder => {
  const shape = rowShaper(o)
  return {
    push: (items, sink) => {
      for (const r of items) {
        if (r instanceof LargeRow) largeJson(r, sink, o, "", "\n")
        else {
          sink.text(JSON.stringify(shape === undefined ? r : shape(r)))
          sink.text("\n")
        }
      }
    },
    end: () => {}
  }
}

const jsonEncoder = (o: ShapeOptions): Encoder => {
  const shape = rowShaper(o)
  let first = true
  return {
    push: (items, sink) => {
      for (const r of items) {
        const before = first ? "[\n" : ",\n"
        first = false
        if (r instanceof LargeRow) largeJson(r, sink, o, before, "")
        else sink.text(before + JSON.stringify(shape === undefined ? r : shape(r)))
      }
    },
    end: (sink) => sink.text(first ? "[]\n" : "\n]\n")
  }
}

/** A cell's value already encoded as JSON (objects and arrays), kept while the header is unknown. */
class JsonCell {
  constructor(readonly json: string) {}
}

/** A row's fields with object values pre-encoded: `[name, primitive | JsonCell]`. */
type Prepared = ReadonlyArray<readonly [string, unknown]>

/** A row or a large row's head held for the header, with its pre-encoded fields. */
interface Held {
  readonly fields: Prepared
  readonly large: LargeRow | undefined
}

const cellOf = (v: unknown): unknown => (v !== null && typeof v === "object" ? new JsonCell(JSON.stringify(v)) : v)
const jsonOf = (v: unknown): string => (v instanceof JsonCell ? v.json : JSON.stringify(v))

/** A text cell csv-stringify quotes (with our options: delimiter `,`, quote `"`, records ended by LF). */
const NEEDS_CSV = /[",\r\n]/

/** The first characters csv-stringify's `escape_formulas` prefixes with `'` in a text cell. */
const FORMULA_START = /^[-=+@\t\r\uFF1D\uFF0B\uFF0D\uFF20]/

/**
 * A JSON cell (text from `JSON.stringify` of an object or array) as csv-stringify writes it
 * with our options (RFC 4180 §2.6–2.7): quoted, every `"` doubled, when it holds a `"` or a
 * `,`; as is otherwise (`[]`, `{}`, `[1]`). JSON text never holds a raw CR or LF (they are
 * escaped) and starts with `[` or `{`, never with a character `escape_formulas` guards, so
 * csv-stringify's other rules never apply to it. Written directly because csv-stringify's
 * per-cell scans and quote replacement on long JSON cells were most of a nested CSV export's
 * encoding cost (`bench/export.ts`); the property test in `ExportEncoding.test.ts` compares
 * whole files against csv-stringify's own output.
 */
const jsonCsv = (json: string): string =>
  json.includes("\"") ? `"${json.replaceAll("\"", "\"\"")}"` : json.includes(",") ? `"${json}"` : json

/**
 * CSV as csv-stringify writes it: one record per row, `extra` last; cells that need quoting or
 * formula escaping go through csv-stringify, JSON cells and plain cells are written directly
 * (byte for byte the same, see `jsonCsv` and `plainRun`). Booleans are written `true` /
 * `false` (csv-stringify's default is `1` / empty), objects and arrays as JSON cells, `null`
 * and absent fields as empty cells. `csvSafe` turns on csv-stringify's `escape_formulas`.
 * The header is the union of the keys of the first {@link CSV_HEADER_ROWS} rows (or of fewer,
 * once {@link CSV_HEADER_BYTES} of cells are held).
 */
const csvEncoder = (o: ShapeOptions): Encoder => {
  const shape = rowShaper(o)
  const options = { escape_formulas: o.csvSafe === true, cast: { boolean: (b: boolean) => (b ? "true" : "false") } }
  const inlineOptions = { ...options, eof: false }
  const line = (cells: ReadonlyArray<unknown>) => stringify([cells], options)
  const inline = (cells: ReadonlyArray<unknown>) => stringify([cells], inlineOptions)
  const csvSafe = o.csvSafe === true
  /**
   * A run of cells as CSV text when none of them needs csv-stringify's quoting or escaping:
   * numbers as `String(n)` (csv-stringify's default cast), booleans `true` / `false` (our cast),
   * `null` / absent as empty, and strings holding no `,`, `"`, CR or LF (nor, with `csvSafe`,
   * starting with a character `escape_formulas` guards) as they are. `undefined` when a cell
   * needs csv-stringify (the caller hands it the run).
   */
  const plainRun = (r: ReadonlyArray<unknown>, from: number, to: number): string | undefined => {
    let out = ""
    for (let i = from; i < to; i++) {
      const c = r[i]
      let text: string
      if (c === null || c === undefined) text = ""
      else if (typeof c === "number") text = String(c)
      else if (typeof c === "boolean") text = c ? "true" : "false"
      else if (typeof c === "string") {
        if (NEEDS_CSV.test(c) || (csvSafe && FORMULA_START.test(c))) return undefined
        text = c
      } else return undefined
      out += i === from ? text : "," + text
    }
    return out
  }
  /**
   * One record as CSV text: its runs of plain cells as they are ({@link plainRun}), other runs
   * through csv-stringify, its JSON cells through {@link jsonCsv}, joined by `,`.
   */
  const recordText = (r: ReadonlyArray<unknown>): string => {
    let out = ""
    let start = 0
    for (let i = 0; i <= r.length; i++) {
      const c = r[i]
      if (i < r.length && !(c instanceof JsonCell)) continue
      if (i > start) out += (start === 0 ? "" : ",") + (plainRun(r, start, i) ?? inline(r.slice(start, i)))
      if (i < r.length) out += (i === 0 ? "" : ",") + jsonCsv((c as JsonCell).json)
      start = i + 1
    }
    return out + "\n"
  }
  let held: Array<Held> | undefined = []
  let heldBytes = 0
  let columns: Array<string> = []
  let known = new Set<string>()
  let records: Array<Array<unknown>> = []

  const flushRecords = (sink: ByteSink) => {
    // one record at a time: csv-stringify's sync API on a large batch of long JSON cells costs
    // more per record than one record at a time (its output pieces are joined at once)
    for (const r of records) sink.text(recordText(r))
    records = []
  }
  /** The record of a row once the header is known: its columns, then `extra` (late keys, as JSON). */
  const recordOf = (r: Row): Array<unknown> => {
    const cells: Array<unknown> = new Array(columns.length + 1)
    for (let i = 0; i < columns.length; i++) cells[i] = cellOf(r[columns[i]!])
    let extra: Record<string, unknown> | undefined
    for (const k in r) if (!known.has(k)) (extra ??= {})[k] = r[k]
    cells[columns.length] = extra === undefined ? null : new JsonCell(JSON.stringify(extra))
    return cells
  }
  /** A held row's record; JSON cells as {@link JsonCell}s (`asText`: as their JSON text). */
  const heldRecord = (fields: Prepared, asText: boolean): Array<unknown> => {
    const byName = new Map(fields)
    const cells: Array<unknown> = columns.map((c) => {
      const v = byName.get(c)
      return asText && v instanceof JsonCell ? v.json : v
    })
    const late = fields.filter(([k]) => !known.has(k))
    const extra = late.length === 0 ? null : `{${late.map(([k, v]) => `${JSON.stringify(k)}:${jsonOf(v)}`).join(",")}}`
    cells.push(asText || extra === null ? extra : new JsonCell(extra))
    return cells
  }
  /** Writes a large row: cells before its field, the field's array in place (quoted), cells after. */
  const writeLarge = (row: LargeRow, fields: Prepared, sink: ByteSink) => {
    flushRecords(sink)
    const cells = heldRecord(fields, true)
    const part = partShaper(o, row.field)
    const encodePart = (p: Row) => JSON.stringify(part === undefined ? p : part(p)).replaceAll("\"", "\"\"")
    if (row.parts.length === 0) {
      // the same cell a plain row with an empty array gets: `[]`, unquoted
      const at = columns.indexOf(row.field)
      if (at >= 0) cells[at] = "[]"
      else {
        const extra = cells[columns.length] as string | null
        cells[columns.length] = extra === null ? `{${JSON.stringify(row.field)}:[]}` : `${extra.slice(0, -1)},${JSON.stringify(row.field)}:[]}`
      }
      sink.text(line(cells))
      return
    }
    const at = columns.indexOf(row.field)
    let before: ReadonlyArray<unknown>
    let open: string
    let close: string
    let after: ReadonlyArray<unknown>
    if (at >= 0) {
      before = cells.slice(0, at)
      after = cells.slice(at + 1)
      open = "\"["
      close = "]\""
    } else {
      // the field was first seen after the header: it goes, last, into the `extra` object
      const extra = cells[columns.length] as string | null
      before = cells.slice(0, columns.length)
      after = []
      open = "\"" + ((extra === null ? "{" : extra.slice(0, -1) + ",") + JSON.stringify(row.field) + ":[").replaceAll("\"", "\"\"")
      close = "]}\""
    }
    sink.text((before.length === 0 ? "" : inline(before) + ",") + open)
    sink.defer({ parts: row.parts, sep: ",", encode: encodePart })
    sink.text(close + (after.length === 0 ? "" : "," + inline(after)) + "\n")
  }
  const prepare = (r: Row): Prepared => {
    const fields: Array<readonly [string, unknown]> = []
    for (const k in r) {
      const v = r[k]
      if (v !== null && typeof v === "object") {
        const json = JSON.stringify(v)
        heldBytes += json.length + k.length
        fields.push([k, new JsonCell(json)])
      } else {
        heldBytes += (typeof v === "string" ? v.length : 8) + k.length
        fields.push([k, v])
      }
    }
    return fields
  }
  const flushHeld = (sink: ByteSink) => {
    const rows = held ?? []
    held = undefined
    for (const h of rows) {
      for (const [k] of h.fields) {
        if (!known.has(k)) {
          known.add(k)
          columns.push(k)
        }
      }
      if (h.large !== undefined && !known.has(h.large.field)) {
        known.add(h.large.field)
        columns.push(h.large.field)
      }
    }
    if (known.has("extra")) {
      // a genuine `extra` field cannot share the fold-in column's name
      columns = columns.filter((c) => c !== "extra")
      known = new Set(columns)
    }
    sink.text(line([...columns, "extra"]))
    for (const h of rows) {
      if (h.large === undefined) records.push(heldRecord(h.fields, false))
      else writeLarge(h.large, h.fields, sink)
    }
    flushRecords(sink)
  }
  return {
    push: (items, sink) => {
      for (const item of items) {
        if (held !== undefined) {
          if (item instanceof LargeRow) held.push({ fields: prepare(shape === undefined ? item.head : shape(item.head)), large: item })
          else held.push({ fields: prepare(shape === undefined ? item : shape(item)), large: undefined })
          if (held.length >= CSV_HEADER_ROWS || heldBytes >= CSV_HEADER_BYTES) flushHeld(sink)
        } else if (item instanceof LargeRow) {
          writeLarge(item, prepare(shape === undefined ? item.head : shape(item.head)), sink)
        } else records.push(recordOf(shape === undefined ? item : shape(item)))
      }
      flushRecords(sink)
    },
    end: (sink) => {
      if (held !== undefined && held.length > 0) flushHeld(sink)
    }
  }
}

const encoderOf = (o: WriteOptions): Encoder =>
  o.format === "jsonl" ? jsonlEncoder(o) : o.format === "json" ? jsonEncoder(o) : csvEncoder(o)

const toExportError = (e: OutputFile.OutputFileError) => new ExportError({ message: e.message, path: e.path })

/**
 * Writes what the sink has ready to `out`, in order: buffers as they are, and each deferred
 * large-row field part by part (read, encoded, written, dropped).
 */
const drain = (sink: ByteSink, out: OutputFile.OutputFile, all: boolean): Effect.Effect<void, ReadError | ExportError> => {
  const ready = sink.take(all)
  const write = (buffers: ReadonlyArray<Uint8Array>) => Effect.mapError(out.write(buffers, sink.release), toExportError)
  if (ready.every((x) => x instanceof Uint8Array)) return write(ready as Array<Buffer>)
  return Effect.gen(function*() {
    let pending: Array<Buffer> = []
    for (const x of ready) {
      if (x instanceof Uint8Array) {
        pending.push(x)
        continue
      }
      yield* write(pending)
      pending = []
      for (let i = 0; i < x.parts.length; i++) {
        const text = (i === 0 ? "" : x.sep) + x.encode(yield* x.parts[i]!)
        yield* write([Buffer.from(text)])
      }
    }
    yield* write(pending)
  })
}

/** The file a store argument names (a path, or a `file:` URI), absolute; `undefined` for other URIs. */
const fileOfSpec = (spec: string): string | undefined => {
  const parsed = SpecUri.parse(spec)
  if (parsed._tag === "NotUri") return nodePath.resolve(spec)
  if (parsed._tag === "Uri" && parsed.scheme === "file") {
    try {
      return fileURLToPath(parsed.uri)
    } catch {
      return undefined
    }
  }
  return undefined
}

/** `p` with its symbolic links resolved when it exists, else as given (absolute). */
const realOrSelf = (p: string): string => {
  try {
    return fs.realpathSync(p)
  } catch {
    return p
  }
}

/**
 * Refuses an output path that would overwrite a database: fails with `ConfigError` (exit 2 in
 * the CLI) when `out` resolves (symbolic links followed) to the same file as one of the
 * `inputs` store arguments (paths or `file:` URIs; other URIs are not files) or one of their
 * `-wal`, `-shm`, `-journal`, `.lock` files, when `out` is a file of a store open in this
 * process, or when `out` exists and is an SQLite file (starts with `StoreFiles.SQLITE_HEADER`). The
 * check never opens a file of a store open in this process (closing that descriptor would drop
 * the process's SQLite locks on it; see `StoreFiles`). `-` (standard output) and
 * descriptor aliases (`/dev/stdout`, …) are always accepted. Check it before anything is
 * written.
 *
 * @param out the output path as given
 * @param inputs the store arguments as given
 * @since 0.1.0
 * @category validation
 */
export const checkOutput = (out: string, inputs: ReadonlyArray<string>): Effect.Effect<void, ConfigError> =>
  Effect.suspend(() => {
    if (out === "-" || OutputFile.isDescriptorAlias(nodePath.resolve(out))) return Effect.void
    const target = realOrSelf(nodePath.resolve(out))
    const refuse = (why: string) =>
      Effect.fail(
        new ConfigError({
          message: `refusing to write ${out}: ${why}; give an output file that is not a store`,
          issues: [{ path: "OUT", message: why }]
        })
      )
    for (const spec of inputs) {
      const file = fileOfSpec(spec)
      if (file === undefined) continue
      if (realOrSelf(file) === target) return refuse(`it is the input store ${spec}`)
      const sibling = StoreFiles.STORE_SIBLINGS.find((suffix) => realOrSelf(file + suffix) === target)
      if (sibling !== undefined) return refuse(`it is the ${sibling} file of the input store ${spec}`)
    }
    // answered without opening a file of a store open in this process (its locks would drop)
    const open = StoreFiles.openStoreFileOf(target)
    if (open !== undefined) return refuse(`it is a file of the store ${open}, open in this process`)
    if (StoreFiles.isSqliteFile(target)) return refuse("it is an existing SQLite database, which would be overwritten")
    return Effect.void
  })

/**
 * Writes `rows` to `path` (see `OutputFile.open`: a file atomically, through a temp file
 * beside it renamed over it once complete, a symbolic link's target likewise; `-` as standard
 * output; a device or FIFO streamed) in `options.format`, shaped by the {@link ShapeOptions}.
 * A {@link LargeRow}'s field is written part by part. On failure or interruption a file
 * output is untouched and its temp file removed. Returns the number of rows written.
 *
 * Fails with the stream's error, a large row's read error, `ConfigError` when `path` is a
 * database (see {@link checkOutput}: a file of a store open in this process, or any existing
 * SQLite file), or `ExportError` on file-system failures.
 *
 * @param options the format, or the format and the shaping
 * @since 0.1.0
 * @category writing
 */
export const writeRows = <E, R>(
  rows: Stream.Stream<RowItem, E, R>,
  path: string,
  options: Format | WriteOptions
): Effect.Effect<number, E | ReadError | ExportError, R> =>
  Effect.scoped(Effect.gen(function*() {
    const o: WriteOptions = typeof options === "string" ? { format: options } : options
    // OUT is never a database: not a store open in this process (the input), not any SQLite file
    yield* checkOutput(path, [])
    const out = yield* Effect.mapError(OutputFile.open(path), toExportError)
    const enc = encoderOf(o)
    const sink = new ByteSink()
    let n = 0
    yield* Stream.runForEachChunk(rows, (chunk) => {
      n += chunk.length
      enc.push(Chunk.toReadonlyArray(chunk), sink)
      return drain(sink, out, false)
    })
    enc.end(sink)
    yield* drain(sink, out, true)
    yield* Effect.mapError(out.commit, toExportError)
    return n
  }))

/**
 * Exports one store to `path` (see {@link rowItems} and {@link writeRows}); returns the number
 * of rows written.
 *
 * @since 0.1.0
 * @category writing
 */
export const exportStore = (
  store: TaskStore,
  path: string,
  options: ExportOptions,
  bulk?: BulkReader
): Effect.Effect<number, ReadError | ExportError> => writeRows(rowItems(store, options, bulk), path, options)

/**
 * Opens a store argument read-only in the current scope through the {@link Store.StoreOpener}
 * in context (a path, a `file:` URI or a plugin URI, as the CLI takes them;
 * `StoreResolver.layerOpener` provides it), with its {@link storeBulk} reader. Fails with
 * `StoreUnavailable` when the store is missing or not an assay store (read-only opens never
 * create anything), `ConfigError` on a spec that does not resolve, `PluginError` when a
 * plugin's factory fails.
 *
 * @since 0.1.0
 * @category stores
 */
export const openReadOnly = (
  source: string
): Effect.Effect<
  { readonly store: StoreService; readonly bulk: BulkReader },
  StoreUnavailable | ConfigError | PluginError,
  Store.StoreOpener | Scope.Scope
> =>
  Effect.flatMap(Store.StoreOpener, (opener) =>
    Effect.map(opener.openReadOnly(source), (store) => ({ store, bulk: storeBulk(store) })))

/**
 * Exports several stores into one output, concatenated in the given order (no dedupe: use
 * `Merge.mergeReports(paths).export` for the merged view). `limit` applies to each store
 * separately. Every store is opened read-only through the {@link Store.StoreOpener} in context
 * (see {@link openReadOnly}). Returns the number of rows written.
 *
 * @since 0.1.0
 * @category writing
 */
export const exportStores = (
  paths: ReadonlyArray<string>,
  out: string,
  options: ExportOptions
): Effect.Effect<number, ReadError | ExportError | PluginError, Store.StoreOpener> =>
  Effect.scoped(
    Effect.gen(function*() {
      yield* checkLimit(options.limit)
      yield* checkOutput(out, paths)
      const opened = yield* Effect.forEach(paths, openReadOnly)
      const rows = Stream.concatAll(Chunk.fromIterable(opened.map(({ bulk, store }) => rowItems(store, options, bulk))))
      return yield* writeRows(rows, out, options)
    })
  )

const suffixFormats: ReadonlyArray<readonly [string, Format]> = [
  [".jsonl", "jsonl"],
  [".ndjson", "jsonl"],
  [".json", "json"],
  [".csv", "csv"]
]

/**
 * Chooses the output format of a file: an explicit `format` wins when the file's suffix agrees
 * with it (or has no known suffix); without one, the suffix decides (`.jsonl`/`.ndjson` →
 * jsonl, `.json` → json, `.csv` → csv). Fails with `ConfigError` when the two disagree (for
 * example `--format jsonl` for `out.csv`) or when neither says which format to write, so a
 * file never silently holds another format than its name says.
 *
 * @since 0.1.0
 * @category formats
 */
export const resolveFormat = (path: string, explicit: Format | undefined): Either.Either<Format, ConfigError> => {
  const lower = path.toLowerCase()
  const bySuffix = suffixFormats.find(([suffix]) => lower.endsWith(suffix))?.[1]
  if (explicit !== undefined) {
    if (bySuffix !== undefined && bySuffix !== explicit) {
      return Either.left(
        new ConfigError({
          message: `--format ${explicit} does not match the output file ${path} (its suffix says ${bySuffix})`,
          issues: [{ path: "format", message: `${explicit} vs suffix ${bySuffix}` }]
        })
      )
    }
    return Either.right(explicit)
  }
  if (bySuffix === undefined) {
    return Either.left(
      new ConfigError({
        message: path === "-"
          ? "cannot tell the format of standard output (-): pass --format jsonl, json or csv"
          : `cannot tell the format of ${path}: name it .jsonl, .json or .csv, or pass --format`,
        issues: [{ path: "format", message: "unknown output suffix", suggestion: "--format jsonl" }]
      })
    )
  }
  return Either.right(bySuffix)
}
