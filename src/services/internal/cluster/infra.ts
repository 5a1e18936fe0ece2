/**
 * Riding out a lost database connection in the cluster engine's own calls into
 * `@effect/cluster` (research/distributed.md L5): the cluster's SQL storage fails, or dies,
 * with a `PersistenceError` wrapping an `SqlError` while Postgres restarts or fails over, and
 * several of the library's paths turn that into a defect (`Effect.orDie`). A call that the
 * library makes idempotent (a persisted request keyed by its primary key: a workflow start,
 * an activity of a workflow) can be made again once the database is back; this module says
 * which errors mean "the database went away" and retries on them.
 *
 * @internal
 */
import { Duration, Effect, Option, Schedule } from "effect"

/**
 * Whether a failure or a defect of the cluster's storage (a `PersistenceError` wrapping an
 * `SqlError`, or the bare `SqlError`) is a lost or refused connection: a database restarting
 * or failing over. Read down the `cause` chain (four levels): SQLSTATE classes `08`
 * (connection exception) and `57P` (operator intervention: shutdown, crash), a Node socket
 * code (`ECONNREFUSED`, `ECONNRESET`, ...), or the driver's words for the same.
 *
 * @internal
 */
export const isConnectionLoss = (e: unknown): boolean => {
  let inner: unknown = e
  for (let i = 0; i < 4 && inner !== undefined && inner !== null; i++) {
    const code = (inner as { code?: unknown }).code
    if (typeof code === "string" && (code.startsWith("08") || code.startsWith("57P") || /^E[A-Z]+$/.test(code))) return true
    const message = (inner as { message?: unknown }).message
    if (
      typeof message === "string" &&
      /connection terminated|connection error|failed to connect|not queryable|ECONNREFUSED|ECONNRESET|terminating connection|shutting down/i
        .test(message)
    ) return true
    inner = (inner as { cause?: unknown }).cause
  }
  return false
}

/**
 * The default budget of {@link ridingOut}: exponential from 200 ms, each wait at most 5 s,
 * for `budget` in all (default 2 minutes, as the activity's own L5 schedule: a Postgres
 * restart or failover takes seconds to tens of seconds).
 *
 * @internal
 */
export const ridingOutSchedule = (budget: Duration.DurationInput = Duration.minutes(2)): Schedule.Schedule<unknown, unknown> =>
  Schedule.exponential(Duration.millis(200), 2).pipe(
    Schedule.modifyDelay((d) => Duration.min(d, Duration.seconds(5))),
    Schedule.upTo(budget)
  )

/**
 * `self`, tried again while it fails or dies with a lost connection ({@link isConnectionLoss}),
 * on `schedule` (default {@link ridingOutSchedule}); anything else, or a loss that outlasts the
 * schedule, is what it was (a defect stays a defect). Only for calls that are safe to make
 * again: the cluster deduplicates persisted requests by primary key.
 *
 * @internal
 */
export const ridingOut = <A, E, R>(
  self: Effect.Effect<A, E, R>,
  schedule: Schedule.Schedule<unknown, unknown> = ridingOutSchedule()
): Effect.Effect<A, E, R> => {
  // a defect travels as a failure through the retry (tagged, so that it dies again after)
  const lifted = Effect.catchSomeDefect(
    Effect.mapError(self, (e): Lost<E> => ({ _tag: "Failed", error: e })),
    (d) => isConnectionLoss(d) ? Option.some(Effect.fail<Lost<E>>({ _tag: "Died", defect: d })) : Option.none()
  )
  return lifted.pipe(
    Effect.retry(Schedule.whileInput(schedule, (l: Lost<E>) => isConnectionLoss(l._tag === "Died" ? l.defect : l.error))),
    Effect.catchAll((l) => l._tag === "Died" ? Effect.die(l.defect) : Effect.fail(l.error))
  )
}

type Lost<E> = { readonly _tag: "Failed"; readonly error: E } | { readonly _tag: "Died"; readonly defect: unknown }
