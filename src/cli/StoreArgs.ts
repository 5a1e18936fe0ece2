/**
 * Store arguments of the read commands (report, export, merge, serve, watch): each may be an
 * SQLite file, a `file:` URI, or a plugin URI (`scheme://...`) whose scheme a plugin named by
 * `--plugin SPEC` (repeatable) or `ASSAY_PLUGINS=a,b` provides. Plugins are only imported when
 * some argument is a plugin URI, and resolved against the working directory. Every store is
 * opened read-only (`StoreResolver.openReadOnly`).
 *
 * A store argument may also be a suite root (a directory holding `manifest.json`): the read
 * commands then show the suite's views (src/services/internal/suiteViews.ts), opened read-only
 * through `SuiteStore.makeRead`; `--experiment ID` selects one member.
 *
 * @since 0.1.0
 */
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import type { Scope } from "effect"
import { Effect, Layer } from "effect"
import { ConfigError, type PluginError, StoreUnavailable } from "../domain/Errors.js"
import { closest } from "../domain/internal/suggest.js"
import * as Plugins from "../layers/Plugins.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import type { SuiteReads } from "../services/internal/suiteViews.js"
import * as PluginUri from "../layers/PluginUri.js"
import { isPostgresUrl, redactUrl } from "../layers/internal/pg/url.js"
import * as StoreResolver from "../layers/internal/storeResolver.js"
import * as Export from "../services/internal/export.js"
import * as Flags from "./Flags.js"
import type { Store, StoreService } from "../services/Store.js"
import type * as StudyView from "../services/internal/studyView.js"

/**
 * `--plugin SPEC` (repeatable): plugin modules whose `stores` the store arguments may use.
 *
 * @since 0.1.0
 * @category options
 */
export const pluginOption = Options.text("plugin").pipe(
  Options.repeated,
  Options.withDescription(
    "A plugin module (path or package) providing a store URI scheme; repeatable (also read from ASSAY_PLUGINS=a,b)."
  )
)

/**
 * `--rows KIND`: the row kind a command writes (`pipelines` when absent). Shared by `export`
 * and `merge`.
 *
 * @param description the command's help text for it
 * @since 0.1.0
 * @category options
 */
export const rowsOption = (description: string) =>
  Options.text("rows").pipe(
    // the kinds are listed in the description and in the refusal: as a choice, the usage line
    // (every kind joined by `|`) no longer fits 80 columns
    Options.withPseudoName("KIND"),
    Options.mapEffect((text) => {
      const kind = Export.ROW_KINDS.find((k) => k === text)
      if (kind !== undefined) return Effect.succeed(kind)
      const near = closest(text, Export.ROW_KINDS)
      return Effect.fail(ValidationError.invalidValue(HelpDoc.p(
        `--rows: ${JSON.stringify(text)} is not one of ${Export.ROW_KINDS.join(", ")}${
          near === undefined ? "" : `; did you mean ${near}?`
        }`
      )))
    }),
    Options.withDescription(description),
    Flags.withDefault("pipelines" as const)
  )

/**
 * `--format jsonl|json|csv` (optional; a command takes it from the output file's suffix when
 * absent). Shared by `export` and `merge`.
 *
 * @param description the command's help text for it
 * @since 0.1.0
 * @category options
 */
export const formatOption = (description: string) =>
  Options.choice("format", Export.FORMATS).pipe(Options.optional, Options.withDescription(description))

/**
 * The plugin specifiers of `ASSAY_PLUGINS` (comma-separated, blanks dropped).
 *
 * @since 0.1.0
 * @category plugins
 */
export const envPlugins = (): ReadonlyArray<string> =>
  (process.env["ASSAY_PLUGINS"] ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "")

const needsPlugins = (specs: ReadonlyArray<string>): boolean =>
  specs.some((s) => {
    const p = PluginUri.parse(s)
    return p._tag === "Uri" && p.scheme !== "file" && p.scheme !== "postgres" && p.scheme !== "postgresql"
  })

/**
 * The plugin registry for some store arguments: empty when none is a plugin URI (nothing is
 * imported), else the `--plugin` modules then the `ASSAY_PLUGINS` ones, loaded relative to the
 * working directory. Never fails (a broken plugin is in the registry's `errors`, named when
 * its scheme is asked for).
 *
 * @since 0.1.0
 * @category plugins
 */
export const registryFor = (
  specs: ReadonlyArray<string>,
  plugins: ReadonlyArray<string>
): Effect.Effect<Plugins.PluginRegistry> =>
  needsPlugins(specs) ? Plugins.load([...plugins, ...envPlugins()], process.cwd()) : Effect.succeed(Plugins.empty)

/**
 * Opens every store argument read-only in the current scope, in order, each with its
 * argument as `source`. Fails with `ConfigError` (exit 2) on an unknown scheme or a malformed
 * URI before any store is opened, then `StoreUnavailable` / `PluginError` from opening.
 *
 * @since 0.1.0
 * @category opening
 */
export const openAll = (
  specs: ReadonlyArray<string>,
  plugins: ReadonlyArray<string>
): Effect.Effect<
  ReadonlyArray<{ readonly source: string; readonly store: StoreService }>,
  StoreUnavailable | ConfigError | PluginError,
  Scope.Scope
> =>
  Effect.flatMap(registryFor(specs, plugins), (registry) => openWith(specs, registry))

/**
 * Fails with `ConfigError` (exit 2) when a store argument is a directory: a suite root is read
 * by the suite views before this point, so any directory here is a mistake, named for what it is
 * (`SuiteStore.notARootMessage`: a folder inside a suite root, a directory without
 * manifest.json) instead of SQLite's "disk I/O error".
 */
const refuseDirectory = (spec: string): Effect.Effect<void, ConfigError> =>
  Effect.gen(function*() {
    if (PluginUri.isUri(spec) || !(yield* isDirectory(spec))) return
    const found = yield* SuiteStore.notARootMessage(spec)
    return yield* new ConfigError({
      message: `expected a store file or a suite root (a directory holding manifest.json): ${found}`,
      issues: [{ path: "store", message: found }]
    })
  })

/**
 * Fails with `ConfigError` (exit 2) when a store argument that is a path (not a URI) names no
 * file: `store PATH: no such file`, as every path a command is given (newuser37 F10), instead
 * of the read-only open's "no assay store" (exit 1). An empty file is still the open's to judge.
 */
const refuseMissing = (spec: string): Effect.Effect<void, ConfigError> =>
  Effect.gen(function*() {
    if (PluginUri.isUri(spec) || (yield* Effect.sync(() => fs.existsSync(spec)))) return
    return yield* new ConfigError({
      message: `store ${spec}: no such file`,
      issues: [{ path: "store", message: `no such file: ${spec}` }]
    })
  })

const isDirectory = (p: string) =>
  Effect.sync(() => {
    try {
      return fs.statSync(p).isDirectory()
    } catch {
      return false
    }
  })

/** The specs {@link displayOf} masked, by what it showed (so a store can be reopened by its shown name). */
const shown = new Map<string, string>()

/**
 * How a store spec is shown (report headers, messages, the `source` of opened stores): a
 * Postgres URL without its password (`postgres://user:***@host/db`), anything else as given.
 * A masked spec is remembered, so {@link reopener} can open it again by the shown name.
 *
 * @since 0.8.0
 * @category display
 */
export const displayOf = (spec: string): string => {
  if (!isPostgresUrl(spec)) return spec
  const masked = redactUrl(spec)
  if (masked !== spec) shown.set(masked, spec)
  return masked
}

/**
 * {@link openAll} with an already loaded registry.
 *
 * @since 0.1.0
 * @category opening
 */
export const openWith = (
  specs: ReadonlyArray<string>,
  registry: Plugins.PluginRegistry
): Effect.Effect<
  ReadonlyArray<{ readonly source: string; readonly store: StoreService }>,
  StoreUnavailable | ConfigError | PluginError,
  Scope.Scope
> =>
  Effect.gen(function*() {
    for (const spec of specs) yield* StoreResolver.resolve(spec, registry, "store")
    for (const spec of specs) yield* refuseDirectory(spec)
    for (const spec of specs) yield* refuseMissing(spec)
    const baseDir = process.cwd()
    return yield* Effect.forEach(specs, (spec) =>
      Effect.map(StoreResolver.openReadOnly(spec, { registry, baseDir }), (store) => ({ source: displayOf(spec), store })))
  })

/**
 * An opener for `Merge.mergeSources` (it reopens a source to export its rows): the store
 * argument opened read-only with its bulk reader. A `PluginError` on reopening is reported as
 * `StoreUnavailable` (the source opened once already).
 *
 * @since 0.1.0
 * @category opening
 */
export const reopener = (registry: Plugins.PluginRegistry) =>
(source: string): Effect.Effect<
  { readonly store: StoreService; readonly bulk: Export.BulkReader },
  StoreUnavailable | ConfigError,
  Scope.Scope
> =>
  StoreResolver.openReadOnly(shown.get(source) ?? source, { registry, baseDir: process.cwd() }).pipe(
    Effect.catchTag("PluginError", (e) => Effect.fail(new StoreUnavailable({ message: e.message, path: source }))),
    Effect.map((store) => ({ store, bulk: Export.storeBulk(store) }))
  )

/**
 * The read-only `Store` layer of one store argument (for serve and watch), with the plugins
 * of `--plugin` / `ASSAY_PLUGINS` when it is a plugin URI.
 *
 * @since 0.1.0
 * @category opening
 */
export const readLayer = (
  spec: string,
  plugins: ReadonlyArray<string>,
  /** A Postgres store's suite member to show alone (`--experiment ID`; see {@link pgMember}). */
  member?: string | undefined
): Layer.Layer<Store, StoreUnavailable | ConfigError | PluginError> =>
  Layer.unwrapEffect(
    Effect.zipRight(
      refuseDirectory(spec),
      Effect.map(
        registryFor([spec], plugins),
        (registry) =>
          StoreResolver.layer(spec, { registry, baseDir: process.cwd(), journal: "full", readOnly: true, path: "store", member })
      )
    )
  )

/**
 * `--experiment ID`: on a suite root, one member's view (default: the whole suite); on a
 * Postgres store given alone, one member of the cluster suites it holds (`PgStore.layerReadOnlyMember`).
 *
 * @since 0.3.0
 * @category options
 */
export const experimentOption = Options.text("experiment").pipe(
  Options.optional,
  Options.withDescription("A suite root's member, or a cluster suite's member in a Postgres store (ID, or SUITE/ID when several suites share it): show it alone (default: the whole suite or store).")
)

/**
 * The suite root among some store arguments: `undefined` when none is a suite root (a
 * directory holding `manifest.json`), the root when it is the only argument; a suite root
 * beside other stores fails with `ConfigError` (exit 2), as does `--experiment` without a
 * suite root (when `experiment` is given).
 *
 * @since 0.3.0
 * @category suites
 */
export const suiteRootOf = (
  specs: ReadonlyArray<string>,
  experiment: string | undefined
): Effect.Effect<string | undefined, ConfigError> =>
  Effect.gen(function*() {
    const roots: Array<string> = []
    for (const spec of specs) if (yield* SuiteStore.isSuiteRoot(spec)) roots.push(spec)
    if (roots.length > 0 && specs.length > 1) {
      return yield* new ConfigError({
        message: `a suite root (${roots[0]}) is read alone: give it as the only store (its members are merged already)`,
        issues: [{ path: "store", message: "a suite root beside other stores" }]
      })
    }
    if (roots.length === 0 && experiment !== undefined && !pgMember(specs, experiment)) {
      const found = yield* Effect.forEach(specs, SuiteStore.notARootMessage)
      return yield* new ConfigError({
        message: `--experiment ${experiment}: only a suite root (a directory holding manifest.json) has members` +
          (specs.some(isPostgresUrl) ? " (or a Postgres store given alone: the members of its cluster suites)" : "") +
          "; " + found.join("; "),
        issues: [{ path: "--experiment", message: `not a suite root: ${found.join("; ")}` }]
      })
    }
    return roots[0]
  })

/**
 * Whether `--experiment ID` selects a suite member of a Postgres store: the one store argument
 * is a `postgres://` URL (a cluster suite's members live in it: `PgStore.layerReadOnlyMember`).
 *
 * @param specs the store arguments
 * @param experiment the `--experiment` value, if given
 * @since 0.12.0
 * @category suites
 */
export const pgMember = (specs: ReadonlyArray<string>, experiment: string | undefined): boolean =>
  experiment !== undefined && specs.length === 1 && isPostgresUrl(specs[0]!)

/**
 * The suite root whose catalog database `spec` is (`ROOT/suite.db` of a root with the
 * `byExperiment` layout: it holds the suite's members and runs, none of their pipelines), or
 * `undefined` for anything else. A read command given it reads the root instead (and says so).
 *
 * @param spec a store argument
 * @returns the root's path, or `undefined`
 * @since 0.9.0
 * @category suites
 */
export const catalogRootOf = (spec: string): Effect.Effect<string | undefined> =>
  Effect.gen(function*() {
    if (PluginUri.isUri(spec) || nodePath.basename(spec) !== "suite.db") return undefined
    const { found, root } = yield* SuiteStore.describePath(spec)
    return root !== undefined && found.startsWith("is the catalog database") ? root : undefined
  })

/**
 * Opens a suite root read-only in the current scope (`SuiteStore.makeRead`: no lock, no
 * migration, no write): its merged cumulative store and its catalog as {@link SuiteReads}.
 * Fails with `StoreUnavailable` when the root cannot be read, `ConfigError` for a bad manifest.
 *
 * @since 0.3.0
 * @category suites
 */
export const openSuite = (
  root: string
): Effect.Effect<
  { readonly store: StoreService; readonly suite: SuiteReads; readonly study: StudyView.StudyReads },
  StoreUnavailable | ConfigError,
  Scope.Scope
> =>
  Effect.map(SuiteStore.makeRead(root), (h) => ({
    store: h.store,
    suite: h.catalog,
    study: { study: h.study, catalog: h.catalog, studyId: h.catalog.suiteId }
  })).pipe(Effect.provide(NodeFileSystem.layer))
