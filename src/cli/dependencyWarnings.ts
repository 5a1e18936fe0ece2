/**
 * Warnings of pinned dependencies that say nothing to an assay user, dropped before Node prints
 * them; every other warning (and every other deprecation) is printed as usual.
 *
 * - pg 8.x: "Calling client.query() when the client is already executing a query is
 *   deprecated…". `@effect/cluster` 0.60's SQL runner storage (`SqlRunnerStorage`) sends its
 *   shard-lock statements on one reserved connection, several at a time, and pg 8 queues them
 *   in order on that connection (its documented behaviour through 8.x; the warning announces
 *   pg 9, which assay does not use: `@effect/sql-pg` is pinned). Every runner printed it once,
 *   on stderr, between its start lines (tester17af F12).
 *
 * @since 0.17.0
 */

/** The start of each dropped warning's message. */
const DROPPED: ReadonlyArray<string> = [
  "Calling client.query() when the client is already executing a query is deprecated"
]

let installed = false

/**
 * Wraps `process.emitWarning` once per process so that the warnings listed above are dropped;
 * idempotent. `util.deprecate` (how pg raises its deprecations) calls `process.emitWarning`, so
 * this catches them before Node's default printer.
 *
 * @since 0.17.0
 */
export const quietDependencyWarnings = (): void => {
  if (installed) return
  installed = true
  const emit = process.emitWarning
  process.emitWarning = function(this: NodeJS.Process, warning: string | Error, ...rest: Array<any>) {
    const message = typeof warning === "string" ? warning : warning?.message
    if (typeof message === "string" && DROPPED.some((d) => message.startsWith(d))) return
    return (emit as (...args: Array<any>) => void).call(this, warning, ...rest)
  } as typeof process.emitWarning
}
