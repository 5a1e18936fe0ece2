/**
 * Riding out a lost database connection (or a cancelled statement) in the cluster engine's own calls into
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
import { StoreUnavailable } from "../../../domain/Errors.js"

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
 * Whether a failure or a defect of the cluster's storage is a statement the server cancelled
 * (SQLSTATE `57014`, "canceling statement due to user request") or picked as a deadlock or
 * serialization victim (`40P01`, `40001`): nothing of it was written, and the same statement
 * made again is expected to go through. Read down the `cause` chain (four levels).
 *
 * Where a cancel comes from with nothing cancelled on purpose: `@effect/sql-pg` cancels the
 * statement of an interrupted fiber with `pg_cancel_backend(pid)`, best effort, on another
 * connection. When the interrupted statement finishes first, its connection goes back to the
 * pool while the cancel is still on its way, and the cancel then hits whatever statement the
 * next borrower of that connection runs: any statement of the process (the cluster's own
 * storage included) can fail with `57014` under interruptions elsewhere. `@effect/cluster`
 * 0.60 dies on such a `PersistenceError` in a workflow (`activityExecute`'s `Effect.orDie`),
 * which ended a pipeline with a defect (pg17j's bench, 1 of 2,000).
 *
 * @internal
 */
export const isCancelledStatement = (e: unknown): boolean => {
  let inner: unknown = e
  for (let i = 0; i < 4 && inner !== undefined && inner !== null; i++) {
    const code = (inner as { code?: unknown }).code
    if (code === "57014" || code === "40P01" || code === "40001") return true
    const message = (inner as { message?: unknown }).message
    if (typeof message === "string" && /canceling statement due to/i.test(message)) return true
    inner = (inner as { cause?: unknown }).cause
  }
  return false
}

/**
 * What {@link ridingOut} tries again: a lost connection ({@link isConnectionLoss}) or a
 * statement cancelled or picked as a victim ({@link isCancelledStatement}).
 *
 * @internal
 */
export const isTransient = (e: unknown): boolean => isConnectionLoss(e) || isCancelledStatement(e)

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
 * `self`, tried again while it fails or dies with a lost connection ({@link isConnectionLoss})
 * or a cancelled statement ({@link isCancelledStatement}),
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
    (d) => isTransient(d) ? Option.some(Effect.fail<Lost<E>>({ _tag: "Died", defect: d })) : Option.none()
  )
  return lifted.pipe(
    Effect.retry(Schedule.whileInput(schedule, (l: Lost<E>) => isTransient(l._tag === "Died" ? l.defect : l.error))),
    Effect.catchAll((l) => l._tag === "Died" ? Effect.die(l.defect) : Effect.fail(l.error))
  )
}

type Lost<E> = { readonly _tag: "Failed"; readonly error: E } | { readonly _tag: "Died"; readonly defect: unknown }

/**
 * {@link ridingOut} for the engine's own calls into the cluster (a workflow's activity
 * requests, the submitter's starts and polls): a lost connection or a cancelled statement is
 * tried again on `schedule`, and one that outlasts it fails with a typed
 * {@link StoreUnavailable} instead of dying (in a workflow, its declared error: the pipeline
 * is failed on the store's error and can be resumed; in the submitter, an error the CLI
 * reports): a defect of the cluster's storage never ends them as a bug. Its message is
 * `message(cause)` (default: "the cluster's storage failed: " and the innermost message). Any
 * other defect stays one (a bug).
 *
 * @internal
 */
export const ridingOutTyped = <A, E, R>(
  self: Effect.Effect<A, E, R>,
  schedule: Schedule.Schedule<unknown, unknown> = ridingOutSchedule(),
  message: (cause: string) => string = (cause) => `the cluster's storage failed: ${cause}`
): Effect.Effect<A, E | StoreUnavailable, R> =>
  Effect.catchSomeDefect(
    ridingOut(self, schedule),
    (d) =>
      isTransient(d)
        ? Option.some(Effect.fail(new StoreUnavailable({ message: message(messageOf(d)), cause: d })))
        : Option.none()
  )

/** The innermost message of a cause chain (four levels). */
const messageOf = (e: unknown): string => {
  let inner: unknown = e
  let found = String(e)
  for (let i = 0; i < 4 && inner !== undefined && inner !== null; i++) {
    const message = (inner as { message?: unknown }).message
    if (typeof message === "string" && message.length > 0) found = message
    inner = (inner as { cause?: unknown }).cause
  }
  return found
}
