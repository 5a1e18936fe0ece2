/**
 * The submitter's watch on the runners (newuser37 F4): which runner left while windows of the
 * submission were in flight on it, and when that work ran again.
 *
 * A runner that stops answering keeps its windows for a while, and they wait. With advisory
 * shard locks (the default) its shards stay with it until its database session ends (at once
 * when its process died; for a host cut off, after the TCP keepalives) or, for a process paused
 * (SIGSTOP) or hung, until it answers again: no expiry bounds that; once the shards are free,
 * its windows' claims still expire first (`SHARD_LOCK_EXPIRATION` after its last renewal). With
 * lock rows (`SHARD_LOCK_DISABLE_ADVISORY`) its shard locks expire `SHARD_LOCK_EXPIRATION`
 * (@effect/cluster's `shardLockExpiration`, 35 s by default) after it last renewed them, whatever
 * the process does (break39 F4). Without a word the submitter looks hung for that long. The
 * watch tells, once per event:
 *
 * - `RunnerLeft`: a runner that was up left, either unregistered (stopped, marked unhealthy, its
 *   heartbeat expired: no longer among the healthy runners of the cluster's `RunnerStorage`) or
 *   no longer answering two pings in a row (`Runners.ping`, every `pingEvery`, when the
 *   cluster's `Runners` is in context): which runner, how many windows and pipelines of the
 *   submission it had in flight (by the shard assignment seen while it was up), and when they
 *   resume as far as the lock mode says it (lock rows: in about how long its shard locks
 *   expire, from the last time it answered);
 * - `RunnerResumed`: a pipeline of those windows ended after the leave: their work runs again
 *   (on the other runners, or on the same runner started again), and how long after the leave.
 *
 * A runner that left is told again only once it answered again (it came back, then left again).
 * The pings run in a fiber of their own (at most one round at a time): a runner that does not
 * answer never holds up the follow that calls {@link RunnerWatch.check}. A ping that times out is
 * counted unanswered at its timeout (break39 F4): its interruption goes on in the background
 * (`Effect.disconnect`), since against a runner that holds the connection open and never
 * answers (paused, hung) the RPC client's teardown does not end; such a runner is not pinged
 * again (counted unanswered) until that ping has ended.
 *
 * @internal
 */
import type * as Runner from "@effect/cluster/Runner"
import type * as RunnerAddress from "@effect/cluster/RunnerAddress"
import type * as Runners from "@effect/cluster/Runners"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { Duration, Effect, Fiber, Option } from "effect"
import type { PipelineId } from "../../../domain/Ids.js"

/**
 * A runner left while the submission had work on it (see the module's doc): `runner` as
 * `host:port`; `reason` `unregistered` (no longer among the cluster's healthy runners) or
 * `unanswered` (registered still, but two pings in a row got no answer); `windows` and
 * `pipelines` of this submission in flight on it; `resumeInMs`: about how long until its shard
 * locks (lock rows) or its windows' claims (advisory locks, a process that died) expire
 * (`unanswered`), `0` when they are released or expired already. With advisory locks a runner
 * paused or hung keeps its shards until it answers again or its database session ends: no
 * expiry bounds that wait (the module's doc; `message` says so).
 *
 * @internal
 */
export interface RunnerLeft {
  readonly _tag: "RunnerLeft"
  readonly runner: string
  readonly reason: "unregistered" | "unanswered"
  readonly windows: number
  readonly pipelines: number
  readonly resumeInMs: number
  readonly message: string
}

/**
 * The work of a runner that left ({@link RunnerLeft}) runs again: a pipeline of its windows ended
 * `afterMs` after the leave was told.
 *
 * @internal
 */
export interface RunnerResumed {
  readonly _tag: "RunnerResumed"
  readonly runner: string
  readonly afterMs: number
  readonly message: string
}

/** What {@link RunnerWatch.check} is given at each follow. */
export interface WatchInput {
  /** `Clock` ms. */
  readonly now: number
  /** The runners of the cluster's runner storage, as `getRunners` read them. */
  readonly runners: ReadonlyArray<readonly [Runner.Runner, boolean]>
  /** The shards' runners by these runners (`shardRunners`, by shard id - 1). */
  readonly assignment: ReadonlyArray<string>
  /** The windows with a pipeline still running. */
  readonly windows: Iterable<{ readonly executionId: string; readonly ids: ReadonlyArray<PipelineId> }>
  /** The pipelines still running. */
  readonly running: ReadonlySet<PipelineId>
  /** The runner (as in `assignment`) of a window's execution id by an assignment. */
  readonly runnerOf: (assignment: ReadonlyArray<string>, executionId: string) => string | undefined
}

/** @internal */
export interface RunnerWatch {
  /** The events seen since the last check (none most of the time). */
  readonly check: (input: WatchInput) => Effect.Effect<ReadonlyArray<RunnerLeft | RunnerResumed>>
  /** Whether the windows of a runner that left are still to be seen running again (check once more). */
  readonly waiting: () => boolean
}

/** Options of {@link make}. */
export interface WatchOptions {
  /** The cluster's `Runners` (pings); without it only unregistered runners are seen. */
  readonly runners: Option.Option<Runners.Runners["Type"]>
  /** The shard locks' expiration (`ShardingConfig.shardLockExpiration`). */
  readonly lockExpiration: Duration.DurationInput
  /** How often the runners are pinged (default 1 s). */
  readonly pingEvery?: Duration.DurationInput | undefined
  /** How long a ping may take before it counts as unanswered (default 3 s). */
  readonly pingTimeout?: Duration.DurationInput | undefined
  /**
   * Whether the shard locks are advisory locks (held by the runner's database session) rather
   * than rows that expire; default: the context's `ShardingConfig.shardLockDisableAdvisory`
   * negated, else `true` (@effect/cluster's default).
   */
  readonly advisoryLocks?: boolean | undefined
}

interface Known {
  readonly address: RunnerAddress.RunnerAddress
  /** Pings unanswered in a row. */
  misses: number
  /** When it last answered a ping, or was first seen (ms). */
  answeredAt: number
  /** When it was told to have left (ms), while it has not answered since. */
  leftAt: number | undefined
  /** A ping of it has not ended yet (timed out, its interruption still under way). */
  pinging: boolean
}

interface Pending {
  readonly runner: string
  readonly leftAt: number
  readonly ids: ReadonlyArray<PipelineId>
}

/** `host:port` of a runner's address. */
const hostPort = (address: RunnerAddress.RunnerAddress): string => `${address.host}:${address.port}`

/**
 * A watch over the runners for one submission (see the module's doc).
 *
 * @internal
 */
export const make = (options: WatchOptions): Effect.Effect<RunnerWatch> =>
  Effect.map(Effect.serviceOption(ShardingConfig.ShardingConfig), (config) => {
    const advisory = options.advisoryLocks ?? Option.match(config, { onNone: () => true, onSome: (c) => !c.shardLockDisableAdvisory })
    const lockMs = Duration.toMillis(Duration.decode(options.lockExpiration))
    const pingEveryMs = Duration.toMillis(Duration.decode(options.pingEvery ?? Duration.seconds(1)))
    const pingTimeout = Duration.decode(options.pingTimeout ?? Duration.seconds(3))
    /** By `String(address)` (what `shardRunners` gives). */
    const known = new Map<string, Known>()
    let previous: ReadonlyArray<string> = []
    let round: Fiber.RuntimeFiber<ReadonlyArray<readonly [string, boolean]>> | undefined
    let roundAt = Number.NEGATIVE_INFINITY
    const pending: Array<Pending> = []

    const left = (
      input: WatchInput,
      key: string,
      k: Known,
      reason: RunnerLeft["reason"]
    ): RunnerLeft | undefined => {
      k.leftAt = input.now
      const ids: Array<PipelineId> = []
      let windows = 0
      for (const w of input.windows) {
        if (input.runnerOf(previous, w.executionId) !== key) continue
        const live = w.ids.filter((id) => input.running.has(id))
        if (live.length === 0) continue
        windows++
        ids.push(...live)
      }
      // a runner with nothing of this submission on it leaves unremarked
      if (windows === 0) return undefined
      const runner = hostPort(k.address)
      pending.push({ runner, leftAt: input.now, ids })
      const others = input.runners.filter(([r, healthy]) => healthy && String(r.address) !== key).length
      const resumeInMs = reason === "unanswered" ? Math.max(0, k.answeredAt + lockMs - input.now) : 0
      const where = others === 0 ? "on the next runner that is up" : "on the other runners"
      const lockS = Math.round(lockMs / 1000)
      // what the lock mode makes true (break39 F4): advisory locks are held by the runner's
      // database session, which a paused or hung process keeps open (no bound); a dead one's
      // shards are freed at once, its windows' claims expire SHARD_LOCK_EXPIRATION after its last
      // renewal; lock rows expire whatever the process does
      const paused = "a runner paused or hung keeps its shards (advisory locks) until it answers again or its database session ends"
      const when = advisory
        ? reason === "unanswered"
          ? `if its process died, once its windows' claims expire, in ~${Math.ceil(resumeInMs / 1000)} s (SHARD_LOCK_EXPIRATION ${lockS} s after it last answered); ` +
            `${paused}: nothing is lost, they wait`
          : `once their shards are taken over: soon for a runner that stopped (it released them); for one that died, once its windows' claims expire ` +
            `(SHARD_LOCK_EXPIRATION, ${lockS} s, after it last renewed them); ${paused}`
        : reason === "unanswered"
        ? `once its shard locks expire, within ~${Math.ceil(resumeInMs / 1000)} s (SHARD_LOCK_EXPIRATION ${lockS} s after it last answered): nothing is lost, they wait`
        : `once their shards are taken over (soon for a runner that released them; within SHARD_LOCK_EXPIRATION, ${lockS} s, for one that did not)`
      const what = reason === "unanswered" ? "stopped answering (its process stopped, or its host is unreachable)" : "left the cluster"
      return {
        _tag: "RunnerLeft",
        runner,
        reason,
        windows,
        pipelines: ids.length,
        resumeInMs,
        message: `runner ${runner} ${what} with ${windows} window(s) of this run in flight (${ids.length} pipeline(s)): ` +
          `they resume ${where} ${when}`
      }
    }

    const check = (input: WatchInput) =>
      Effect.gen(function*() {
        const events: Array<RunnerLeft | RunnerResumed> = []
        const healthy = new Map<string, RunnerAddress.RunnerAddress>()
        for (const [r, h] of input.runners) if (h) healthy.set(String(r.address), r.address)
        // a finished ping round: who answered
        if (round !== undefined) {
          const done = yield* Fiber.poll(round)
          if (Option.isSome(done)) {
            round = undefined
            const answers = done.value._tag === "Success" ? done.value.value : []
            for (const [key, answered] of answers) {
              const k = known.get(key)
              if (k === undefined) continue
              if (answered) {
                k.misses = 0
                k.answeredAt = input.now
                if (healthy.has(key)) k.leftAt = undefined
              } else k.misses++
            }
          }
        }
        for (const [key, address] of healthy) {
          if (!known.has(key)) known.set(key, { address, misses: 0, answeredAt: input.now, leftAt: undefined, pinging: false })
        }
        for (const [key, k] of known) {
          if (k.leftAt !== undefined) {
            // gone from the storage for good: forgotten (a runner started again is new)
            if (!healthy.has(key)) known.delete(key)
            continue
          }
          const reason = !healthy.has(key) ? "unregistered" : k.misses >= 2 ? "unanswered" : undefined
          if (reason === undefined) continue
          const event = left(input, key, k, reason)
          if (event !== undefined) events.push(event)
          if (reason === "unregistered") known.delete(key)
        }
        // the windows of a runner that left: running again once one of their pipelines ended
        for (let i = pending.length - 1; i >= 0; i--) {
          const p = pending[i]!
          if (p.ids.every((id) => input.running.has(id))) continue
          pending.splice(i, 1)
          const afterMs = input.now - p.leftAt
          events.push({
            _tag: "RunnerResumed",
            runner: p.runner,
            afterMs,
            message: `the windows runner ${p.runner} had in flight run again, ${
              Math.round(afterMs / 1000)
            } s after it left (a pipeline of them ended)`
          })
        }
        previous = input.assignment.length > 0 ? input.assignment : previous
        // the next ping round, in a fiber of its own (its answers are read at a later check)
        if (Option.isSome(options.runners) && round === undefined && input.now - roundAt >= pingEveryMs && known.size > 0) {
          roundAt = input.now
          const runners = options.runners.value
          const targets = Array.from(known)
          round = yield* Effect.forkDaemon(Effect.forEach(
            targets,
            ([key, k]) =>
              Effect.suspend(() => {
                // its last ping has not even ended: unanswered again, and no second one piles up
                if (k.pinging) return Effect.succeed([key, false] as const)
                k.pinging = true
                return runners.ping(k.address).pipe(
                  Effect.ensuring(Effect.sync(() => void (k.pinging = false))),
                  // the timeout does not wait for the ping's interruption: against a runner that
                  // never answers, the RPC client's teardown does not end (break39 F4)
                  Effect.disconnect,
                  Effect.timeout(pingTimeout),
                  Effect.isSuccess,
                  Effect.map((answered) => [key, answered] as const)
                )
              }),
            { concurrency: "unbounded" }
          ))
        }
        return events
      })

    return { check, waiting: () => pending.length > 0 }
  })
