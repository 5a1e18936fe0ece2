/**
 * The store resolver: turns a store spec, as a config file (`run.store`), a flag (`--store`)
 * or a read command's argument writes it, into the `Store` layer that opens it.
 *
 * A spec is, in this order (built-ins always win):
 * - `":memory:"`: the memory store (nothing persists);
 * - `file:///abs/runs/qa.db`: the SQLite file at that path (the built-in `file` scheme);
 * - `postgres://…` or `postgresql://…`: the Postgres store in that database (`PgStore`; the
 *   database must have been migrated with `assay migrate --database URL`);
 * - `scheme://...` (see `PluginUri` for what counts as a URI): the store a plugin provides for
 *   that scheme (the plugin's `stores` export); an unknown scheme is a `ConfigError` (exit 2)
 *   naming it and the known ones, before anything is opened;
 * - anything else: an SQLite file path (`runs/qa.db`, `C:\runs\qa.db`).
 *
 * Run and resume open the store for writing with the run's journal mode and artifact backend;
 * report, export, merge, serve and watch open it read-only ({@link openReadOnly}).
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Scope } from "effect"
import { Context, Effect, Either, Layer, Option } from "effect"
import { ConfigError, type ConfigIssue, type PluginError, type StoreUnavailable } from "../../domain/Errors.js"
import type { BackendInput } from "../../services/ArtifactBackend.js"
import { Store, StoreOpener, type StoreService } from "../../services/Store.js"
import { makeDirectories } from "../../services/internal/directories.js"
import * as ArtifactBackends from "../ArtifactBackends.js"
import * as MemoryStore from "../MemoryStore.js"
import * as Plugins from "../Plugins.js"
import type { PluginRegistry, Provided, StoreFactory } from "../Plugins.js"
import * as PluginUri from "../PluginUri.js"
import { loadPgStore } from "./pg/load.js"
import { redactUrl } from "./pg/url.js"
import * as SqliteStore from "../SqliteStore.js"

/**
 * A resolved store spec: the memory store, an SQLite file (`filename` as written, or the
 * path of a `file:` URI), a Postgres database (`url`, a `postgres://` or `postgresql://`
 * connection URL, password included: show it only through `PgStore.redactUrl`), or a plugin store (`scheme`, parsed `uri`, and the plugin and
 * factory providing it).
 *
 * @since 0.1.0
 * @category models
 */
export type StoreTarget =
  | { readonly _tag: "Memory" }
  | { readonly _tag: "Sqlite"; readonly filename: string }
  | { readonly _tag: "Postgres"; readonly url: string }
  | {
    readonly _tag: "Plugin"
    readonly scheme: string
    readonly uri: URL
    readonly plugin: string
    readonly factory: StoreFactory
  }

/**
 * What resolution needs from a `PluginRegistry`: the store schemes, and the plugins that
 * failed to load (named in an unknown-scheme message, since the scheme may be theirs).
 *
 * @since 0.1.0
 * @category models
 */
export type StoreRegistry = Pick<PluginRegistry, "stores" | "errors">

/**
 * The store URI schemes a registry knows, built-in first (`file`, `postgres`, `postgresql`),
 * then the plugins' schemes in load order.
 *
 * @since 0.1.0
 * @category resolving
 */
export const knownSchemes = (registry: Pick<PluginRegistry, "stores">): ReadonlyArray<string> => [
  "file",
  "postgres",
  "postgresql",
  ...registry.stores.keys()
]

const problem = (message: string, suggestion?: string) => ({ message, suggestion })

const classify = (
  spec: string,
  registry: StoreRegistry
): Either.Either<StoreTarget, { readonly message: string; readonly suggestion: string | undefined }> => {
  if (spec === ":memory:") return Either.right({ _tag: "Memory" })
  const parsed = PluginUri.parse(spec)
  if (parsed._tag === "NotUri") {
    if (spec.trim() === "") return Either.left(problem("the store is empty: write a file path, \":memory:\" or a plugin URI"))
    return Either.right({ _tag: "Sqlite", filename: spec })
  }
  if (parsed._tag === "Malformed") {
    return Either.left(problem(`"${redactUrl(spec)}" is not a valid URI: ${parsed.message}`))
  }
  if (parsed.scheme === "postgres" || parsed.scheme === "postgresql") return Either.right({ _tag: "Postgres", url: spec.trim() })
  if (parsed.scheme === "file") {
    try {
      return Either.right({ _tag: "Sqlite", filename: fileURLToPath(parsed.uri) })
    } catch (e) {
      return Either.left(problem(
        `"${spec}" is not a usable file URI: ${e instanceof Error ? e.message : String(e)}`,
        "write file:///absolute/path.db or a plain path"
      ))
    }
  }
  const provided: Provided<StoreFactory> | undefined = registry.stores.get(parsed.scheme)
  if (provided !== undefined) {
    return Either.right({ _tag: "Plugin", scheme: parsed.scheme, uri: parsed.uri, plugin: provided.plugin, factory: provided.factory })
  }
  const known = knownSchemes(registry).map((s) => `${s}://`).join(", ")
  const broken = [...registry.errors.entries()].map(([p, e]) => `${p} (${e})`)
  return Either.left(problem(
    `no plugin provides the store scheme "${parsed.scheme}://" (known schemes: ${known})${
      broken.length > 0 ? `; plugins that failed to load: ${broken.join(", ")}` : ""
    }`,
    `add the plugin that provides "${parsed.scheme}" to \`plugins\`, or use a file path or ":memory:"`
  ))
}

/**
 * Resolves a store spec (see the module docs). Pure: nothing is imported or opened. Fails
 * with `ConfigError` whose issue has field path `path` (default `"run.store"`) when the spec
 * is empty, a malformed URI, an unusable `file:` URI, or a URI whose scheme no plugin
 * provides (the message names the scheme, the known schemes, and any plugin that failed to
 * load).
 *
 * @since 0.1.0
 * @category resolving
 */
export const resolve = (
  spec: string,
  registry: StoreRegistry,
  field = "run.store"
): Either.Either<StoreTarget, ConfigError> =>
  Either.mapLeft(classify(spec, registry), (p) =>
    new ConfigError({
      message: `${field}: ${p.message}`,
      issues: [
        p.suggestion === undefined
          ? { path: field, message: p.message }
          : { path: field, message: p.message, suggestion: p.suggestion }
      ]
    }))

/**
 * The validation check of a store spec, for the experiment loader (so `validate` refuses
 * exactly what `run` refuses): `None` when `spec` is absent or resolves, else the one
 * `ConfigIssue` (at `path`, default `"run.store"`) that {@link resolve} would fail with. A
 * non-string spec is left to the schema (`None`).
 *
 * @since 0.1.0
 * @category validation
 */
export const checkStoreSpec = (
  spec: unknown,
  registry: StoreRegistry,
  field = "run.store"
): Option.Option<ConfigIssue> =>
  typeof spec !== "string"
    ? Option.none()
    : Either.match(resolve(spec, registry, field), {
      onRight: () => Option.none(),
      onLeft: (e) => Option.fromNullable(e.issues[0])
    })

/**
 * The validation check of an artifact backend choice (`run.artifactBackend`): `None` when it
 * is absent or valid (a built-in form, or a `scheme://` a plugin provides), else the issues
 * `run` would refuse it with. Non-string, non-object values are left to the schema.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkArtifactBackendSpec = (
  spec: unknown,
  registry: Pick<PluginRegistry, "artifactBackends">
): Option.Option<ReadonlyArray<ConfigIssue>> => {
  if (typeof spec !== "string" && (typeof spec !== "object" || spec === null || Array.isArray(spec))) return Option.none()
  if (typeof spec === "object" && typeof (spec as { kind?: unknown }).kind !== "string") return Option.none()
  return Option.map(
    ArtifactBackends.check(spec as BackendInput, registry.artifactBackends),
    (e) => e.issues.map((i) => (i.path === "artifactBackend" ? { ...i, path: "run.artifactBackend" } : i))
  )
}

/**
 * How {@link layer} opens a store:
 * - `journal`: `"full"` or `"summary"` (written stores);
 * - `readOnly`: open for reading only (never create, migrate or write);
 * - `baseDir`: what relative parts of a plugin URI resolve against (given to the factory);
 * - `artifactBackend`: the backend choice of a written store (default `"inline"`; read-only
 *   stores always use the inline backend);
 * - `registry`: the plugins' stores and artifact backends.
 *
 * @since 0.1.0
 * @category models
 */
export interface OpenOptions {
  readonly journal: "full" | "summary"
  readonly readOnly: boolean
  readonly baseDir: string
  readonly artifactBackend?: BackendInput | null | undefined
  readonly registry: Pick<PluginRegistry, "stores" | "artifactBackends" | "errors">
  /**
   * With `readOnly`, a Postgres store only: one suite member's view (its id; `PgStore.layerReadOnlyMember`).
   * Not used for any other store (the read commands refuse `--experiment` there before opening).
   */
  readonly member?: string | undefined
}

const backendLayer = (options: OpenOptions) =>
  options.readOnly
    ? ArtifactBackends.layerInline
    : ArtifactBackends.layerWith(options.artifactBackend ?? "inline", {
      artifactBackends: options.registry.artifactBackends,
      baseDir: options.baseDir
    }).pipe(Layer.provide(NodeContext.layer))

/**
 * The `Store` layer of a resolved target. The memory store keeps payloads inline (as before);
 * an SQLite file opens with `SqliteStore.layerWith` (written) or `SqliteStore.layerReadOnly`;
 * a Postgres database with `PgStore.layerWith` (written; never migrated: an unmigrated
 * database is a `ConfigError` naming `assay migrate`) or `PgStore.layerReadOnly`;
 * a plugin store's factory gets the URI and `{ journal, readOnly, baseDir }`, and its layer
 * is given the artifact backend. Fails with `ConfigError` for a read-only `:memory:` (there
 * is nothing to read) or a bad backend choice, `StoreUnavailable` when the store cannot be
 * opened, `PluginError` when a plugin factory throws, returns no Layer, or its layer dies.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOf = (
  target: StoreTarget,
  options: OpenOptions
): Layer.Layer<Store, StoreUnavailable | ConfigError | PluginError> => {
  switch (target._tag) {
    case "Memory":
      return options.readOnly
        ? Layer.fail(
          new ConfigError({
            message: "\":memory:\" has nothing to read: give the store file or URI the run wrote",
            issues: [{ path: "store", message: "a fresh memory store is empty" }]
          })
        )
        : MemoryStore.layer({ journal: options.journal })
    case "Sqlite":
      return options.readOnly
        ? SqliteStore.layerReadOnly(target.filename)
        : SqliteStore.layerWith({ filename: target.filename, journal: options.journal }).pipe(
          Layer.provide(backendLayer(options))
        )
    case "Postgres":
      // loaded on demand: @effect/sql-pg is an optional peer dependency
      return Layer.unwrapEffect(Effect.map(loadPgStore, (PgStore) =>
        options.readOnly
          ? options.member !== undefined ? PgStore.layerReadOnlyMember(target.url, options.member) : PgStore.layerReadOnly(target.url)
          : PgStore.layerWith({ url: target.url, journal: options.journal }).pipe(Layer.provide(backendLayer(options)))))
    case "Plugin":
      return PluginUri.guardFactory(
        "store",
        target.plugin,
        target.scheme,
        () => target.factory(target.uri, { journal: options.journal, readOnly: options.readOnly, baseDir: options.baseDir })
      ).pipe(Layer.provide(backendLayer(options)))
  }
}

/**
 * Resolves `spec` ({@link resolve}, issues at `path`) and opens it ({@link layerOf}).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  spec: string,
  options: OpenOptions & { readonly path?: string | undefined }
): Layer.Layer<Store, StoreUnavailable | ConfigError | PluginError> =>
  Either.match(resolve(spec, options.registry, options.path ?? "run.store"), {
    onLeft: (e) => Layer.fail(e),
    onRight: (target) => layerOf(target, options)
  })

/**
 * Opens a store read-only in the current scope (what report, export, merge, serve and watch
 * do with each store argument): a path or `file:` URI through `SqliteStore.layerReadOnly`, a
 * plugin URI through its plugin's factory with `readOnly: true`. Fails as {@link layer}
 * (issues at field path `store`).
 *
 * @since 0.1.0
 * @category opening
 */
export const openReadOnly = (
  spec: string,
  options: { readonly registry: OpenOptions["registry"]; readonly baseDir: string }
): Effect.Effect<StoreService, StoreUnavailable | ConfigError | PluginError, Scope.Scope> =>
  Effect.map(
    Layer.build(layer(spec, { ...options, journal: "full", readOnly: true, path: "store" })),
    (ctx) => Context.get(ctx, Store)
  )

/**
 * The {@link Store.StoreOpener} of this resolver: what `Export`, `Report` and `Merge` open their
 * store arguments with, exactly as the CLI does ({@link openReadOnly}: paths, `file:` URIs, and
 * the plugin URIs of `registry`, default none; relative plugin URI parts against `baseDir`,
 * default the working directory at each open).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOpener = (
  options: {
    readonly registry?: OpenOptions["registry"] | undefined
    readonly baseDir?: string | undefined
  } = {}
): Layer.Layer<StoreOpener> =>
  Layer.succeed(StoreOpener, {
    openReadOnly: (source) =>
      Effect.suspend(() =>
        openReadOnly(source, {
          registry: options.registry ?? Plugins.empty,
          baseDir: options.baseDir ?? process.cwd()
        })
      )
  })

/**
 * Creates the parent directory of an SQLite target (a run writes a fresh file there); does
 * nothing for the memory store or a plugin store. Never fails (opening the store reports a
 * directory that cannot be created).
 *
 * @since 0.1.0
 * @category opening
 */
export const ensureParent = (target: StoreTarget): Effect.Effect<void, never, FileSystem.FileSystem> =>
  target._tag === "Sqlite"
    ? Effect.sync(() => {
      try {
        makeDirectories(path.dirname(target.filename))
      } catch {
        // opening the store reports it, in words
      }
    })
    : Effect.void
