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

const marked = new WeakSet<object>()

/**
 * Marks `run` as the body of a synchronous task; returns it.
 *
 * @internal
 */
export const markSync = <F extends object>(run: F): F => {
  marked.add(run)
  return run
}

/**
 * Whether `run` is the body of a synchronous task built by `Task.sync`.
 *
 * @internal
 */
export const isSyncRun = (run: object): boolean => marked.has(run)
