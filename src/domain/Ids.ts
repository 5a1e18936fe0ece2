/**
 * The two identities the store is keyed by, as branded strings: a {@link RunId} names one run,
 * a {@link PipelineId} names one pipeline. Both are plain strings at runtime (the brand exists
 * only for the type checker and costs nothing), so records read from SQLite or JSON carry them
 * without any per-row conversion; what the brand buys is that a pipeline id can no longer be
 * passed where a run id is expected, or the other way round (test/domain/Ids.test.ts holds
 * the `@ts-expect-error` lines that prove it).
 *
 * Where ids come from:
 *
 * - inside assay they are made once, where the id is chosen (the runner for a run id, the
 *   pipeline binder for a pipeline id) and then travel typed;
 * - at a boundary (a CLI flag, a config file, a query parameter) a plain string is branded by
 *   decoding it with the Schema (`Schema.decodeUnknown(RunId)`, or a Schema field of type
 *   `RunId`), which checks that it is a string and nothing more;
 * - rows the store wrote itself are cast by the hand-written row mappers (no validation: the
 *   store only ever wrote branded ids).
 *
 * @since 0.3.0
 */
import { Schema } from "effect"

/**
 * The id of one run: chosen by the runner when a run starts (the UTC start time and 8 hex
 * digits of a digest, e.g. `20261130T192600Z-1a2b3c4d`) or by the user (`run.runId` in the
 * config, `--run-id` on the command line). Any string is a valid run id; the brand only keeps
 * it apart from a {@link PipelineId} and other strings in signatures.
 *
 * `RunId.make("r1")` brands a string (it checks only that it is a string); use it for ids a
 * program builds itself (tests, examples). Decode user input with the Schema instead.
 *
 * @since 0.3.0
 * @category schemas
 */
export const RunId = Schema.String.pipe(Schema.brand("assay/RunId")).annotations({
  identifier: "RunId",
  description: "the id of a run (chosen by the runner or by the user)"
})

/**
 * A run id: a string branded `"assay/RunId"` (see {@link RunId}).
 *
 * @since 0.3.0
 * @category models
 */
export type RunId = typeof RunId.Type

/**
 * The id of one pipeline: the content address `digest([specDigest, seedDigest, repeat])` of
 * its definition, its seed and its sample number (see `Pipeline.defaultPipelineId`), or the
 * explicit key the pipeline was bound with (`keyOf`, `Pipeline.bind(..., { key })`). It is the
 * primary key of the store's pipelines and stays the same across runs, which is what resume
 * matches on. Any non-empty string is a valid pipeline id; the brand only keeps it apart from
 * a {@link RunId} and other strings in signatures.
 *
 * `PipelineId.make("p1")` brands a string (it checks only that it is a string); use it for ids
 * a program builds itself (tests, examples). Decode user input with the Schema instead.
 *
 * @since 0.3.0
 * @category schemas
 */
export const PipelineId = Schema.String.pipe(Schema.brand("assay/PipelineId")).annotations({
  identifier: "PipelineId",
  description: "the id of a pipeline (content-addressed from its spec and seed digests, or its explicit key)"
})

/**
 * A pipeline id: a string branded `"assay/PipelineId"` (see {@link PipelineId}).
 *
 * @since 0.3.0
 * @category models
 */
export type PipelineId = typeof PipelineId.Type
