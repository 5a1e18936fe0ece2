/**
 * Seed sources: where a run's rows come from. `rangeSource(n)` yields `0 .. n-1`;
 * `jsonlSource(path, { limit })` streams a JSON Lines file lazily (one row per non-blank
 * line), reading only as far as the consumer pulls.
 *
 * **Numbers.** A row is parsed with `JSON.parse`, so its numbers are JavaScript numbers
 * (IEEE-754 doubles): an integer beyond 2^53 (`1311112222333344445`) is rounded
 * (`1311112222333344500`) in the row a task receives. A pipeline key taken from such a
 * number (`keyField`) is not rounded: `keyOfLine` reads the key as written in the line
 * (with `lossless-json`, only for the lines where the text and the number differ), so two
 * rows that differ only past the 16th digit keep two keys. `unsafeIntegersOf` finds
 * such integers in a line, for the warnings of `validate` and `run` (write them as strings to
 * keep them exact in the row too).
 *
 * @since 0.1.0
 */

// The implementation is in internal/sources.ts; this module is the public surface
// (what `import { Sources } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  SourceError,
  jsonlSource,
  rangeSource
} from "./internal/sources.js"
export type {
  JsonlRow,
  JsonlSourceOptions,
  KeyScan,
  KeyedRow,
  SourceScan,
  UnsafeInteger,
  UnsafeIntegerAt
} from "./internal/sources.js"
