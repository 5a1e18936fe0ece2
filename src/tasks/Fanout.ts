/**
 * `fanout`: several tasks run concurrently on the same input inside one task, so one
 * checkpoint. This is how a pipeline expresses a branching step (three judges scoring the
 * same answer) without becoming a graph.
 *
 * Three consequences, all deliberate:
 *
 * - **Retry is group-level.** One failed branch fails the group (with `onError: "raise"`) and
 *   a retry re-runs every branch. The children's own policies do not apply per branch; the
 *   group uses `mostPermissiveRetry` of them unless `retry` is given.
 * - **Branches share the parent's context**: their leases and events are recorded under the
 *   fanout task, one complete record per step.
 * - **The runner sees only the group**, so `resource`, `algorithm` and `timeout` are taken
 *   from the children only when every child declares the same value (else left unset).
 *   Each branch still acquires from its own declared pool with its own algorithm by default.
 *
 * The trade-off: a resume after a failure re-sends every branch. When one branch is
 * expensive, make it a task of its own.
 *
 * @since 0.1.0
 */

// The implementation is in internal/fanout.ts; this module is the public surface
// (what `import { Fanout } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  fanout
} from "./internal/fanout.js"
export type {
  BranchFailure,
  Branches,
  CollectedOutputOf,
  FanoutOptions,
  HandoffErrorOf,
  InputOf,
  OnError,
  OutputOf
} from "./internal/fanout.js"
