/**
 * Short branders for ids written as literals in tests: `rid("r1")` is `RunId.make("r1")`,
 * `pid("p1")` is `PipelineId.make("p1")` (see src/domain/Ids.ts).
 */
import { PipelineId, RunId } from "../../src/domain/Ids.js"

/** A run id from a literal. */
export const rid = (id: string): RunId => RunId.make(id)

/** A pipeline id from a literal. */
export const pid = (id: string): PipelineId => PipelineId.make(id)
