/**
 * The call cache of a `fanout` branch (fix18e; tester18f/fix18c: a judge inside a fanout was
 * never cached). A fanout runs its branches itself, inside its own attempt, so the runner's
 * cache around each attempt never sees them. When the run has a cache and the group has a
 * cacheable branch, the runner puts a {@link BranchCache} on the attempt's context under
 * {@link BranchCacheId}; the fanout runs each branch through it. It serves or stores the
 * branch's output under the key the branch would have as a task of its own at the group's
 * place (its `cacheKey`, or its fingerprint and input; the namespace of the pipeline's
 * repeat, the visit, the study variant), so a judge in a group and the same judge as a task
 * share their verdicts. Internal: not reachable from the package entry.
 *
 * @internal
 */
import type { Effect } from "effect"
import type * as Task from "../Task.js"
import type { TaskContext } from "../TaskContext.js"

/**
 * The key of the branch cache on an attempt's context (a symbol, so a task that spreads or
 * lists its context never sees it; read through the fanout's and the evaluator's proxies).
 *
 * @internal
 */
export const BranchCacheId: unique symbol = Symbol.for("assay/BranchCache")

/**
 * Runs one branch under the call cache: `child` is the branch's task, `input` the group's
 * input (as the runner gives it to a task: an evaluator's key is made from it redacted as
 * the runner redacts it), `run` the branch's own run. A stored, unexpired output is the
 * branch's value without running it (and the branch's `onCacheHit` is run); otherwise `run`
 * runs and its success is stored as the cache mode says. Fails as `run` fails.
 *
 * @internal
 */
export type BranchCache = <A, E, R>(child: Task.Any, input: unknown, run: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/**
 * The branch cache of a context (an attempt's, or a fanout branch's or an evaluator's proxy of
 * it), or `undefined` when the run has none for it (no cache, no cacheable branch, or a
 * context the runner did not make).
 *
 * @internal
 */
export const branchCacheOf = (ctx: TaskContext): BranchCache | undefined => {
  const f = (ctx as unknown as { readonly [BranchCacheId]?: unknown })[BranchCacheId]
  return typeof f === "function" ? (f as BranchCache) : undefined
}
