/**
 * `assay serve STORE [--port 8787] [--host 127.0.0.1] [--run-id all|latest|ID] [--allow-remote]`:
 * the read-only HTTP view of a store (dashboard at `/`, JSON at `/stats`, `/metrics`,
 * `/events`, `/pipelines`, `/resources`, `/errors`, downloads at `/export`; see
 * src/services/StatsServer.ts and docs/monitoring.md). By default every view shows the whole
 * store (after a resume: the full evaluation), with the latest run one click away. The store is opened read-only (no lock, no migration, no write), so
 * it runs safely beside a writer. An SQLite store file that does not exist yet is waited for
 * ("waiting for STORE to be created…", said once), then served. It binds loopback only unless `--allow-remote` is given,
 * and says where it listens. Runs until interrupted (Ctrl-C exits 130).
 *
 * STORE may be a plugin URI whose scheme a `--plugin SPEC` module (or `ASSAY_PLUGINS`) provides.
 *
 * STORE may be a suite root (a directory holding `manifest.json`): the cumulative suite view by
 * default, `--experiment ID` one member by default; every JSON route takes `?experiment=ID`,
 * `/experiments` lists the members and the dashboard links each member's detail view.
 * A study's output root (the suite root `assay study run` writes) also gets the Study page
 * (`/study/page`, linked from the dashboard) and its JSON (`/study`, `/study/evidence`).
 *
 * Exit codes: 2 for a refused host, a bad flag, an unknown `--run-id` or an unknown store
 * scheme; 1 when the store cannot be opened or the port cannot be bound.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Flags from "./Flags.js"
import { Console, Effect, Option } from "effect"
import { ConfigError } from "../domain/Errors.js"
import * as Monitor from "../services/Monitor.js"
import * as StatsServer from "../services/StatsServer.js"
import { Store } from "../services/Store.js"
import * as StoreArgs from "./StoreArgs.js"
import { waitForStoreFile } from "./WatchCommand.js"
import * as SuiteViews from "../services/internal/suiteViews.js"
import type * as StudyView from "../services/internal/studyView.js"
import type { StoreService } from "../services/Store.js"

const store = Args.text({ name: "store" }).pipe(
  Args.withDescription("What to serve (opened read-only): an SQLite store file, a plugin URI (scheme://..., see --plugin), or a suite root (a directory with manifest.json).")
)
const port = Flags.port(8787, "TCP port (0 = any free port).")
const host = Flags.host("Address to bind; anything but loopback needs --allow-remote.")
const runId = Flags.runId(
  "Default view when a request names none: `all` (the whole store, the default), `latest` (the most recently started run) or a run id."
)
const allowRemote = Flags.allowRemote(
  "Allow a non-loopback --host (there is no authentication: put your own proxy in front)."
)
const refresh = Options.integer("refresh-ms").pipe(
  Options.withDescription("Dashboard refresh period in ms."),
  Flags.withDefault(2000)
)

/**
 * The `serve` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
export const serve = Command.make("serve", { store, port, host, runId, allowRemote, refresh, plugin: StoreArgs.pluginOption, experiment: StoreArgs.experimentOption }, (o) =>
  Effect.gen(function*() {
    const experiment = Option.getOrUndefined(o.experiment)
    const root = yield* StoreArgs.suiteRootOf([o.store], experiment)
    // a store that does not exist yet (serve started before the run): wait for it, say so once
    if (root === undefined) {
      return yield* Effect.flatMap(Store, (st) => serveStore(o, st)).pipe(
        // a Postgres store's suite member (--experiment ID) is served alone, as a store
        Effect.provide(StoreArgs.readLayer(o.store, o.plugin, experiment)),
        (serving) => waitForStoreFile(o.store, 0.5, serving)
      )
    }
    return yield* Effect.scoped(Effect.gen(function*() {
      const { store: st, study, suite } = yield* StoreArgs.openSuite(root)
      return yield* serveStore(o, st, suite, yield* SuiteViews.canonicalMember(suite, experiment), study)
    }))
  })).pipe(
    Command.withDescription("Serve a read-only dashboard and JSON views of a store or a suite root (loopback only by default).")
  )

/** Serves one opened store (a suite root's merged store with `suite`) until interrupted. */
const serveStore = (
  o: {
    readonly store: string
    readonly port: number
    readonly host: string
    readonly runId: Option.Option<string>
    readonly allowRemote: boolean
    readonly refresh: number
  },
  st: StoreService,
  suite?: SuiteViews.SuiteReads | undefined,
  experiment?: string | undefined,
  study?: StudyView.StudyReads | undefined
) =>
  Effect.scoped(Effect.gen(function*() {
    // `--run-id` as every read command parses it (Flags.runSelection)
    const selection = Flags.runSelection(o.runId)
    const selector = selection._tag === "default" ? undefined : selection._tag === "run" ? selection.runId : selection._tag
    // an explicit default run must exist (a typo should not serve an empty page)
    if (selection._tag === "run") {
      yield* Monitor.resolveSelection(st, selection.runId).pipe(
        Effect.catchTag("UnknownRun", (e) => Effect.fail(new ConfigError({ message: `--run-id: ${e.message} in ${StoreArgs.displayOf(o.store)}` })))
      )
    }
    const reads = Monitor.storeReads(st)
    const info = yield* StatsServer.serve({
      store: st,
      reads,
      host: o.host,
      port: o.port,
      allowRemote: o.allowRemote,
      runId: selector,
      refreshMs: o.refresh,
      suite,
      experiment,
      study
    })
    yield* Console.log(
      `assay serve: ${StoreArgs.displayOf(o.store)} (read-only) at ${info.url}/ ${
        info.loopback ? "(bound to loopback only)" : "(WARNING: reachable from other hosts, no authentication)"
      }`
    )
    return yield* Effect.never
  }))
