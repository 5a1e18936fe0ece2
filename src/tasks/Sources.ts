/**
 * Seed sources: where a run's rows come from. `rangeSource(n)` yields `0 .. n-1`;
 * `jsonlSource(path, { limit })` streams a JSON Lines file lazily (one row per non-blank
 * line), reading only as far as the consumer pulls.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Schema, Stream } from "effect"

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
}

/**
 * Streams a JSON Lines file: each non-blank line is parsed as JSON and emitted as one seed.
 * Lazy: the file is read in chunks (64 KiB by default) as the consumer pulls, and reading
 * stops once `limit` rows have been emitted, so a large file is never read whole. Fails with
 * {@link SourceError} for an unreadable file or an invalid line (with its 1-based number).
 *
 * @since 0.1.0
 * @category sources
 */
export const jsonlSource = (
  path: string,
  options: JsonlSourceOptions = {}
): Stream.Stream<unknown, SourceError, FileSystem.FileSystem> => {
  const limit = options.limit
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 0)) {
    return Stream.fail(new SourceError({ path, message: `limit must be an integer >= 0, got ${limit}` }))
  }
  if (limit === 0) return Stream.empty
  const lines = Stream.unwrap(
    Effect.map(FileSystem.FileSystem, (fs) =>
      fs.stream(path, { chunkSize: FileSystem.KiB(options.chunkSize === undefined ? 64 : options.chunkSize / 1024) })
    )
  ).pipe(
    Stream.mapError((e) => new SourceError({ path, message: e.message })),
    Stream.decodeText(),
    Stream.splitLines,
    Stream.zipWithIndex,
    Stream.filter(([line]) => line.trim() !== ""),
    Stream.mapEffect(([line, index]) =>
      Effect.try({
        try: () => JSON.parse(line) as unknown,
        catch: (e) =>
          new SourceError({
            path,
            line: index + 1,
            message: `line ${index + 1} is not valid JSON: ${e instanceof Error ? e.message : String(e)}`
          })
      })
    )
  )
  return limit === undefined ? lines : Stream.take(lines, limit)
}
