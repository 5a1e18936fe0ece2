/**
 * `assay watch STORE [--run-id ID|all] [--interval 2] [--plugin SPEC]...`: the monitoring picture of a store in
 * the terminal, refreshed every `interval` seconds, ending by itself when the watched run
 * ends (or its writer died: heartbeat older than its `staleAfter`).
 *
 * - stdout is a terminal: the full picture (src/services/Monitor.ts `renderSnapshot`)
 *   redrawn in place, in colour;
 * - otherwise: one plain summary line per refresh (`renderLine`) and the full picture, plain,
 *   once at the end.
 *
 * Without `--run-id` it follows the most recently started run (waiting for one if the store
 * has none yet, and for the store file itself if it does not exist yet) and keeps following that run even if another starts. The store is opened
 * read-only; STORE may be a plugin URI whose scheme a `--plugin` module (or `ASSAY_PLUGINS`)
 * provides. Exit codes: 0 when the run ended; 2 for an unknown `--run-id`, a bad flag or an
 * unknown store scheme; 1 when the store cannot be opened.
 *
 * On a suite root (a directory holding `manifest.json`) it shows the cumulative suite view by
 * default (once a run exists, until no run of the suite is running), `--experiment ID` one
 * member, `--run-id` one invocation's durable outcomes; the picture lists the members with
 * their counts and source status, and pools as shared or private.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Flags from "./Flags.js"
import { Duration, Effect, Option, Schedule } from "effect"
import * as fs from "node:fs"
import { ConfigError } from "../domain/Errors.js"
import * as PluginUri from "../layers/PluginUri.js"
import * as Monitor from "../services/internal/monitor.js"
import { Store } from "../services/Store.js"
import * as StoreArgs from "./StoreArgs.js"
import * as SuiteViews from "../services/internal/suiteViews.js"
import type { StoreService } from "../services/Store.js"

const store = Args.text({ name: "store" }).pipe(
  Args.withDescription("What to watch (opened read-only): an SQLite store file, a plugin URI (scheme://..., see --plugin), or a suite root (a directory with manifest.json).")
)
const runId = Flags.runId("Run to watch: an id, `latest` (the most recently started run: the default) or `all`.")
const interval = Options.float("interval").pipe(
  Options.withDescription("Seconds between refreshes (> 0)."),
  Flags.withDefault(2)
)

const write = (text: string) => Effect.sync(() => void process.stdout.write(text))

/**
 * Lets `watch` and `serve` start before the run that creates their store: while `spec` names an SQLite file
 * that does not exist yet, says so once ("waiting for STORE to be created…") and checks again
 * every `intervalS` seconds (only the path is looked at: nothing is opened). Once the file
 * appears, `watching` runs; a store that cannot be opened within 10 s of its creation (the
 * writer is still laying out its schema) is tried again. A plugin URI or an existing file is
 * opened at once, as before.
 *
 * @since 0.1.0
 * @category commands
 */
export const waitForStoreFile = <A, E extends { readonly _tag: string }, R>(
  spec: string,
  intervalS: number,
  watching: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const parsed = PluginUri.parse(spec)
    const file = parsed._tag === "NotUri"
      ? spec
      : parsed._tag === "Uri" && parsed.scheme === "file"
      ? decodeURIComponent(parsed.uri.pathname)
      : undefined
    if (file === undefined || file === ":memory:" || fs.existsSync(file)) return yield* watching
    const every = Duration.millis(Math.max(1, Math.round(intervalS * 1000)))
    yield* write(`waiting for ${spec} to be created…\n`)
    while (!fs.existsSync(file)) yield* Effect.sleep(every)
    return yield* watching.pipe(
      Effect.retry({
        while: (e) => e._tag === "StoreUnavailable",
        schedule: Schedule.spaced(every).pipe(Schedule.upTo(Duration.seconds(10)))
      })
    )
  })

/**
 * The `watch` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
export const watch = Command.make("watch", { store, runId, interval, plugin: StoreArgs.pluginOption, experiment: StoreArgs.experimentOption }, (o) =>
  Effect.gen(function*() {
    if (!(o.interval > 0) || !Number.isFinite(o.interval)) {
      return yield* new ConfigError({ message: `--interval must be a positive number of seconds, got ${o.interval}` })
    }
    const given = Option.getOrUndefined(o.experiment)
    const root = yield* StoreArgs.suiteRootOf([o.store], given)
    if (root !== undefined) {
      return yield* Effect.scoped(Effect.gen(function*() {
        const { store: st, suite } = yield* StoreArgs.openSuite(root)
        const experiment = yield* SuiteViews.canonicalMember(suite, given)
        yield* follow(o, st, "all", (selector) =>
          Effect.flatMap(Monitor.resolveSelection(st, selector), (sel) => SuiteViews.suiteSnapshot(suite, sel, { experiment, errors: 10 })))
      }))
    }
    return yield* Effect.scoped(Effect.flatMap(Store, (st) =>
      follow(o, st, undefined, (selector) => Monitor.readSnapshot(st, { runId: selector }, Monitor.storeReads(st))))).pipe(
      // a Postgres store's suite member (--experiment ID) is watched alone, as a store
      Effect.provide(StoreArgs.readLayer(o.store, o.plugin, given)),
      (watching) => waitForStoreFile(o.store, o.interval, watching)
    )
  })).pipe(
    Command.withDescription("Watch a run's progress (or a suite's) in the terminal until it ends (read-only).")
  )

/**
 * The watch loop over an opened store: pins the selection (`--run-id`, else `fallback` once a
 * run exists: the latest run's id for a store, `all` (the cumulative view) for a suite), then
 * shows `read(selection)` every interval until it is over.
 */
const follow = <E>(
  o: { readonly store: string; readonly runId: Option.Option<string>; readonly interval: number },
  st: StoreService,
  fallback: "all" | undefined,
  read: (selector: string) => Effect.Effect<Monitor.Snapshot, E | Monitor.UnknownRun>
) =>
  Effect.gen(function*() {
    const tty = process.stdout.isTTY === true
    const every = `${Math.round(o.interval * 1000)} millis` as const
    /** Runs `eff` every interval until `done` holds for its result, and returns that result. */
    const pollUntil = <A, E2, R>(eff: Effect.Effect<A, E2, R>, done: (a: A) => boolean) =>
      Effect.gen(function*() {
        while (true) {
          const a = yield* eff
          if (done(a)) return a
          yield* Effect.sleep(every)
        }
      })
    // `--run-id` as every read command parses it: `latest` is the default (pinned below)
    const selection = Flags.runSelection(o.runId)
    const requested = selection._tag === "run" ? selection.runId : selection._tag === "all" ? "all" : undefined

    // Pin the selection: an explicit id or `all`, else the latest run once there is one.
    let selector = requested
    if (selector === undefined) {
      let announced = false
      const latest = yield* pollUntil(
        st.latestRun.pipe(
          Effect.tap((r) =>
            Option.isNone(r) && !announced
              ? Effect.zipRight(write("waiting for a run to start…\n"), Effect.sync(() => { announced = true }))
              : Effect.void
          )
        ),
        Option.isSome
      )
      selector = fallback ?? Option.getOrThrow(latest).runId
    }
    const pinned = selector
    const snapshot = read(pinned).pipe(
      Effect.catchIf(
        (e): e is Monitor.UnknownRun => e instanceof Monitor.UnknownRun,
        (e) => Effect.fail(new ConfigError({ message: `--run-id: ${e.message} in ${StoreArgs.displayOf(o.store)}` }))
      )
    )
    const show = (s: Monitor.Snapshot) =>
      tty
        ? write(`\u001b[H\u001b[2J${Monitor.renderSnapshot(s, { width: process.stdout.columns ?? 80, color: true })}`)
        : write(`${Monitor.renderLine(s)}\n`)
    const last = yield* pollUntil(Effect.tap(snapshot, show), Monitor.isOver)
    // not a terminal (a file, a pipe): no line is cut, whatever its length
    if (!tty) yield* write(Monitor.renderSnapshot(last, { width: Number.POSITIVE_INFINITY, color: false }))
    if (last.run !== null && last.run.stale) {
      yield* write(`run ${last.run_id} stopped sending heartbeats: its writer is gone (the run stays resumable)\n`)
    }
  })
