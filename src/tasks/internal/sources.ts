/**
 * Seed sources: where a run's rows come from. `rangeSource(n)` yields `0 .. n-1`;
 * `jsonlSource(path, { limit })` streams a JSON Lines file lazily (one row per non-blank
 * line), reading only as far as the consumer pulls.
 *
 * **Numbers.** A row is parsed with `JSON.parse`, so its numbers are JavaScript numbers
 * (IEEE-754 doubles): an integer beyond 2^53 (`1311112222333344445`) is rounded
 * (`1311112222333344500`) in the row a task receives. A pipeline key taken from such a
 * number (`keyField`) is not rounded: {@link keyOfLine} reads the key as written in the line
 * (with `lossless-json`, only for the lines where the text and the number differ), so two
 * rows that differ only past the 16th digit keep two keys. {@link unsafeIntegersOf} finds
 * such integers in a line, for the warnings of `validate` and `run` (write them as strings to
 * keep them exact in the row too).
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { isLosslessNumber, parse as parseLossless, stringify as stringifyLossless } from "lossless-json"
import * as nodePath from "node:path"
import { Effect, Either, Schema, Stream } from "effect"
import { ConfigError } from "../../domain/Errors.js"

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
   * When set, every row must carry a key in this field (see {@link keyOfLine}) and no key may
   * appear twice in the file: the stream fails with a `ConfigError` (path `source.keyField`)
   * naming the line(s). Keeps one `Set` entry per key seen (keys are small; memory grows with
   * the number of distinct rows read, not with their size).
   */
  readonly keyField?: string | undefined
}

/**
 * The pipeline key of a row under `keyField`: a non-empty string as is, any other non-null
 * value (number, boolean, object) as its JSON text. `Left` with the reason when the row is
 * not an object, has no such field, or the value is `null` or `""`. The row is a parsed
 * value, so a number is keyed by its JavaScript text (`1e3` → `"1000"`, an integer beyond
 * 2^53 rounded); {@link keyOfLine} keys it as written in the file.
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

/** Whether the text at `i` of a JSON text is inside the top-level object (depth 1, outside strings). */
const atTopLevel = (text: string, i: number): boolean => {
  let depth = 0
  let inString = false
  for (let k = 0; k < i; k++) {
    const c = text.charCodeAt(k)
    if (inString) {
      if (c === 92) k++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) depth++
    else if (c === 125 || c === 93) depth--
  }
  return depth === 1 && !inString
}

const isNumberChar = (c: number): boolean =>
  (c >= 48 && c <= 57) || c === 45 || c === 43 || c === 46 || c === 101 || c === 69 // 0-9 - + . e E

const isSpace = (c: number): boolean => c === 32 || c === 9 || c === 10 || c === 13

/**
 * The text of the number under `keyField` when it is certainly `String(value)`, found without
 * parsing: the field's name occurs once in the line, is followed by `:` and is the top-level
 * key (no `\u` escape could have spelled it otherwise, or a depth scan says so), and the
 * number's text there is `String(value)`. `undefined` when any of that does not hold.
 */
const plainNumberText = (text: string, keyField: string, value: number): string | undefined => {
  if (!Number.isSafeInteger(value) || Object.is(value, -0)) return undefined
  const quoted = JSON.stringify(keyField)
  const i = text.indexOf(quoted)
  if (i < 0 || text.indexOf(quoted, i + 1) >= 0) return undefined
  let j = i + quoted.length
  while (j < text.length && isSpace(text.charCodeAt(j))) j++
  if (text.charCodeAt(j) !== 58) return undefined // ':'
  j++
  while (j < text.length && isSpace(text.charCodeAt(j))) j++
  let end = j
  while (end < text.length && isNumberChar(text.charCodeAt(end))) end++
  const written = text.slice(j, end)
  if (written !== String(value)) return undefined
  if (text.includes("\\u") && !atTopLevel(text, i)) return undefined
  return written
}

/**
 * The pipeline key of a row under `keyField`, with a number kept **exactly as written** in
 * `text` (the row's line): `{"id": 1311112222333344445}` is keyed `"1311112222333344445"`
 * (where {@link keyOfRow} gives the rounded `"1311112222333344500"`), `{"id": 1.0}` is
 * keyed `"1.0"` and `{"id": 1e3}` `"1e3"`; an object or array key is its JSON text with its
 * numbers as written. Strings, booleans and the errors (`Left`, see {@link keyOfRow}) are
 * the same as {@link keyOfRow}'s, plus `Left` for a line that must be re-read exactly and
 * writes one field twice with two values (`lossless-json` refuses it; `JSON.parse` would have
 * kept the last silently). `value` must be `JSON.parse(text)`.
 *
 * Cost: for a string key, nothing more than {@link keyOfRow}; for a safe integer written
 * plainly (the common numeric key), two `indexOf`s over the line; only a line whose key
 * differs from its JavaScript text (an integer beyond 2^53, a fraction, an exponent, `-0`),
 * an object or array key, or a line where the field's name is ambiguous is parsed again with
 * `lossless-json`.
 *
 * @since 0.1.0
 * @category keys
 */
export const keyOfLine = (value: unknown, text: string, keyField: string): Either.Either<string, string> => {
  const key = keyOfRow(value, keyField)
  if (Either.isLeft(key)) return key
  const v = (value as Record<string, unknown>)[keyField]
  if (typeof v !== "number" && (typeof v !== "object" || v === null)) return key
  if (typeof v === "number") {
    const plain = plainNumberText(text, keyField, v)
    if (plain !== undefined) return Either.right(plain)
  }
  let exact: unknown
  try {
    exact = (parseLossless(text) as Record<string, unknown>)[keyField]
  } catch (e) {
    // lossless-json refuses a field written twice with two values (JSON.parse keeps the last)
    return Either.left(`cannot be read exactly to key it: ${e instanceof Error ? e.message : String(e)}`)
  }
  if (isLosslessNumber(exact)) return Either.right(exact.value)
  return Either.right(stringifyLossless(exact) ?? key.right)
}

/**
 * An integer written in a row beyond what a JavaScript number holds exactly (its magnitude
 * is above 2^53 − 1): where (`path`, `id` or `meta.ids[2]`), as written (`text`), and what a
 * task receives (`rounded`, the text of the parsed number).
 *
 * @since 0.1.0
 * @category models
 */
export interface UnsafeInteger {
  readonly path: string
  readonly text: string
  readonly rounded: string
}

/** 16 or more digits in a row: the only way to write an integer beyond 2^53 (9007199254740992). */
const longDigits = /\d{16}/

/**
 * The integers of a JSON text (one row) that JavaScript rounds (beyond 2^53 − 1 in
 * magnitude, written with digits only), in document order; `[]` for a text without a run of
 * 16 digits (checked first, so that the common row costs one regular-expression scan) or
 * that is not valid JSON. Numbers written with a fraction or an exponent are not integers
 * as written and are not listed.
 *
 * @since 0.1.0
 * @category numbers
 */
export const unsafeIntegersOf = (text: string): ReadonlyArray<UnsafeInteger> => {
  if (!longDigits.test(text)) return []
  let parsed: unknown
  try {
    parsed = parseLossless(text)
  } catch {
    return []
  }
  const out: Array<UnsafeInteger> = []
  const visit = (v: unknown, at: string): void => {
    if (isLosslessNumber(v)) {
      if (/^-?\d+$/.test(v.value) && !Number.isSafeInteger(Number(v.value))) {
        out.push({ path: at === "" ? "(row)" : at, text: v.value, rounded: String(Number(v.value)) })
      }
    } else if (Array.isArray(v)) v.forEach((x, i) => visit(x, `${at}[${i}]`))
    else if (typeof v === "object" && v !== null) {
      for (const [k, x] of Object.entries(v)) visit(x, /^[A-Za-z_$][\w$]*$/.test(k) ? (at === "" ? k : `${at}.${k}`) : `${at}[${JSON.stringify(k)}]`)
    }
  }
  visit(parsed, "")
  return out
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
 * `line` number (in the file), and its `text` as written (for keys kept exactly, see
 * {@link keyOfLine}).
 *
 * @since 0.1.0
 * @category models
 */
export interface JsonlRow {
  readonly row: number
  readonly line: number
  readonly value: unknown
  readonly text: string
}

/**
 * A row of a keyed source: a {@link JsonlRow} and its pipeline `key` ({@link keyOfLine}).
 *
 * @since 0.1.0
 * @category models
 */
export interface KeyedRow extends JsonlRow {
  readonly key: string
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
  jsonlLines(path, options).pipe(
    Stream.mapEffect(({ line, row, text }) =>
      Effect.try({
        try: (): JsonlRow => ({ row, line, value: JSON.parse(text) as unknown, text }),
        catch: (e) =>
          new SourceError({
            path,
            line,
            message: `line ${line} is not valid JSON: ${e instanceof Error ? e.message : String(e)}`
          })
      })
    )
  )

/**
 * The non-blank lines of a file with their 1-based `row` (non-blank lines) and `line`
 * numbers, unparsed (lazy, chunked like {@link jsonlRows}).
 */
const jsonlLines = (
  path: string,
  options: { readonly chunkSize?: number | undefined }
): Stream.Stream<{ readonly row: number; readonly line: number; readonly text: string }, SourceError, FileSystem.FileSystem> =>
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
    Stream.map(([[text, index], row]) => ({ row: row + 1, line: index + 1, text }))
  )

/**
 * Keys a row stream ({@link keyOfLine}: numbers as written) and fails it at the first row
 * without a usable key under `keyField` or whose key an earlier row already had
 * ({@link missingKeyError} / {@link duplicateKeyError}; a message names a key exactly as the
 * file writes it). Keeps one map entry (key → first line) per row passed.
 *
 * @since 0.1.0
 * @category keys
 */
export const checkKeys = <E, R>(
  path: string,
  keyField: string,
  rows: Stream.Stream<JsonlRow, E, R>,
  hint?: (fields: ReadonlyArray<string>) => string | undefined
): Stream.Stream<KeyedRow, E | ConfigError, R> =>
  Stream.suspend(() => {
    const check = keyChecker(path, keyField, hint)
    return Stream.mapEffect(rows, (r) => {
      const key = check(r)
      return Either.isLeft(key)
        ? Effect.fail(key.left)
        : Effect.succeed<KeyedRow>({ row: r.row, line: r.line, value: r.value, text: r.text, key: key.right })
    })
  })

/** A stateful per-row key check (one map entry per key seen): the key, or the error of a missing or repeated key. */
const keyChecker = (
  path: string,
  keyField: string,
  hint?: (fields: ReadonlyArray<string>) => string | undefined
) => {
  const seen = new Map<string, number>()
  return (r: JsonlRow): Either.Either<string, ConfigError> => {
    const key = keyOfLine(r.value, r.text, keyField)
    if (Either.isLeft(key)) {
      const fields = typeof r.value === "object" && r.value !== null && !Array.isArray(r.value) ? Object.keys(r.value) : []
      return Either.left(missingKeyError(path, r.row, r.line, key.left, hint?.(fields)))
    }
    const first = seen.get(key.right)
    if (first !== undefined) return Either.left(duplicateKeyError(path, key.right, first, r.line))
    seen.set(key.right, r.line)
    return Either.right(key.right)
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
  if (options.keyField !== undefined) {
    return Stream.map(jsonlKeyedRows(path, { ...options, keyField: options.keyField }), (r) => r.value)
  }
  const values = Stream.map(jsonlRows(path, { chunkSize: options.chunkSize }), (r) => r.value)
  return limit === undefined ? values : Stream.take(values, limit)
}

/**
 * The rows of a JSON Lines file keyed by `keyField` (as written in the file, see
 * {@link keyOfLine}), lazily and with `limit` and `chunkSize` as in {@link jsonlSource}. Fails
 * like {@link jsonlSource} with a `keyField`: `SourceError` for an unreadable file or line,
 * `ConfigError` (path `source.keyField`) at a row without a key or repeating a key.
 *
 * @since 0.1.0
 * @category sources
 */
export const jsonlKeyedRows = (
  path: string,
  options: JsonlSourceOptions & { readonly keyField: string }
): Stream.Stream<KeyedRow, SourceError | ConfigError, FileSystem.FileSystem> => {
  const limit = options.limit
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 0)) {
    return Stream.fail(new SourceError({ path, message: `limit must be an integer >= 0, got ${limit}` }))
  }
  if (limit === 0) return Stream.empty
  const rows = checkKeys(path, options.keyField, jsonlRows(path, { chunkSize: options.chunkSize }))
  return limit === undefined ? rows : Stream.take(rows, limit)
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
 * An integer beyond 2^53 found by {@link scanSource}: {@link UnsafeInteger} and the `row` and
 * `line` (1-based) it is on.
 *
 * @since 0.1.0
 * @category models
 */
export interface UnsafeIntegerAt extends UnsafeInteger {
  readonly row: number
  readonly line: number
}

/**
 * What {@link scanSource} read: {@link KeyScan} (`rows`, `complete`), and the integers beyond
 * 2^53 it found: `unsafeRows` rows hold some, the first {@link UNSAFE_INTEGERS_LISTED} of them
 * are listed in `unsafeIntegers` (one entry per integer of those rows).
 *
 * @since 0.1.0
 * @category models
 */
export interface SourceScan extends KeyScan {
  readonly unsafeRows: number
  readonly unsafeIntegers: ReadonlyArray<UnsafeIntegerAt>
}

/**
 * How many rows with integers beyond 2^53 {@link scanSource} lists (the rest are counted): 3.
 *
 * @since 0.1.0
 * @category constants
 */
export const UNSAFE_INTEGERS_LISTED = 3

/**
 * Reads at most `maxRows` rows of a JSON Lines file before a run (what `assay validate` and
 * the start of `assay run` do; streaming, so only that much of the file is read):
 *
 * - with a `keyField`, checks the keys like {@link checkKeys} (fails with `ConfigError`, path
 *   `source.keyField`, at the first row without a key or with a repeated key; `hint(fields)`
 *   may add a did-you-mean to a missing-field message) and fails with {@link SourceError} for
 *   an unreadable file or an invalid JSON line;
 * - in every row, finds the integers beyond 2^53 ({@link unsafeIntegersOf}), which tasks
 *   receive rounded. Without a `keyField` the rows are not parsed (an invalid line is the
 *   run's to report) and only lines with 16 digits in a row are looked at.
 *
 * @since 0.1.0
 * @category sources
 */
export const scanSource = (
  path: string,
  options: {
    readonly keyField?: string | undefined
    readonly maxRows: number
    readonly hint?: ((fields: ReadonlyArray<string>) => string | undefined) | undefined
  }
): Effect.Effect<SourceScan, SourceError | ConfigError, FileSystem.FileSystem> =>
  Effect.suspend(() => {
    const keyField = options.keyField
    const check = keyField === undefined ? undefined : keyChecker(path, keyField, options.hint)
    const found: Array<UnsafeIntegerAt> = []
    let unsafeRows = 0
    const look = (row: number, line: number, text: string) => {
      const unsafe = unsafeIntegersOf(text)
      if (unsafe.length === 0) return
      unsafeRows++
      if (unsafeRows <= UNSAFE_INTEGERS_LISTED) for (const u of unsafe) found.push({ ...u, row, line })
    }
    // one row past the bound (read, not checked) tells whether the file was read to its end
    const counted = check === undefined
      ? jsonlLines(path, {}).pipe(
        Stream.take(options.maxRows + 1),
        Stream.tap((r) => Effect.sync(() => (r.row <= options.maxRows ? look(r.row, r.line, r.text) : undefined))),
        Stream.runCount
      )
      : jsonlRows(path).pipe(
        Stream.take(options.maxRows + 1),
        Stream.mapEffect((r) => {
          if (r.row > options.maxRows) return Effect.void
          look(r.row, r.line, r.text)
          const key = check(r)
          return Either.isLeft(key) ? Effect.fail(key.left) : Effect.void
        }),
        Stream.runCount
      )
    return Effect.map(counted, (n): SourceScan => ({
      rows: Math.min(n, options.maxRows),
      complete: n <= options.maxRows,
      unsafeRows,
      unsafeIntegers: found
    }))
  })

/**
 * Checks the keys of a JSON Lines file before a run: {@link scanSource} with a `keyField`,
 * returning what was read (`rows`, and whether that was the `complete` file).
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
  Effect.map(scanSource(path, { ...options, keyField }), (s) => ({ rows: s.rows, complete: s.complete }))

/**
 * The one-line warning about integers beyond 2^53 in a source (what `validate` and `run`
 * print on stderr before anything runs), or `undefined` when the scan found none:
 * `warning: rows.jsonl line 1: id is 1311112222333344445, an integer beyond 2^53: tasks
 * receive it rounded to 1311112222333344500 …`.
 *
 * @since 0.1.0
 * @category numbers
 */
export const unsafeIntegersWarning = (path: string, scan: SourceScan, keyField: string | undefined): string | undefined => {
  if (scan.unsafeRows === 0) return undefined
  const file = nodePath.basename(path)
  const first = scan.unsafeIntegers[0]!
  const more = scan.unsafeRows - new Set(scan.unsafeIntegers.map((u) => u.line)).size
  const others = scan.unsafeIntegers.slice(1).map((u) => `line ${u.line} ${u.path}`)
  const key = keyField !== undefined && first.path === keyField
    ? " (the pipeline key keeps it as written)"
    : ""
  return `warning: ${file} line ${first.line}: ${first.path} is ${first.text}, an integer beyond 2^53: ` +
    `tasks receive it rounded to ${first.rounded}${key}; write it as a string ("${first.text}") to keep it exact` +
    (others.length > 0 ? `; also ${others.join(", ")}` : "") +
    (more > 0 ? ` and ${more} more row${more === 1 ? "" : "s"}` : "") +
    (scan.complete ? "" : ` (in the first ${scan.rows} rows read)`)
}
