/**
 * Which task bodies run synchronously: the `run` functions that `Task.sync` builds from a plain
 * function. Keyed by the function, so a copy of a task that keeps its `run` keeps the mark, and
 * one whose `run` is replaced loses it.
 *
 * The runner reads it to commit the checkpoints of consecutive synchronous tasks together
 * (see `runner/pipeline.ts`).
 *
 * @internal
 */
import type { Exit } from "effect"

const marked = new WeakMap<object, SyncBody>()

/**
 * A synchronous task body evaluated directly: the exit its `run` Effect would end with (a
 * thrown value as a failure carrying it unchanged, the task's own failure for a returned
 * Promise). The runner calls it instead of running the Effect when nothing else (a timeout, a
 * budget, a span, the cache) wraps the attempt.
 *
 * @internal
 */
export type SyncBody = (input: unknown, ctx: never) => Exit.Exit<unknown, unknown>

/**
 * Marks `run` as the body of a synchronous task, evaluated directly by `direct`; returns `run`.
 *
 * @internal
 */
export const markSync = <F extends object>(run: F, direct: SyncBody): F => {
  marked.set(run, direct)
  return run
}

/**
 * Whether `run` is the body of a synchronous task built by `Task.sync`.
 *
 * @internal
 */
export const isSyncRun = (run: object): boolean => marked.has(run)

/**
 * The direct evaluation of a synchronous task's `run` (see {@link SyncBody}), or `undefined`.
 *
 * @internal
 */
export const syncBodyOf = (run: object): SyncBody | undefined => marked.get(run)

const effectBodies = new WeakMap<object, EffectBody>()

/**
 * The function an Effect task's `run` suspends (`Task.make`): called directly, it returns the
 * Effect that `run` would run (a throw being a defect of the attempt either way).
 *
 * @internal
 */
export type EffectBody = (input: unknown, ctx: never) => unknown

/**
 * Marks `run` as `Effect.suspend` of `body` (`Task.make`); returns `run`. The runner's attempt
 * calls `body` itself when it already guards the call (see `runner/attemptScope.ts`,
 * `attemptExit`), one fiber step less per attempt.
 *
 * @internal
 */
export const markEffectBody = <F extends object>(run: F, body: EffectBody): F => {
  effectBodies.set(run, body)
  return run
}

/**
 * The function `run` suspends (see {@link markEffectBody}), or `undefined`.
 *
 * @internal
 */
export const effectBodyOf = (run: object): EffectBody | undefined => effectBodies.get(run)
