/**
 * Seed sources: where a run's rows come from. `rangeSource(n)` yields `0 .. n-1`;
 * `jsonlSource(path, { limit })` streams a JSON Lines file lazily (one row per non-blank
 * line), reading only as far as the consumer pulls.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as nodePath from "node:path"
import { Effect, Either, Schema, Stream } from "effect"
import { ConfigError } from "../domain/Errors.js"

/**
 * A seed source could not be read: the file is missing or unreadable (`line` absent), or a
 * line is not valid JSON (`line` is its 1-based number).
 *
 * @since 0.1.0
 * @category errors
 */
export class SourceError extends Schema.TaggedError<SourceError>("assay/SourceError")("SourceError", {
  path: Schema.String,
  line: Schema.optional(Schema.Number),
  message: Schema.String
}) {}

/**
 * The integers `0, 1, …, n-1` as a stream (empty for `n <= 0`).
 *
 * @since 0.1.0
 * @category sources
 */
export const rangeSource = (n: number): Stream.Stream<number> =>
  n <= 0 ? Stream.empty : Stream.range(0, Math.floor(n) - 1)

/**
 * Options of {@link jsonlSource}: `limit` (at most this many rows; `undefined` = all, `0` =
 * none) and `chunkSize` (bytes read per file read, default 64 KiB).
 *
 * @since 0.1.0
 * @category models
 */
export interface JsonlSourceOptions {
  readonly limit?: number | undefined
  readonly chunkSize?: number | undefined
  /**
   * When set, every row must carry a key in this field (see {@link keyOfRow}) and no key may
   * appear twice in the file: the stream fails with a `ConfigError` (path `source.keyField`)
   * naming the line(s). Keeps one `Set` entry per key seen (keys are small; memory grows with
   * the number of distinct rows read, not with their size).
   */
  readonly keyField?: string | undefined
}

/**
 * The pipeline key of a row under `keyField`: a non-empty string as is, any other non-null
 * value (number, boolean, object) as its JSON text. `Left` with the reason when the row is
 * not an object, has no such field, or the value is `null` or `""`.
 *
 * @since 0.1.0
 * @category keys
 */
export const keyOfRow = (row: unknown, keyField: string): Either.Either<string, string> => {
  if (typeof row !== "object" || row === null || Array.isArray(row)) {
    return Either.left(`is not an object (${Array.isArray(row) ? "an array" : JSON.stringify(row)})`)
  }
  const record = row as Record<string, unknown>
  if (!(keyField in record) || record[keyField] === undefined) {
    const fields = Object.keys(record)
    return Either.left(`has no "${keyField}" field (fields: ${fields.length === 0 ? "none" : fields.join(", ")})`)
  }
  const v = record[keyField]
  if (v === null) return Either.left(`has a null "${keyField}"`)
  if (v === "") return Either.left(`has an empty "${keyField}"`)
  return Either.right(typeof v === "string" ? v : JSON.stringify(v))
}

/** How a row is named in messages: `row 3` or `row 3 (line 5)` when blank lines shift them. */
const rowLabel = (row: number, line: number): string => row === line ? `row ${row}` : `row ${row} (line ${line})`

/**
 * The `ConfigError` for a row without a usable key: `source.keyField: row 1 of rows.jsonl has
 * no "idd" field (fields: id, v)`, with `hint` (a did-you-mean) appended when given.
 *
 * @since 0.1.0
 * @category keys
 */
export const missingKeyError = (
  file: string,
  row: number,
  line: number,
  reason: string,
  hint?: string
): ConfigError => {
  const message = `${rowLabel(row, line)} of ${nodePath.basename(file)} ${reason}${hint === undefined ? "" : `; ${hint}`}`
  return new ConfigError({ message: `source.keyField: ${message}`, issues: [{ path: "source.keyField", message }] })
}

/**
 * The `ConfigError` for a key that appears twice in one file: `source.keyField: key "a"
 * appears on lines 1 and 2 of dup.jsonl`.
 *
 * @since 0.1.0
 * @category keys
 */
export const duplicateKeyError = (file: string, key: string, firstLine: number, line: number): ConfigError => {
  const message = `key ${JSON.stringify(key)} appears on lines ${firstLine} and ${line} of ${nodePath.basename(file)}`
  return new ConfigError({ message: `source.keyField: ${message}`, issues: [{ path: "source.keyField", message }] })
}

/**
 * One parsed row of a JSON Lines file with its 1-based `row` number (non-blank lines) and
 * `line` number (in the file).
 *
 * @since 0.1.0
 * @category models
 */
export interface JsonlRow {
  readonly row: number
  readonly line: number
  readonly value: unknown
}

/**
 * Streams the rows of a JSON Lines file with their row and line numbers (lazy, chunked like
 * {@link jsonlSource}, no limit and no key checks). Fails with {@link SourceError} for an
 * unreadable file or an invalid line.
 *
 * @since 0.1.0
 * @category sources
 */
export const jsonlRows = (
  path: string,
  options: { readonly chunkSize?: number | undefined } = {}
): Stream.Stream<JsonlRow, SourceError, FileSystem.FileSystem> =>
  Stream.unwrap(
    Effect.map(FileSystem.FileSystem, (fs) =>
      fs.stream(path, { chunkSize: FileSystem.KiB(options.chunkSize === undefined ? 64 : options.chunkSize / 1024) })
    )
  ).pipe(
    Stream.mapError((e) => new SourceError({ path, message: e.message })),
    Stream.decodeText(),
    Stream.splitLines,
    Stream.zipWithIndex,
    Stream.filter(([line]) => line.trim() !== ""),
    Stream.zipWithIndex,
    Stream.mapEffect(([[line, index], row]) =>
      Effect.try({
        try: (): JsonlRow => ({ row: row + 1, line: index + 1, value: JSON.parse(line) as unknown }),
        catch: (e) =>
          new SourceError({
            path,
            line: index + 1,
            message: `line ${index + 1} is not valid JSON: ${e instanceof Error ? e.message : String(e)}`
          })
      })
    )
  )

/**
 * Fails a row stream at the first row without a usable key under `keyField` or whose key an
 * earlier row already had ({@link missingKeyError} / {@link duplicateKeyError}). Keeps one
 * map entry (key → first line) per row passed.
 *
 * @since 0.1.0
 * @category keys
 */
export const checkKeys = <E, R>(
  path: string,
  keyField: string,
  rows: Stream.Stream<JsonlRow, E, R>,
  hint?: (fields: ReadonlyArray<string>) => string | undefined
): Stream.Stream<JsonlRow, E | ConfigError, R> =>
  Stream.suspend(() => {
    const check = keyChecker(path, keyField, hint)
    return Stream.mapEffect(rows, (r) => Effect.as(check(r), r))
  })

/** A stateful per-row key check (one map entry per key seen): fails at a missing or repeated key. */
const keyChecker = (
  path: string,
  keyField: string,
  hint?: (fields: ReadonlyArray<string>) => string | undefined
) => {
  const seen = new Map<string, number>()
  return (r: JsonlRow): Effect.Effect<void, ConfigError> => {
    const key = keyOfRow(r.value, keyField)
    if (Either.isLeft(key)) {
      const fields = typeof r.value === "object" && r.value !== null && !Array.isArray(r.value) ? Object.keys(r.value) : []
      return Effect.fail(missingKeyError(path, r.row, r.line, key.left, hint?.(fields)))
    }
    const first = seen.get(key.right)
    if (first !== undefined) return Effect.fail(duplicateKeyError(path, key.right, first, r.line))
    seen.set(key.right, r.line)
    return Effect.void
  }
}

/**
 * Streams a JSON Lines file: each non-blank line is parsed as JSON and emitted as one seed.
 * Lazy: the file is read in chunks (64 KiB by default) as the consumer pulls, and reading
 * stops once `limit` rows have been emitted, so a large file is never read whole. Fails with
 * {@link SourceError} for an unreadable file or an invalid line (with its 1-based number), and
 * with `ConfigError` (path `source.keyField`) when `keyField` is set and a row has no key or
 * repeats an earlier row's key.
 *
 * @since 0.1.0
 * @category sources
 */
export const jsonlSource = (
  path: string,
  options: JsonlSourceOptions = {}
): Stream.Stream<unknown, SourceError | ConfigError, FileSystem.FileSystem> => {
  const limit = options.limit
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 0)) {
    return Stream.fail(new SourceError({ path, message: `limit must be an integer >= 0, got ${limit}` }))
  }
  if (limit === 0) return Stream.empty
  const rows = jsonlRows(path, { chunkSize: options.chunkSize })
  const checked = options.keyField === undefined ? rows : checkKeys(path, options.keyField, rows)
  const values = Stream.map(checked, (r) => r.value)
  return limit === undefined ? values : Stream.take(values, limit)
}

/**
 * What {@link scanKeys} read: `rows` checked, and whether that was the `complete` file.
 *
 * @since 0.1.0
 * @category models
 */
export interface KeyScan {
  readonly rows: number
  readonly complete: boolean
}

/**
 * Checks the keys of a JSON Lines file before a run (what `assay validate` and the start of
 * `assay run` do): reads at most `maxRows` rows (streaming, so only that much of the file is
 * read) and fails like {@link checkKeys} (`ConfigError`, path `source.keyField`) at the first
 * row without a key or with a repeated key. `hint(fields)` may add a did-you-mean to a
 * missing-field message. Fails with {@link SourceError} for an unreadable file or invalid
 * JSON line.
 *
 * @since 0.1.0
 * @category keys
 */
export const scanKeys = (
  path: string,
  keyField: string,
  options: {
    readonly maxRows: number
    readonly hint?: ((fields: ReadonlyArray<string>) => string | undefined) | undefined
  }
): Effect.Effect<KeyScan, SourceError | ConfigError, FileSystem.FileSystem> =>
  Effect.suspend(() => {
    const check = keyChecker(path, keyField, options.hint)
    return jsonlRows(path).pipe(
      // one row past the bound (parsed, not checked) tells whether the file was read to its end
      Stream.take(options.maxRows + 1),
      Stream.mapEffect((r) => (r.row <= options.maxRows ? check(r) : Effect.void)),
      Stream.runCount,
      Effect.map((n) => ({ rows: Math.min(n, options.maxRows), complete: n <= options.maxRows }))
    )
  })
