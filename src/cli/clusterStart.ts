/**
 * The cluster commands' fast start (`assay runner`, `assay migrate`, `--engine cluster`):
 * `src/cli/launcher.ts` runs this module from its own CommonJS bundle
 * (`dist/bundle/cluster-<hash>.cjs`, made by `scripts/build.mjs`, with V8's code cache), in
 * which effect, @effect/* (with @effect/cluster, -workflow, -sql-pg) and assay are bundled.
 * The CLI's other bundle (`fastStart.ts`) leaves the cluster's modules out, so that no other
 * command parses them; on the unbundled runtime a cluster command spent ~2.4 s of CPU loading
 * ~1,000 module files before it did anything (BENCHMARKS.md, start17am, bnd17an).
 *
 * The bundle's {@link loader} gives the cluster's own modules (`ClusterRun.ts`,
 * `ClusterStudy.ts`: the URLs `ClusterCommand.loadClusterRun` and `StudyRun.loadClusterStudy`
 * ask for) from inside the bundle, and refuses everything else as `fastStart.ts` does: a
 * command that meets user code stops (before printing or writing anything) and `fallback` runs
 * it again on the unbundled `dist/` runtime. The `pg` driver is not in the bundle (an optional
 * peer, required from assay's installation when the cluster's module loads): when the bundled
 * module cannot load (e.g. `pg` is missing), the command goes on on the unbundled runtime too,
 * which fails with the message it always gave.
 *
 * @since 0.17.0
 */
import * as Effect from "effect/Effect"
import { type ModuleLoaderService, NeedsFullRuntime } from "../layers/ModuleLoader.js"
import { main } from "./main.js"

/**
 * The cluster's own modules, by the URL their loaders ask for (a module next to this one:
 * inside the bundle, next to the bundle's file, as `ClusterCommand.ts` and `StudyRun.ts`
 * compute it there).
 */
const own = (): ReadonlyMap<string, () => Promise<Record<string, unknown>>> =>
  new Map<string, () => Promise<Record<string, unknown>>>([
    [new URL("./ClusterRun.js", import.meta.url).href, () => import("./ClusterRun.js")],
    [new URL("./ClusterStudy.js", import.meta.url).href, () => import("./ClusterStudy.js")]
  ])

/**
 * The cluster bundle's module loader: the cluster's own modules (`ClusterRun.ts`,
 * `ClusterStudy.ts`) from the bundle; any other URL (user code), or a bundled module that
 * cannot load (its `pg` peer missing), dies with `NeedsFullRuntime` (the command runs again on
 * the unbundled runtime).
 *
 * @since 0.17.0
 * @category loading
 */
export const loader: ModuleLoaderService = {
  load: (url) => {
    const bundled = own().get(url)
    return bundled === undefined
      ? Effect.die(new NeedsFullRuntime({ url }))
      : Effect.catchAll(
        Effect.tryPromise({ try: bundled, catch: (e) => e }),
        () => Effect.die(new NeedsFullRuntime({ url }))
      )
  }
}

/**
 * Runs `argv` (as `process.argv`, a cluster command) on the cluster bundle; calls `fallback`
 * instead of exiting when the command needs the unbundled runtime (user code, a missing `pg`).
 *
 * @param argv the command line, as `process.argv`
 * @param fallback runs the command line again on the unbundled runtime
 * @since 0.17.0
 * @category running
 */
export const start = (argv: ReadonlyArray<string>, fallback: () => void): void =>
  main(argv, { modules: loader, onNeedsFullRuntime: fallback })
