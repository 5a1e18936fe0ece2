/**
 * Export: a store's facts as files (`exportStore`, `exportStores`); `resolveFormat` picks the
 * format of an output path.
 *
 * Nine row kinds ({@link ROW_KINDS}) in three formats ({@link FORMATS}):
 *
 * | kind | one row per | order (the order `limit` cuts) |
 * | --- | --- | --- |
 * | `pipelines` | pipeline, nested: `tasks`, `artifacts` (decoded payloads), `attemptsTotal`, `repeat`; `control` (traversal record) and `handoffs` (ledger rows) for pipelines that declare control | createdAt, pipelineId |
 * | `tasks` | task run | the store's pipeline order (admission order on SQLite v3), seq, visit (0 first), taskRunId |
 * | `attempts` | attempt (with its retry `decision`) | attemptId |
 * | `events` | event | eventId |
 * | `artifacts` | artifact (seeds and intermediates included, its occurrence `address`, decoded payload) | pipeline order, seq, artifactId |
 * | `results` | pipeline: key, repeat, state, final payload, failure fields (failed and interrupted included) | createdAt, pipelineId |
 * | `handoffs` | control transition (handoff ledger row) | handoffId |
 * | `resources` | pool resource: attempts, retries, 429s, tokens in/out, estimated, unpriced, known cost of the attempts that leased it, in the scope (`runId`, or every run) | pool, resourceId |
 * | `pools` | pool: the sum of its resources' rows, with their count | pool |
 *
 * **Memory is bounded by bytes, not by row counts.** Pipelines are paged (`NESTED_BATCH`
 * or the store's `PAGE_SIZE` at a time); each page is read once with its payloads up to
 * `BATCH_BYTES` (the store's `payloadBytes` budget: with small payloads, the whole page in
 * one read); the pipelines that read could not return whole are then loaded in groups whose
 * payload bytes add up to at most `BATCH_BYTES`. A pipeline whose payloads exceed that budget on their
 * own is read one artifact at a time: for `artifacts` each artifact is its own row; for
 * `pipelines` the row is loaded lazily: its `artifacts` are loaded, encoded and written
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

// The implementation is in internal/export.ts; this module is the public surface
// (what `import { Export } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  ExportError,
  FORMATS,
  ROW_KINDS,
  exportStore,
  exportStores,
  resolveFormat
} from "./internal/export.js"
export type {
  ExportOptions,
  Format,
  Row,
  RowKind,
  RowOptions,
  ShapeOptions,
  WriteOptions
} from "./internal/export.js"
