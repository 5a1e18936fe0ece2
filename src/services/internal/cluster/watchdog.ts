/**
 * The two watchdogs of `assay runner` (docs/scale-out.md, "Supervising runners"), timed by
 * `Clock` so that tests drive them with `TestClock`:
 *
 * - {@link databaseLost}: the database has not answered for `lostAfter` → `StoreUnavailable`;
 * - {@link shardsStalled}: a message of this runner's shards stayed unread a whole
 *   `stallAfter` period → `ShardsStalled`.
 *
 * Either failure ends the runner with exit 1, for its supervisor to restart it. Their
 * durations come from the environment ({@link settingsFromEnv}).
 *
 * @internal
 */
import { Config, Data, Duration, Effect, Either, Option } from "effect"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"

/**
 * The stalled-shard watchdog's verdict: messages on this runner's shards stayed unread for a
 * whole check period.
 *
 * @internal
 */
export class ShardsStalled extends Data.TaggedError("ShardsStalled")<{ readonly message: string }> {}

/** The watchdogs' durations. */
export interface WatchdogSettings {
  /** How long the database may stay unreachable before the runner gives up (default 90 s). */
  readonly lostAfter: Duration.Duration
  /** How often the database is pinged (default 10 s, at most a third of `lostAfter`). */
  readonly pingEvery: Duration.Duration
  /** The stalled-shard check period (default 3 minutes). */
  readonly stallAfter: Duration.Duration
}

/** The environment variables that set {@link WatchdogSettings}. */
export const ENV = { lostAfter: "ASSAY_RUNNER_DB_LOST_AFTER", stallAfter: "ASSAY_RUNNER_STALL_AFTER" } as const

/** The defaults: 90 s without the database, a 3-minute stall period. */
export const defaults = { lostAfter: Duration.seconds(90), stallAfter: Duration.minutes(3) } as const

/** `pingEvery` for a given `lostAfter`: 10 s, or a third of `lostAfter` when that is shorter. */
export const settings = (lostAfter: Duration.Duration, stallAfter: Duration.Duration): WatchdogSettings => ({
  lostAfter,
  stallAfter,
  pingEvery: Duration.min(Duration.seconds(10), Duration.millis(Math.max(1, Duration.toMillis(lostAfter) / 3)))
})

const positive = (name: string) =>
  Config.duration(name).pipe(
    Config.validate({ message: "must be a positive duration, e.g. \"90 seconds\"", validation: (d) => Duration.toMillis(d) > 0 }),
    Config.option
  )

/**
 * Reads {@link ENV} (durations such as `"30 seconds"`); a variable left unset takes its
 * default. An invalid value fails with `ConfigError` naming the variable (exit 2).
 */
export const settingsFromEnv: Effect.Effect<WatchdogSettings, ConfigError> = Effect.gen(function*() {
  const read = (name: string, fallback: Duration.Duration) =>
    Effect.flatMap(Effect.either(positive(name)), (r) =>
      Either.isRight(r)
        ? Effect.succeed(Option.getOrElse(r.right, () => fallback))
        : Effect.fail(
          new ConfigError({
            message: `${name}: must be a positive duration with a unit, e.g. "90 seconds"`,
            issues: [{ path: name, message: "must be a positive duration with a unit, e.g. \"90 seconds\"" }]
          })
        ))
  const lostAfter = yield* read(ENV.lostAfter, defaults.lostAfter)
  const stallAfter = yield* read(ENV.stallAfter, defaults.stallAfter)
  return settings(lostAfter, stallAfter)
})

/**
 * Pings the database every `pingEvery` (each ping bounded by `pingEvery` too); fails with
 * `StoreUnavailable` once no ping has succeeded for `lostAfter`. `ping` succeeds when the
 * database answered; `describe` names it in the message (without a password).
 */
export const databaseLost = <E, R>(
  ping: Effect.Effect<unknown, E, R>,
  s: WatchdogSettings,
  describe: string
): Effect.Effect<never, StoreUnavailable, R> =>
  Effect.gen(function*() {
    let lastOk = yield* Effect.clockWith((c) => c.currentTimeMillis)
    while (true) {
      yield* Effect.sleep(s.pingEvery)
      const ok = yield* ping.pipe(Effect.timeout(s.pingEvery), Effect.as(true), Effect.orElseSucceed(() => false))
      const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
      if (ok) lastOk = now
      else if (now - lastOk >= Duration.toMillis(s.lostAfter)) {
        return yield* new StoreUnavailable({
          message: `runner: the cluster database ${describe} has not answered for ${
            Math.round((now - lastOk) / 1000)
          } s; stopping (exit 1) so that a supervisor restarts this runner`,
          path: describe
        })
      }
    }
  })

/**
 * Every `stallAfter`, lists the unread deliverable messages of the shards this runner holds
 * (`unread`: their ids, empty when it holds none or the read fails); fails with
 * `ShardsStalled` when one of them was already on the previous list (it waited a whole
 * period unread).
 */
export const shardsStalled = <R>(
  unread: Effect.Effect<{ readonly shards: number; readonly ids: ReadonlyArray<string> }, never, R>,
  s: WatchdogSettings
): Effect.Effect<never, ShardsStalled, R> =>
  Effect.gen(function*() {
    let previous = new Set<string>()
    while (true) {
      yield* Effect.sleep(s.stallAfter)
      const { ids, shards } = yield* unread
      const waited = ids.filter((id) => previous.has(id))
      if (waited.length > 0) {
        return yield* new ShardsStalled({
          message: `runner: ${waited.length} message(s) on this runner's ${shards} shard(s) waited more than ${
            Duration.format(s.stallAfter)
          } unread; stopping (exit 1) so that a supervisor restarts this runner and its shards move`
        })
      }
      previous = new Set(ids)
    }
  })
