/**
 * Merging the stores of several shards (or several runs) into one coherent answer.
 *
 * Pipelines are deduplicated by id: the best state wins (`succeeded` > `failed` >
 * `interrupted` > `running` / `pending`), the latest finish (`endedAt`, then `updatedAt`)
 * breaks ties, and the first source wins a complete tie. Work counts (`pipelines`, `tasks`,
 * `attemptsTotal`) are recounted from the surviving rows, so merging is idempotent: the same
 * store given twice, or one pipeline present in two shards, counts once. `sourceEventsTotal`
 * is deliberately the raw sum of each source's event count: events are not attached to a
 * pipeline row, so nothing tells which copy owns an event.
 *
 * The surviving rows are kept in memory (dedupe needs every pipeline's winner); events are
 * only counted.
 *
 * @since 0.1.0
 */

// The implementation is in internal/merge.ts; this module is the public surface
// (what `import { Merge } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  mergeReports,
  mergeSources
} from "./internal/merge.js"
export type {
  MergeSource,
  MergedReport,
  MergedRow,
  MergedStats
} from "./internal/merge.js"
