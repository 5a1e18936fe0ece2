/**
 * The cluster engine on the command line (issue 17 §3):
 *
 * - `assay runner -c FILE --database URL [--listen HOST:PORT] [--store STORE] [--concurrency N]
 *   [--lease-ttl DURATION] [--renew-every DURATION]`: a runner process; it hosts shards of the cluster whose tables live in the PostgreSQL
 *   database `URL`, and runs the pipelines of experiment `FILE` as workflows, writing the
 *   store every process shares. It runs until stopped (SIGINT/SIGTERM: it leaves the cluster
 *   and its workflows move to the other runners).
 * - `assay run -c FILE --engine cluster --database URL [--store STORE] [--max-admitted N]`:
 *   a client-only submitter (see {@link submitRun}), loaded by `run` only for
 *   `--engine cluster`.
 *
 * The store must be one every process can write: by default the store named by `URL` (a
 * `postgres://` store), else `--store` / `run.store`; an SQLite file or `:memory:` is refused
 * (exit 2: a file has one writer, memory is per process). A URL's password is never printed.
 *
 * This module only declares and checks flags: what runs (`ClusterRun.ts`, which loads
 * `@effect/cluster`, `@effect/workflow` and `@effect/sql-pg`) is imported when one of the two
 * commands actually runs, so `assay --help` and the embedded engine never load it.
 *
 * @since 0.7.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Duration, Effect, Either, Option } from "effect"
import { ConfigError } from "../domain/Errors.js"
import * as PgUrl from "../layers/internal/pg/url.js"
import { ModuleLoader } from "../layers/ModuleLoader.js"
import { durationFlag, integerAtLeast } from "./Flags.js"

/** The module that runs the two commands (`ClusterRun.ts`), as its URL next to this one. */
const clusterRunUrl = (): string => {
  try {
    return new URL("./ClusterRun.js", import.meta.url).href
  } catch {
    // inside the CLI's bundle (no module URL): its loader refuses any URL anyway
    return "assay:cluster-run"
  }
}

/**
 * Loads `ClusterRun.ts` through the `ModuleLoader` in context: never part of the CLI's fast
 * start bundle (its loader refuses it, so the command runs again on the unbundled runtime, the
 * way user modules do), which keeps `@effect/cluster`, `@effect/workflow` and `@effect/sql-pg`
 * out of the bundle every other command parses.
 *
 * @since 0.7.0
 * @category loading
 */
export const loadClusterRun: Effect.Effect<typeof import("./ClusterRun.js"), unknown> = Effect.flatMap(
  ModuleLoader,
  (loader) => Effect.map(loader.load(clusterRunUrl()), (m) => m as unknown as typeof import("./ClusterRun.js"))
)

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * `url` with its password replaced by `***` (what messages show of a database URL): the one
 * masking of the Postgres store's messages (`layers/internal/pg/url.ts`).
 *
 * @param url a connection URL (or any text)
 * @returns the URL without its password
 * @since 0.7.0
 * @category messages
 */
export const redactUrl = (url: string): string => PgUrl.redactUrl(url)

/**
 * Checks a `--database` value: a `postgres://` or `postgresql://` URL (exit 2 otherwise,
 * naming the flag; the message never shows the password).
 *
 * @param url the flag's value
 * @returns the URL, or a `ConfigError`
 * @since 0.7.0
 * @category flags
 */
export const checkDatabase = (url: string): Effect.Effect<string, ConfigError> => {
  let ok = false
  try {
    const u = new URL(url)
    ok = u.protocol === "postgres:" || u.protocol === "postgresql:"
  } catch {
    ok = false
  }
  return ok
    ? Effect.succeed(url)
    : Effect.fail(configError("--database", `expected a postgres://user@host:port/database URL, got ${redactUrl(url)}`))
}

/**
 * Parses `--listen HOST:PORT` (port 1–65535).
 *
 * @param text the flag's value
 * @returns `{ host, port }`, or a `ConfigError` naming `--listen`
 * @since 0.7.0
 * @category flags
 */
export const parseListen = (text: string): Effect.Effect<{ readonly host: string; readonly port: number }, ConfigError> => {
  const m = /^(.+):(\d+)$/.exec(text)
  const port = m === null ? NaN : Number(m[2])
  if (m === null || !Number.isInteger(port) || port < 1 || port > 65535) {
    return Effect.fail(configError("--listen", `expected HOST:PORT (e.g. 127.0.0.1:34431), got "${text}"`))
  }
  return Effect.succeed({ host: m[1]!.replace(/^\[(.*)\]$/, "$1"), port })
}

/**
 * The pool lease TTL of `assay runner` when `--lease-ttl` is absent.
 *
 * @since 0.8.0
 * @category flags
 */
export const DEFAULT_LEASE_TTL: Duration.Duration = Duration.seconds(30)

/**
 * A third of `leaseTtl`, in whole milliseconds (at least 1): the renewal interval when
 * `--renew-every` is absent.
 *
 * @since 0.8.0
 * @category flags
 */
export const defaultRenewEvery = (leaseTtl: Duration.Duration): Duration.Duration =>
  Duration.millis(Math.max(1, Math.floor(Duration.toMillis(leaseTtl) / 3)))

/**
 * The global pool lease timing of a runner: `leaseTtl` (how long a slot stays held without a
 * renewal: a killed runner's slots come back within it) and `renewEvery` (how often a held
 * slot is renewed).
 *
 * @since 0.8.0
 * @category flags
 */
export interface LeaseTiming {
  readonly leaseTtl: Duration.Duration
  readonly renewEvery: Duration.Duration
}

/**
 * Checks `--lease-ttl` and `--renew-every` (durations with a unit, longer than 0):
 * `leaseTtl` defaults to {@link DEFAULT_LEASE_TTL}, `renewEvery` to a third of the TTL ({@link defaultRenewEvery}). A renew
 * interval as long as the TTL or longer is refused (the slot would expire between two
 * renewals). Every refusal is a `ConfigError` naming the flag (CLI exit 2).
 *
 * @param ttl the text of `--lease-ttl`, if given
 * @param renew the text of `--renew-every`, if given
 * @returns the timing the runner's pools use
 * @since 0.8.0
 * @category flags
 */
export const leaseTiming = (ttl: Option.Option<string>, renew: Option.Option<string>): Either.Either<LeaseTiming, ConfigError> =>
  Either.gen(function*() {
    const leaseTtl = (yield* durationFlag("lease-ttl", ttl, { positive: true })) ?? DEFAULT_LEASE_TTL
    const renewEvery = (yield* durationFlag("renew-every", renew, { positive: true })) ?? defaultRenewEvery(leaseTtl)
    if (Duration.greaterThanOrEqualTo(renewEvery, leaseTtl)) {
      return yield* Either.left(configError(
        "--renew-every",
        `${Duration.format(renewEvery)} is not shorter than the lease TTL (${Duration.format(leaseTtl)}${
          Option.isNone(ttl) ? ", the default" : ", --lease-ttl"
        }): a slot would expire between two renewals; renew every third of the TTL or more often`
      ))
    }
    return { leaseTtl, renewEvery }
  })

// ---------------------------------------------------------------------------------------------
// assay runner
// ---------------------------------------------------------------------------------------------

const runnerOptions = {
  // no `exists: "yes"`: a missing file is refused by the loader, `error: … no such file` (exit 2), as `run`
  // refuses it, not by @effect/cli's bare `Path … must exist` (newuser37 F11)
  config: Options.file("config").pipe(
    Options.withAlias("c"),
    Options.withDescription("The experiment file, or the suite file (every member), whose pipelines this runner runs (the submitter's file).")
  ),
  database: Options.text("database").pipe(
    Options.withPseudoName("URL"),
    Options.withDescription("The cluster's PostgreSQL database (postgres://user@host:port/db); one database per deployment.")
  ),
  listen: Options.text("listen").pipe(
    Options.withPseudoName("HOST:PORT"),
    Options.optional,
    Options.withDescription("Where other runners reach this one (default localhost:34431).")
  ),
  store: Options.text("store").pipe(
    Options.withPseudoName("store"),
    Options.optional,
    Options.withDescription("The shared store (default: the --database URL's store).")
  ),
  concurrency: integerAtLeast("concurrency", 1).pipe(
    Options.optional,
    Options.withDescription("Attempts running at once in this process (default: the file's run.concurrency, else 64).")
  ),
  leaseTtl: Options.text("lease-ttl").pipe(
    Options.withPseudoName("duration"),
    Options.optional,
    Options.withDescription(
      "How long a global pool slot stays held without a renewal (default 30 seconds): a killed runner's slots come back within it."
    )
  ),
  renewEvery: Options.text("renew-every").pipe(
    Options.withPseudoName("duration"),
    Options.optional,
    Options.withDescription("How often this runner renews the pool slots it holds (default a third of --lease-ttl; must be shorter).")
  ),
  // on by default (pg17af): `--no-window-claims` / `--no-block-leases` turn them off; the
  // spellings of the earlier opt-in, `--window-claims` / `--block-leases`, are still accepted
  windowClaims: Options.boolean("no-window-claims", { ifPresent: false, negationNames: ["window-claims"] }).pipe(
    Options.withDescription(
      "Window claims, on by default: each window of pipelines claimed whole, with local deadlines. --no-window-claims claims, fences and reads each task on its own instead, and turns block leases off too (they ride on the window claims); --window-claims, the default, is still accepted."
    )
  ),
  blockLeases: Options.boolean("no-block-leases", { ifPresent: false, negationNames: ["block-leases"] }).pipe(
    Options.withDescription(
      "Block leases, on by default: a block of each global pool resource's slots held, sized to this runner's share of the demand, the window's tasks served from it in memory. --no-block-leases claims a slot per task instead; --block-leases, the default, is still accepted."
    )
  ),
  expectedRunners: integerAtLeast("expected-runners", 1).pipe(
    Options.optional,
    Options.withDescription(
      "With block leases, optional: the first block of a resource holds capacity / N slots, until the runners' demands are known (deprecated: the blocks follow demand)."
    )
  )
}

/**
 * The block leases of `assay runner` (on by default; `--no-block-leases` turns them off, and so
 * does `--no-window-claims`, since the blocks are renewed with the window claims; optional
 * `--expected-runners N`, the first blocks' size guess): `undefined` when off; a `ConfigError`
 * (exit 2) for `--expected-runners` when block leases are off.
 *
 * @param on block leases asked for (`false`: `--no-block-leases`)
 * @param windowClaims window claims on (`false`: `--no-window-claims`)
 * @param expectedRunners `--expected-runners N`, when given
 * @since 0.9.0
 * @category parsing
 */
export const blockLeasesOf = (
  on: boolean,
  windowClaims: boolean,
  expectedRunners: Option.Option<number>
): Either.Either<{ readonly expectedRunners?: number | undefined } | undefined, ConfigError> => {
  if (!on || !windowClaims) {
    return Option.isSome(expectedRunners)
      ? Either.left(configError(
        "--expected-runners",
        `is only used with block leases (${!on ? "--no-block-leases" : "--no-window-claims"} turns them off)`
      ))
      : Either.right(undefined)
  }
  return Either.right(Option.isNone(expectedRunners) ? {} : { expectedRunners: expectedRunners.value })
}

/**
 * `assay runner`: hosts shards and runs pipelines as workflows until stopped.
 *
 * @since 0.7.0
 * @category commands
 */
export const runner = Command.make("runner", runnerOptions, (o) =>
  Effect.gen(function*() {
    const database = yield* checkDatabase(o.database)
    const address = yield* Option.match(o.listen, { onNone: () => Effect.succeed(undefined), onSome: parseListen })
    const lease = yield* leaseTiming(o.leaseTtl, o.renewEvery)
    const blockLeases = yield* blockLeasesOf(o.blockLeases, o.windowClaims, o.expectedRunners)
    const run = yield* loadClusterRun
    return yield* run.runnerMain({
      config: o.config,
      database,
      address,
      store: o.store,
      concurrency: Option.getOrUndefined(o.concurrency),
      lease,
      windowClaims: o.windowClaims,
      blockLeases
    })
  })).pipe(Command.withDescription("Run a cluster runner: host shards and run pipelines as workflows (exit 2 invalid flags)."))
