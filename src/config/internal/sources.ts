/**
 * @internal
 *
 * The size of an experiment's source (the progress total and the run's `meta.total`).
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Stream } from "effect"

import type { SourceSpec } from "../Experiment.js"

/**
 * Rows of a keyed `jsonl` source that loading reads by default to check the keys: 100.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_HEAD_ROWS = 100

/**
 * Largest keyed `jsonl` file (bytes) that `scanKeys: "full"` reads whole: 50 MiB.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_FULL_MAX_BYTES = 50 * 1024 * 1024

/**
 * Rows that `scanKeys: "full"` reads of a keyed `jsonl` file larger than
 * {@link KEY_SCAN_FULL_MAX_BYTES}: 100 000.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_LARGE_ROWS = 100_000

// ---------------------------------------------------------------------------------------------
// Source size
// ---------------------------------------------------------------------------------------------

/**
 * Largest JSON Lines file (bytes) whose rows {@link sourceSize} counts when no limit bounds
 * the read: 64 MiB (one pass at disk speed, well under a second here).
 *
 * @since 0.1.0
 * @category constants
 */
export const COUNT_LINES_MAX_BYTES = 64 * 1024 * 1024

/**
 * The number of pipelines a source yields with an optional row `limit` (the CLI's
 * `--limit`), times `repeats`, when it is cheap to know:
 *
 * - `range`: `min(n, limit) × repeats`;
 * - `jsonl`: the non-blank lines are counted in one streaming pass that stops at the
 *   effective limit (`min(limit, source.limit)`), so a bounded count reads only that many
 *   rows; without any limit the file is counted only when it is at most
 *   {@link COUNT_LINES_MAX_BYTES}, else `undefined`. An unreadable file gives `undefined`
 *   (the run itself reports the error).
 *
 * Never fails. Used as the progress total and recorded as the run's `meta.total` (the ETA
 * of `serve` / `watch`).
 *
 * @since 0.1.0
 * @category loading
 */
export const sourceSize = (
  source: SourceSpec,
  limit?: number
): Effect.Effect<number | undefined, never, FileSystem.FileSystem> => {
  if (source.kind === "range") {
    return Effect.succeed(Math.max(0, Math.floor(limit === undefined ? source.n : Math.min(limit, source.n))) * source.repeats)
  }
  const bound = limit === undefined ? source.limit : Math.min(limit, source.limit ?? limit)
  return Effect.gen(function*() {
    if (bound === 0) return 0
    if (bound === undefined) {
      const fs = yield* FileSystem.FileSystem
      const info = yield* fs.stat(source.path)
      if (Number(info.size) > COUNT_LINES_MAX_BYTES) return undefined
    }
    const rows = yield* Stream.unwrap(Effect.map(FileSystem.FileSystem, (fs) => fs.stream(source.path))).pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.filter((line) => line.trim() !== ""),
      (s) => (bound === undefined ? s : Stream.take(s, bound)),
      Stream.runCount
    )
    return rows * source.repeats
  }).pipe(Effect.orElseSucceed(() => undefined))
}

