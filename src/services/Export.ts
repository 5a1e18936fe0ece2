/**
 * Export: a store's facts as rows (`iterRows`) and as files (`exportStore`, `exportStores`).
 *
 * Six row kinds ({@link ROW_KINDS}) in three formats ({@link FORMATS}):
 *
 * | kind | one row per | order (the order `limit` cuts) |
 * | --- | --- | --- |
 * | `pipelines` | pipeline, nested: `tasks`, `artifacts` (decoded payloads), `attemptsTotal`, `repeat` | createdAt, pipelineId |
 * | `tasks` | task run | the store's pipeline order (admission order on SQLite v3), seq, taskRunId |
 * | `attempts` | attempt (with its retry `decision`) | attemptId |
 * | `events` | event | eventId |
 * | `artifacts` | artifact (seeds and intermediates included, decoded payload) | pipeline order, seq, artifactId |
 * | `results` | pipeline: key, repeat, state, final payload, failure fields (failed and interrupted included) | createdAt, pipelineId |
 *
 * Rows are read in bounded batches (the store's keyset pages of {@link PAGE_SIZE}); nested
 * kinds fetch the tasks and artifacts of {@link NESTED_BATCH} pipelines at a time, so memory is
 * bounded by one page, never by the store. Rows are encoded one at a time into reusable 1 MiB
 * byte buffers handed to the file stream, so no batch is ever held as one large string. Files are written to a temporary file beside the target
 * and renamed over it only when every row is written: a failure or an interruption leaves no
 * partial output and removes the temporary file.
 *
 * Payloads: an artifact written by the JSON codec is exported as its JSON value; any other
 * codec (bytes, schema codecs, plugins) is exported as a descriptor
 * `{ typeName, codec, size, digest, base64 }` (the stored bytes, base64-encoded); a payload
 * that is not available (`journal: "summary"`, the null backend, a deleted blob) is `null`.
 *
 * @since 0.1.0
 */
import { stringify } from "csv-stringify/sync"
import { Chunk, Context, Effect, Either, Layer, Random, Schema, type Scope, Stream } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { fileURLToPath } from "node:url"
import { CodecRegistry } from "../domain/Codec.js"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import type { ArtifactRecord, PipelineRecord, TaskRecord } from "../domain/Records.js"
import * as PluginUri from "../layers/PluginUri.js"
import * as SqliteStore from "../layers/SqliteStore.js"
import type { BundleOptions, Limit, LoadedArtifact, PipelineBundle, ReadError, StoreService } from "./Store.js"
import { PAGE_SIZE, Store } from "./Store.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * The row kinds, in documentation order.
 *
 * @since 0.1.0
 * @category constants
 */
export const ROW_KINDS = ["pipelines", "tasks", "attempts", "events", "artifacts", "results"] as const

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
 * Pipelines whose tasks and artifacts are read and turned into rows together (one
 * `BulkReader.bundles` call). Smaller than the store's {@link PAGE_SIZE}: the rows of a batch
 * are alive while it is encoded, and a batch of 1000 nested pipelines (several MB of young
 * objects) made every scavenge copy it, which cost up to ~40 % of an export's CPU in the
 * garbage collector; at 200 the extra queries cost less than the collections they save
 * (measured by `bench/export.ts`).
 *
 * @since 0.1.0
 * @category constants
 */
export const NESTED_BATCH = 200

/**
 * An exported row: a plain JSON object.
 *
 * @since 0.1.0
 * @category models
 */
export type Row = Record<string, unknown>

/**
 * What rows to read: the kind, an optional owner run (`runId`: pipelines owned by the run;
 * tasks, attempts, events of the run; artifacts of the run's pipelines), and a row limit
 * (`undefined` = all, `0` = none, `N` = the first N rows of the kind's order; negative or
 * non-integer fails with `ConfigError`).
 *
 * @since 0.1.0
 * @category models
 */
export interface RowOptions {
  readonly kind: RowKind
  readonly runId?: string | undefined
  readonly limit?: Limit
}

/**
 * {@link RowOptions} plus the output format.
 *
 * @since 0.1.0
 * @category models
 */
export interface ExportOptions extends RowOptions {
  readonly format: Format
}

/**
 * Writing an export file failed (cannot create, write, or rename the output). Nothing is left
 * at `path` that was not there before.
 *
 * @since 0.1.0
 * @category errors
 */
export class ExportError extends Schema.TaggedError<ExportError>("assay/ExportError")("ExportError", {
  message: Schema.String,
  path: Schema.String
}) {}

/**
 * The bulk read nested rows need, for one page of pipelines at a time: their task rows (by
 * seq, then taskRunId) and their artifacts (by seq, then artifactId) with the payloads asked
 * for. {@link storeBulk} answers it with the store's `loadBundles` (on SQLite one query per
 * table per 500 pipelines).
 *
 * @since 0.1.0
 * @category models
 */
export interface BulkReader {
  readonly bundles: (
    ids: ReadonlyArray<string>,
    options: BundleOptions
  ) => Effect.Effect<ReadonlyMap<string, PipelineBundle>, ReadError>
}

// ---------------------------------------------------------------------------------------------
// Limits, payloads, row shapes
// ---------------------------------------------------------------------------------------------

/**
 * Validates a row limit: `undefined` (all) or a non-negative integer; anything else fails
 * with `ConfigError`.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkLimit = (limit: Limit): Effect.Effect<number | undefined, ConfigError> =>
  limit === undefined || (Number.isInteger(limit) && limit >= 0)
    ? Effect.succeed(limit)
    : Effect.fail(
      new ConfigError({
        message: `limit must be a non-negative integer (or absent for all rows), got ${String(limit)}`,
        issues: [{ path: "limit", message: `invalid limit ${String(limit)}` }]
      })
    )

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

const artifactRow = (loaded: LoadedArtifact): Row => ({
  ...loaded.artifact,
  payload: decodePayload(loaded.artifact, loaded.payload)
})

/**
 * The repeat index of a pipeline when it can be known from the row: a `repeat` tag, else the
 * `#N` suffix of an explicit key (`` `${key}#${repeat}` ``), else `null` (content-addressed
 * ids do not record it).
 *
 * @since 0.1.0
 * @category rows
 */
export const repeatOf = (p: PipelineRecord): number | null => {
  const tag = p.tags["repeat"]
  if (tag !== undefined && /^\d+$/.test(tag)) return Number(tag)
  const m = p.key === null ? null : /#(\d+)$/.exec(p.key)
  return m === null ? null : Number(m[1])
}

/**
 * A nested `pipelines` row: every field of the pipeline record, `repeat`, then `tasks` (task
 * rows) and `artifacts` (artifact metadata with decoded `payload`).
 *
 * @since 0.1.0
 * @category rows
 */
export const pipelineRow = (
  p: PipelineRecord,
  tasks: ReadonlyArray<TaskRecord>,
  artifacts: ReadonlyArray<LoadedArtifact>
): Row => ({
  ...p,
  repeat: repeatOf(p),
  tasks: tasks.map(plain),
  artifacts: artifacts.map(artifactRow)
})

/**
 * A `results` row: `pipelineId`, `key`, `name`, `repeat`, `state`, `runId`, the cursor,
 * `attemptsTotal`, times, the final artifact's decoded `payload` (`null` when there is none),
 * and the failure fields (`failedTask`, `errorType`, `errorMessage`, `errorClass`).
 *
 * @since 0.1.0
 * @category rows
 */
export const resultRow = (p: PipelineRecord, final: LoadedArtifact | undefined): Row => ({
  pipelineId: p.pipelineId,
  key: p.key,
  name: p.name,
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

/**
 * The {@link BulkReader} of any store: its `loadBundles`.
 *
 * @since 0.1.0
 * @category bulk
 */
export const storeBulk = (store: StoreService): BulkReader => ({ bundles: store.loadBundles })

// ---------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------

const pipelinePages = (
  store: StoreService,
  runId: string | undefined,
  limit: number | undefined,
  batch: number
) => store.streamPipelines({ runId, limit }).pipe(Stream.rechunk(batch))

/**
 * The rows of one kind of one store, as a stream of plain JSON objects, in the kind's order
 * (see the module docs), read in bounded batches. `bulk` answers nested reads (default
 * {@link storeBulk}).
 *
 * Fails with `ConfigError` on an invalid limit, `StoreUnavailable` when the store cannot be
 * read.
 *
 * @since 0.1.0
 * @category rows
 */
export const iterRows = (
  store: StoreService,
  options: RowOptions,
  bulk: BulkReader = storeBulk(store)
): Stream.Stream<Row, ReadError> =>
  Stream.unwrap(Effect.map(checkLimit(options.limit), (limit): Stream.Stream<Row, ReadError> => {
    if (limit === 0) return Stream.empty
    const { runId } = options
    switch (options.kind) {
      case "tasks":
        return Stream.map(store.streamTasks({ runId, limit }), plain)
      case "attempts":
        return Stream.map(store.streamAttempts({ runId, limit }), plain)
      case "events":
        return Stream.map(store.streamEvents({ runId, limit }), plain)
      case "pipelines":
        return pipelinePages(store, runId, limit, NESTED_BATCH).pipe(
          Stream.mapChunksEffect((chunk) => {
            const ps = Chunk.toReadonlyArray(chunk)
            return Effect.map(bulk.bundles(ps.map((p) => p.pipelineId), { payloads: "all" }), (bundles) =>
              Chunk.unsafeFromArray(ps.map((p) => {
                const b = bundles.get(p.pipelineId)
                return pipelineRow(p, b?.tasks ?? [], b?.artifacts ?? [])
              })))
          })
        )
      case "results":
        return pipelinePages(store, runId, limit, PAGE_SIZE).pipe(
          Stream.mapChunksEffect((chunk) => {
            const ps = Chunk.toReadonlyArray(chunk)
            return Effect.map(
              bulk.bundles(ps.map((p) => p.pipelineId), { payloads: "final", artifacts: "final", tasks: false }),
              (finals) => Chunk.unsafeFromArray(ps.map((p) => resultRow(p, finals.get(p.pipelineId)?.artifacts.at(-1))))
            )
          })
        )
      case "artifacts": {
        const rows = pipelinePages(store, runId, undefined, NESTED_BATCH).pipe(
          Stream.mapChunksEffect((chunk) => {
            const ids = Chunk.toReadonlyArray(chunk).map((p) => p.pipelineId)
            return Effect.map(bulk.bundles(ids, { payloads: "all", tasks: false }), (bundles) =>
              Chunk.unsafeFromArray(ids.flatMap((id) => (bundles.get(id)?.artifacts ?? []).map(artifactRow))))
          })
        )
        return limit === undefined ? rows : Stream.take(rows, limit)
      }
    }
  }))

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/**
 * One CSV field per RFC 4180 §2: a field holding a double quote, a comma, CR or LF is enclosed
 * in double quotes with inner quotes doubled; any other field is written as is. csv-stringify
 * (which writes the header) escapes each quote through a callback, about 6× slower on the long
 * JSON cells of nested rows; the test suite checks this function against csv-stringify.
 *
 * @since 0.1.0
 * @category writing
 */
export const csvField = (s: string): string =>
  /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s

/**
 * One CSV record: fields joined by commas, ended by LF (csv-stringify's default record
 * delimiter; RFC 4180 readers accept it).
 *
 * @since 0.1.0
 * @category writing
 */
export const csvRecord = (fields: ReadonlyArray<string>): string => {
  let s = ""
  for (let i = 0; i < fields.length; i++) s += (i === 0 ? "" : ",") + csvField(fields[i]!)
  return s + "\n"
}

const cell = (v: unknown): string =>
  v === null || v === undefined ? "" : typeof v === "string" ? v : typeof v === "object" ? JSON.stringify(v) : String(v)

/** Bytes of one output buffer (the file stream's high-water mark too). */
const SINK_BYTES = 1 << 20

/**
 * Collects encoded text as UTF-8 bytes in buffers of {@link SINK_BYTES}: each row's text is
 * copied into the current buffer as soon as it is made (so it dies young, and no batch is
 * ever one large string); full buffers wait in `ready` for the file stream.
 */
class ByteSink {
  private buf: Buffer = Buffer.allocUnsafeSlow(SINK_BYTES)
  private used = 0
  /** Filled buffers (views), in order, not yet handed to the stream. */
  ready: Array<Buffer> = []

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

  /**
   * Appends `s` as one CSV field that needs quoting (it holds a double quote or a comma; no
   * raw CR/LF, as in any `JSON.stringify` output): `"`, the UTF-8 bytes of `s` with every
   * double quote doubled, `"` — the same bytes as `csvField(s)`. The doubling is done on the
   * bytes (a UTF-8 multi-byte sequence never holds 0x22), ~5× faster than a string replace on
   * the long JSON cells of nested rows.
   */
  quoted(s: string): void {
    // worst case: 3 bytes per code unit, every byte a quote, plus the two enclosing quotes
    if (s.length * 6 + 2 > this.buf.length - this.used) {
      this.seal()
      if (s.length * 6 + 2 > this.buf.length) {
        this.ready.push(Buffer.from(csvField(s)))
        return
      }
    }
    const buf = this.buf
    const start = this.used + 1
    const n = buf.write(s, start)
    let quotes = 0
    for (let i = start; i < start + n; i++) if (buf[i] === 34) quotes++
    const end = start + n + quotes
    buf[end] = 34
    // expand in place from the end: each byte moves right by the number of quotes up to it
    let dst = end
    for (let i = start + n - 1; quotes > 0; i--) {
      const b = buf[i]!
      buf[--dst] = b
      if (b === 34) {
        buf[--dst] = 34
        quotes--
      }
    }
    buf[this.used] = 34
    this.used = end + 1
  }

  /** Moves the filled part of the current buffer to `ready` and starts a fresh buffer. */
  seal(): void {
    if (this.used === 0) return
    this.ready.push(this.buf.subarray(0, this.used))
    this.buf = Buffer.allocUnsafeSlow(SINK_BYTES)
    this.used = 0
  }

  /** The buffers to write now: the sealed ones, plus the current one when `all`. */
  take(all: boolean): Array<Buffer> {
    if (all) this.seal()
    const out = this.ready
    this.ready = []
    return out
  }
}

/** Incremental encoder of one format: rows per batch into the sink, then `end`. */
interface Encoder {
  readonly push: (rows: ReadonlyArray<Row>, sink: ByteSink) => void
  readonly end: (sink: ByteSink) => void
}

const jsonlEncoder = (): Encoder => ({
  push: (rows, sink) => {
    for (const r of rows) {
      sink.text(JSON.stringify(r))
      sink.text("\n")
    }
  },
  end: () => {}
})

const jsonEncoder = (): Encoder => {
  let first = true
  return {
    push: (rows, sink) => {
      for (const r of rows) {
        sink.text((first ? "[\n" : ",\n") + JSON.stringify(r))
        first = false
      }
    },
    end: (sink) => sink.text(first ? "[]\n" : "\n]\n")
  }
}

const csvEncoder = (): Encoder => {
  let prefix: Array<Row> | undefined = []
  let columns: Array<string> = []
  let known = new Set<string>()
  const encode = (rows: ReadonlyArray<Row>, sink: ByteSink) => {
    const n = columns.length
    for (const r of rows) {
      // short fields gather in `line`; a JSON cell goes straight into the sink, quoted there
      let line = ""
      for (let i = 0; i <= n; i++) {
        let v: unknown
        if (i < n) v = r[columns[i]!]
        else {
          let extra: Record<string, unknown> | undefined
          for (const k in r) {
            if (!known.has(k)) (extra ??= {})[k] = r[k]
          }
          v = extra
        }
        if (v !== null && typeof v === "object") {
          const json = JSON.stringify(v)
          if (json.includes("\"") || json.includes(",")) {
            sink.text(line)
            sink.quoted(json)
            line = i < n ? "," : "\n"
            continue
          }
          line += json
        } else line += csvField(cell(v))
        line += i < n ? "," : "\n"
      }
      sink.text(line)
    }
  }
  const flushPrefix = (sink: ByteSink) => {
    const rows = prefix ?? []
    prefix = undefined
    for (const r of rows.slice(0, CSV_HEADER_ROWS)) for (const k in r) if (!known.has(k)) {
      known.add(k)
      columns.push(k)
    }
    if (known.has("extra")) {
      // a genuine `extra` field cannot share the fold-in column's name
      columns = columns.filter((c) => c !== "extra")
      known = new Set(columns)
    }
    sink.text(stringify([[...columns, "extra"]]))
    encode(rows, sink)
  }
  return {
    push: (rows, sink) => {
      if (prefix === undefined) return encode(rows, sink)
      prefix.push(...rows)
      if (prefix.length >= CSV_HEADER_ROWS) flushPrefix(sink)
    },
    end: (sink) => {
      if (prefix !== undefined && prefix.length > 0) flushPrefix(sink)
    }
  }
}

const encoderOf = (format: Format): Encoder =>
  format === "jsonl" ? jsonlEncoder() : format === "json" ? jsonEncoder() : csvEncoder()

const ioError = (path: string, what: string, e: unknown) =>
  new ExportError({ message: `cannot ${what} ${path}: ${e instanceof Error ? e.message : String(e)}`, path })

const openTemp = (tmp: string) =>
  Effect.async<fs.WriteStream, ExportError>((resume) => {
    const ws = fs.createWriteStream(tmp, { flags: "wx", highWaterMark: 1 << 20 })
    const onError = (e: Error) => resume(Effect.fail(ioError(tmp, "create", e)))
    ws.once("error", onError)
    ws.once("open", () => {
      ws.off("error", onError)
      resume(Effect.succeed(ws))
    })
  })

/** Writes `buffers` in order, waiting for `drain` when the stream's buffer is full. */
const writeBuffers = (ws: fs.WriteStream, tmp: string, buffers: ReadonlyArray<Buffer>): Effect.Effect<void, ExportError> => {
  let ok = true
  for (const b of buffers) ok = ws.write(b)
  return ok
    ? Effect.void
    : Effect.async<void, ExportError>((resume) => {
      const done = (e?: Error) => {
        ws.off("drain", onDrain)
        ws.off("error", done)
        resume(e === undefined ? Effect.void : Effect.fail(ioError(tmp, "write", e)))
      }
      const onDrain = () => done()
      ws.once("drain", onDrain)
      ws.once("error", done)
    })
}

const endStream = (ws: fs.WriteStream, tmp: string) =>
  Effect.async<void, ExportError>((resume) => {
    ws.once("error", (e) => resume(Effect.fail(ioError(tmp, "write", e))))
    ws.end(() => resume(Effect.void))
  })

/**
 * The 16-byte header every SQLite 3 database file starts with (`"SQLite format 3\0"`), see
 * https://www.sqlite.org/fileformat.html §1.3.
 *
 * @since 0.1.0
 * @category validation
 */
export const SQLITE_HEADER: Uint8Array = new TextEncoder().encode("SQLite format 3\0")

/** The file a store argument names (a path, or a `file:` URI), absolute; `undefined` for other URIs. */
const fileOfSpec = (spec: string): string | undefined => {
  const parsed = PluginUri.parse(spec)
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

/** Whether the file at `p` exists and starts with {@link SQLITE_HEADER}. */
const isSqliteFile = (p: string): boolean => {
  let fd: number | undefined
  try {
    fd = fs.openSync(p, "r")
    const head = Buffer.alloc(SQLITE_HEADER.length)
    const n = fs.readSync(fd, head, 0, head.length, 0)
    return n === SQLITE_HEADER.length && head.equals(SQLITE_HEADER)
  } catch {
    return false
  } finally {
    if (fd !== undefined) fs.closeSync(fd)
  }
}

/**
 * Refuses an output path that would overwrite a database: fails with `ConfigError` (exit 2 in
 * the CLI) when `out` resolves (symbolic links followed) to the same file as one of the
 * `inputs` store arguments (paths or `file:` URIs; other URIs are not files), or when `out`
 * exists and is an SQLite file (starts with {@link SQLITE_HEADER}). Check it before anything
 * is written.
 *
 * @param out the output path as given
 * @param inputs the store arguments as given
 * @since 0.1.0
 * @category validation
 */
export const checkOutput = (out: string, inputs: ReadonlyArray<string>): Effect.Effect<void, ConfigError> =>
  Effect.suspend(() => {
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
      if (file !== undefined && realOrSelf(file) === target) return refuse(`it is the input store ${spec}`)
    }
    if (isSqliteFile(target)) return refuse("it is an existing SQLite database, which would be overwritten")
    return Effect.void
  })

/**
 * Writes `rows` to `path` in `format`, atomically: into `<path>.<pid>.<random>.tmp` in the same
 * directory, renamed over `path` once complete. On failure or interruption the temporary file
 * is removed and `path` is untouched. Returns the number of rows written.
 *
 * Fails with the stream's error, or `ExportError` on file-system failures.
 *
 * @since 0.1.0
 * @category writing
 */
export const writeRows = <E, R>(
  rows: Stream.Stream<Row, E, R>,
  path: string,
  format: Format
): Effect.Effect<number, E | ExportError, R> =>
  Effect.gen(function*() {
    const suffix = (yield* Random.nextInt).toString(36).replace("-", "")
    const tmp = nodePath.join(nodePath.dirname(path), `.${nodePath.basename(path)}.${process.pid}.${suffix}.tmp`)
    return yield* Effect.acquireUseRelease(
      openTemp(tmp),
      (ws) =>
        Effect.gen(function*() {
          const enc = encoderOf(format)
          const sink = new ByteSink()
          let n = 0
          yield* Stream.runForEachChunk(rows, (chunk) => {
            n += chunk.length
            enc.push(Chunk.toReadonlyArray(chunk), sink)
            return writeBuffers(ws, tmp, sink.take(false))
          })
          enc.end(sink)
          yield* writeBuffers(ws, tmp, sink.take(true))
          yield* endStream(ws, tmp)
          yield* Effect.try({ try: () => fs.renameSync(tmp, path), catch: (e) => ioError(path, "rename to", e) })
          return n
        }),
      (ws, exit) =>
        exit._tag === "Success" ? Effect.void : Effect.sync(() => {
          ws.on("error", () => {}) // late errors of an abandoned stream
          ws.destroy()
          try {
            fs.rmSync(tmp, { force: true })
          } catch {
            // best effort: the temp file is hidden and named after the process
          }
        })
    )
  })

/**
 * Exports one store to `path` (see {@link iterRows} and {@link writeRows}); returns the number
 * of rows written.
 *
 * @since 0.1.0
 * @category writing
 */
export const exportStore = (
  store: StoreService,
  path: string,
  options: ExportOptions,
  bulk?: BulkReader
): Effect.Effect<number, ReadError | ExportError> => writeRows(iterRows(store, options, bulk), path, options.format)

/**
 * Opens an SQLite store file read-only in the current scope (`SqliteStore.layerReadOnly`:
 * never migrates, never writes, takes no lock) with its {@link storeBulk} reader. Fails with
 * `StoreUnavailable` when the file is missing or not an assay store (read-only opens never
 * create anything).
 *
 * @since 0.1.0
 * @category stores
 */
export const openReadOnly = (
  filename: string
): Effect.Effect<{ readonly store: StoreService; readonly bulk: BulkReader }, StoreUnavailable | ConfigError | ExportError, Scope.Scope> =>
  Effect.map(Layer.build(SqliteStore.layerReadOnly(filename)), (ctx) => {
    const store = Context.get(ctx, Store)
    return { store, bulk: storeBulk(store) }
  })

/**
 * Exports several store files into one file, concatenated in the given order (no dedupe: use
 * `Merge.mergeReports(paths).export` for the merged view). `limit` applies to each store
 * separately. Every store is opened read-only. Returns the number of rows written.
 *
 * @since 0.1.0
 * @category writing
 */
export const exportStores = (
  paths: ReadonlyArray<string>,
  out: string,
  options: ExportOptions
): Effect.Effect<number, ReadError | ExportError> =>
  Effect.scoped(
    Effect.gen(function*() {
      yield* checkLimit(options.limit)
      const opened = yield* Effect.forEach(paths, openReadOnly)
      const rows = Stream.concatAll(Chunk.fromIterable(opened.map(({ bulk, store }) => iterRows(store, options, bulk))))
      return yield* writeRows(rows, out, options.format)
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
        message: `cannot tell the format of ${path}: name it .jsonl, .json or .csv, or pass --format`,
        issues: [{ path: "format", message: "unknown output suffix", suggestion: "--format jsonl" }]
      })
    )
  }
  return Either.right(bySuffix)
}
