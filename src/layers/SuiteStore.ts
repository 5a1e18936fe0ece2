/**
 * The store of a suite root: one output root (`output.root`) holding every member's state, in
 * one of two layouts, behind an ordinary `Store` (so the runner never knows about layouts) and
 * the `SuiteCatalog` (members, per-run membership, read views).
 *
 * ```
 * combined/                 byExperiment/
 *   manifest.json             manifest.json
 *   state.db                  suite.db
 *   artifacts/                experiments/ID/state.db
 *                             experiments/ID/artifacts/
 * ```
 *
 * - **manifest.json**: layout version, suite id, layout, catalog locator and the artifact
 *   backend spec; never member configurations or secrets. It is checked before any database is
 *   opened: a root never changes its suite id (`ConfigError`, path `suite.id`), its layout
 *   (path `output.layout`) or its backend (path `run.artifactBackend`) in place. A directory
 *   that holds store files but no manifest is refused (path `output.root`).
 * - **combined**: `state.db` is an ordinary SQLite store that also holds the catalog tables;
 *   the `Store` is that store.
 * - **byExperiment**: `suite.db` (an SQLite store) holds the catalog, the runs, pool and run
 *   events, run-scope metrics and resources; each member's pipelines, tasks, artifacts,
 *   attempts, events and visit transitions live in its own `experiments/ID/state.db`, so a
 *   task's checkpoint never spans two databases. The `Store` routes each write by the member
 *   prefix of its pipeline id (see `internal/suite/router.ts`). Member databases are opened on
 *   demand, at most `maxOpen` (default 8) at once, the least recently used idle one closed
 *   (flushed) to make room. Members this run did not select are never opened for writing nor
 *   migrated (reads open them read-only); a member database the catalog knows was created but
 *   that is missing is an error, never silently recreated.
 * - **artifacts**: `artifactBackend: "file"` is the layout-owned file backend rooted in each
 *   layout's `artifacts/` (blob references are content digests, relative to it, so the root can
 *   be moved); other specs keep their ordinary meaning (an external backend shared by every
 *   database); absent = inline payloads. Reopening inherits the manifest's backend.
 * - **one writer**: the catalog database's writer lock (see `SqliteStore`) is the root's; any
 *   number of read-only monitors ({@link layerRead}).
 * - **reads**: the `Store`'s reads and `SuiteCatalog.view()` are the merged cumulative view of
 *   every member; `view(ID)` one member (see `internal/suite/view.ts` for the merge of limited
 *   queries: at most N candidates per database, aggregates per database summed).
 *
 * @since 0.5.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Console, Context, Effect, Layer, type Scope } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { ConfigError, type PluginError, StoreUnavailable } from "../domain/Errors.js"
import type { SuiteLayout } from "../domain/Suite.js"
import { checkId, idKey, memberDigest, memberDigestOf, memberPath } from "../domain/Suite.js"
import { ArtifactBackend, type ArtifactBackendService, type BackendInput } from "../services/ArtifactBackend.js"
import { checkOptions } from "../services/internal/store/shared.js"
import type { NewRun, StoreOptions, StoreService } from "../services/Store.js"
import { makeWith, Store } from "../services/Store.js"
import { StudyCatalog, type StudyCatalogService } from "../services/StudyCatalog.js"
import { type MemberRecord, SuiteCatalog, type SuiteCatalogService, type SupersededRecord } from "../services/SuiteCatalog.js"
import * as ArtifactBackends from "./ArtifactBackends.js"
import { makeDriverWithEnv } from "./internal/sqlite/driver.js"
import * as StudyTables from "./internal/study/tables.js"
import * as Catalog from "./internal/suite/catalog.js"
import * as Manifest from "./internal/suite/manifest.js"
import { makeCache, memberDbPresent, memberFile, missingMemberDbMessage } from "./internal/suite/members.js"
import { makeRouter } from "./internal/suite/router.js"
import { type Db, makeDb, makeView, type Source, type SuiteView } from "./internal/suite/view.js"

/**
 * Options of a suite store.
 *
 * - `root`: the output root (made absolute against the working directory);
 * - `suiteId`, `layout`: the suite's identity and layout (checked against the manifest);
 * - `members`: every member id of the suite (routing and the merged view);
 * - `selected`: the members this run writes (default: every member); the others' databases
 *   are never opened for writing;
 * - `readOnly`: open for reading only (no lock, nothing created, migrated or written);
 * - `artifactBackend`: `"file"` = the layout-owned `artifacts/` directories; any other
 *   `BackendInput` keeps its ordinary meaning; absent = the manifest's (inline for a new root);
 * - `artifactBackendLayer`: the backend of an `artifactBackend` spec the caller resolves itself
 *   (a plugin's URI, see `ArtifactBackends.layerWith`): shared by every database of the root;
 *   the manifest records the spec, which must then be given;
 * - `maxOpen`: member databases open at once (`byExperiment`; a positive integer, default 8);
 * - `journal`, `batchSize`, `flushIntervalMs`, `writeBehind`: as for every store, applied to
 *   every database of the root.
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteStoreOptions extends StoreOptions {
  readonly root: string
  readonly suiteId: string
  readonly layout: SuiteLayout
  readonly members: ReadonlyArray<string>
  readonly selected?: ReadonlyArray<string> | undefined
  readonly readOnly?: boolean | undefined
  readonly artifactBackend?: BackendInput | undefined
  readonly artifactBackendLayer?: Layer.Layer<ArtifactBackend, StoreUnavailable | ConfigError | PluginError> | undefined
  readonly maxOpen?: number | undefined
}

/**
 * The default number of member databases open at once.
 *
 * @since 0.5.0
 * @category constants
 */
export const DEFAULT_MAX_OPEN = 8

/**
 * The store and catalogs of an open suite root: `study` is the study catalog on the same
 * catalog database (a study's root is its suite's root; see `StudyCatalog`).
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteStoreHandle {
  readonly store: StoreService
  readonly catalog: SuiteCatalogService
  readonly study: StudyCatalogService
}

const issue = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/** Store files a suite root may hold: a directory with any of them and no manifest is not a fresh root. */
const ROOT_FILES = ["state.db", "suite.db", "experiments"]

const checkOptionsOf = (o: SuiteStoreOptions): Effect.Effect<void, ConfigError> =>
  Effect.gen(function*() {
    const bad = checkId(o.suiteId)
    if (bad !== undefined) return yield* issue("suite.id", `${JSON.stringify(o.suiteId)} ${bad}`)
    if (o.layout !== "combined" && o.layout !== "byExperiment") {
      return yield* issue("output.layout", `must be "combined" or "byExperiment", got ${JSON.stringify(o.layout)}`)
    }
    const seen = new Map<string, string>()
    for (const m of o.members) {
      const reason = checkId(m)
      if (reason !== undefined) return yield* issue(memberPath(m), `the member id ${JSON.stringify(m)} ${reason}`)
      const other = seen.get(idKey(m))
      if (other !== undefined) return yield* issue(memberPath(m), `the member ids "${other}" and "${m}" differ only in letter case`)
      seen.set(idKey(m), m)
    }
    for (const s of o.selected ?? []) {
      if (!o.members.includes(s)) {
        return yield* issue("experiment", `"${s}" is not a member of suite "${o.suiteId}" (members: ${o.members.join(", ")})`)
      }
    }
    if (o.artifactBackendLayer !== undefined && (o.artifactBackend === undefined || o.artifactBackend === "file")) {
      return yield* issue("run.artifactBackend", "a backend layer needs the spec it was built from (other than the layout-owned \"file\")")
    }
    if (o.maxOpen !== undefined && !(Number.isInteger(o.maxOpen) && o.maxOpen > 0)) {
      return yield* issue("maxOpen", `must be a positive integer, got ${o.maxOpen}`)
    }
    yield* checkOptions(o)
  })

/**
 * Whether `path` is a suite root: a directory holding `manifest.json`.
 *
 * @since 0.5.0
 * @category files
 */
export const isSuiteRoot = (path: string): Effect.Effect<boolean> =>
  Effect.sync(() => {
    try {
      return fs.statSync(path).isDirectory() && fs.statSync(nodePath.join(path, Manifest.MANIFEST)).isFile()
    } catch {
      return false
    }
  })

/**
 * The suite root a store file belongs to, if any: a file directly in a suite root (its
 * `state.db`, `suite.db`, or any other file there) or in a member's folder
 * (`ROOT/experiments/ID/…`). Returns the root (absolute) and the suite id of its manifest (the
 * id is `undefined` when the manifest cannot be read); `undefined` when the file is in no suite
 * root. Reads nothing but the manifest; never fails.
 *
 * @param file a store file path (made absolute against the working directory)
 * @since 0.5.0
 * @category files
 */
export const suiteRootOfFile = (
  file: string
): Effect.Effect<{ readonly root: string; readonly suiteId: string | undefined } | undefined> =>
  Effect.sync(() => Manifest.ownerOfFile(file))

/**
 * What a path that is not a suite root is, in words, for the messages of commands that
 * expected a suite root (or a store) and were given something else: `found` says what is there
 * (`does not exist`, `is a directory without manifest.json`, `is the database of member "a" of
 * suite "s"`, `is the catalog database of suite "s"`, `is a folder inside the suite root …`,
 * `is a file, not a directory`), and `root` is the suite root it belongs to, when it lies inside
 * one (the path to give instead). Reads nothing but directory entries and manifests; never fails.
 *
 * @param path the path as given (made absolute against the working directory)
 * @returns what is there, and the enclosing suite root if any
 * @since 0.6.0
 * @category files
 */
export const describePath = (
  path: string
): Effect.Effect<{ readonly found: string; readonly root: string | undefined }> =>
  Effect.gen(function*() {
    const abs = nodePath.resolve(path)
    const stat = yield* Effect.sync(() => {
      try {
        return fs.statSync(abs)
      } catch {
        return undefined
      }
    })
    const suiteName = (id: string | undefined) => id === undefined ? "a suite" : `suite "${id}"`
    const enclosing = Effect.gen(function*() {
      for (let up = nodePath.dirname(abs), i = 0; i < 3 && up !== nodePath.dirname(up); up = nodePath.dirname(up), i++) {
        if (yield* isSuiteRoot(up)) {
          const manifest = yield* Effect.orElseSucceed(Manifest.read(up), () => undefined)
          return { root: up, name: suiteName(manifest?.suiteId) }
        }
      }
      return undefined
    })
    if (stat === undefined) {
      const inside = yield* enclosing
      return inside === undefined
        ? { found: "does not exist", root: undefined }
        : { found: `does not exist (it would be inside the root of ${inside.name})`, root: inside.root }
    }
    if (stat.isFile()) {
      const owner = yield* suiteRootOfFile(abs)
      if (owner === undefined) return { found: "is a file, not a directory", root: undefined }
      const rel = nodePath.relative(owner.root, abs).split(nodePath.sep)
      const what = rel.length === 3 && rel[0] === "experiments" && rel[2] === "state.db"
        ? `the database of member "${rel[1]}" of ${suiteName(owner.suiteId)}`
        : rel.length === 1 && rel[0] === "suite.db"
        ? `the catalog database of ${suiteName(owner.suiteId)}`
        : rel.length === 1 && rel[0] === "state.db"
        ? `the database of ${suiteName(owner.suiteId)} (combined layout)`
        : `a file inside the root of ${suiteName(owner.suiteId)}`
      return { found: `is ${what}, not its root`, root: owner.root }
    }
    // a folder inside a root: ROOT/experiments, ROOT/experiments/ID, ROOT/artifacts, ...
    const inside = yield* enclosing
    if (inside !== undefined) return { found: `is a folder inside the root of ${inside.name}, not the root itself`, root: inside.root }
    return { found: `is a directory without ${Manifest.MANIFEST}`, root: undefined }
  })

/**
 * One sentence for a command that expected a suite root at `path`: what is there, and the root
 * to give instead when the path lies inside one (see {@link describePath}).
 *
 * @param path the path as given
 * @returns e.g. `out/experiments/a/state.db is the database of member "a" of suite "s", not its
 *   root: give the root, /abs/out`
 * @since 0.6.0
 * @category files
 */
export const notARootMessage = (path: string): Effect.Effect<string> =>
  Effect.map(describePath(path), ({ found, root }) =>
    `${path} ${found}${root === undefined ? "" : `: give the root, ${root}`}`)

/**
 * Opens a suite root in the current scope (see the module docs) and returns its store and
 * catalog. Fails with `ConfigError` on invalid options or a root of another suite, layout or
 * backend, `StoreUnavailable` when a database cannot be opened (held by another writer, a
 * missing member database, a read-only open of a root without a manifest).
 *
 * @since 0.5.0
 * @category constructors
 */
export const make = (
  o: SuiteStoreOptions
): Effect.Effect<SuiteStoreHandle, StoreUnavailable | ConfigError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkOptionsOf(o)
    const fileSystem = yield* FileSystem.FileSystem
    const root = nodePath.resolve(o.root)
    const readOnly = o.readOnly === true
    const layout = o.layout

    // --- the manifest, before any database is opened -------------------------------------------
    let manifest = yield* Manifest.read(root)
    if (manifest === undefined) {
      if (readOnly) {
        return yield* new StoreUnavailable({ message: `no suite root at ${root} (no ${Manifest.MANIFEST}); read-only opens never create one`, path: root })
      }
      const present = ROOT_FILES.filter((f) => fs.existsSync(nodePath.join(root, f)))
      // another writer creating the root at the same time writes its manifest before any database:
      // read it again, so that this one meets that writer's lock (not a "no manifest" refusal)
      if (present.length > 0) manifest = yield* Manifest.read(root)
    }
    if (manifest === undefined) {
      const present = ROOT_FILES.filter((f) => fs.existsSync(nodePath.join(root, f)))
      if (present.length > 0) {
        return yield* issue(
          "output.root",
          `${root} holds ${present.join(", ")} but no ${Manifest.MANIFEST}: it is not a suite root (use an empty or new directory)`
        )
      }
      manifest = yield* Manifest.create(root, Manifest.make(o.suiteId, layout, o.artifactBackend))
    }
    const backendSpec = yield* Manifest.check(root, manifest, { suiteId: o.suiteId, layout, artifactBackend: o.artifactBackend })

    // --- artifact backends ---------------------------------------------------------------------
    const external = o.artifactBackendLayer ?? (backendSpec === undefined || backendSpec === "file"
      ? undefined
      : ArtifactBackends.layer(backendSpec).pipe(Layer.provide(Layer.succeed(FileSystem.FileSystem, fileSystem))))
    const shared: ArtifactBackendService | undefined = backendSpec === undefined
      ? ArtifactBackends.inline
      : backendSpec === "file"
      ? undefined
      : yield* Effect.map(
        Layer.build(external!).pipe(
          Effect.catchTag("PluginError", (e) => Effect.fail(issue("run.artifactBackend", e.message)))
        ),
        (ctx) => Context.get(ctx, ArtifactBackend)
      )
    /** The backend of the databases under `dir` (layout-owned: `dir/artifacts`, created only by a writer). */
    const backendIn = (dir: string, writable: boolean): Effect.Effect<ArtifactBackendService, StoreUnavailable> => {
      if (shared !== undefined) return Effect.succeed(shared)
      const artifacts = nodePath.join(dir, "artifacts")
      if (!writable && !fs.existsSync(artifacts)) return Effect.succeed(ArtifactBackends.inline)
      return ArtifactBackends.makeFile({ root: artifacts }).pipe(Effect.provideService(FileSystem.FileSystem, fileSystem))
    }

    // --- the catalog database ------------------------------------------------------------------
    const storeOptions: StoreOptions = {
      journal: o.journal,
      batchSize: o.batchSize,
      flushIntervalMs: o.flushIntervalMs,
      writeBehind: o.writeBehind
    }
    const catalogFile = nodePath.join(root, Manifest.catalogOf(layout))
    const catalogBackend = layout === "combined" ? yield* backendIn(root, !readOnly) : ArtifactBackends.inline
    const { driver, env } = yield* makeDriverWithEnv({ ...storeOptions, filename: catalogFile, readonly: readOnly, suiteRoot: root }).pipe(
      Effect.provideService(ArtifactBackend, catalogBackend)
    )
    const catalogService = yield* makeWith(driver, storeOptions).pipe(Effect.provideService(ArtifactBackend, catalogBackend))
    const catalogDb: Db = yield* makeDb(catalogService, env)
    const always = (db: Db): Source => ({
      name: "",
      use: (f) => f(db),
      featureLevel: () => db.service.featureLevel
    })
    const catalogSource = always(catalogDb)

    // --- members -------------------------------------------------------------------------------
    const registered: Array<MemberRecord> = [...(yield* Catalog.members(env))]
    const created = new Set(yield* Catalog.memberDbs(env))
    const found = layout === "combined" ? yield* Catalog.pipelineMembers(env) : []
    const memberIds = (): ReadonlyArray<string> =>
      Array.from(new Set([...o.members, ...registered.map((m) => m.experimentId), ...created, ...found])).sort()
    const memberOfDigest = new Map<string, string>()
    const learn = (id: string) => memberOfDigest.set(memberDigest(o.suiteId, id), id)
    for (const id of memberIds()) learn(id)
    const selected = readOnly ? [] : [...(o.selected ?? o.members)].sort()
    const memberMetricPrefix = (id: string) => `experiment:${id}:`
    const journal = o.journal ?? "full"

    // member databases the catalog recorded as created but which are gone: a selected one refuses
    // the run before anything is recorded; any other is only read, as empty, with a warning
    const missing = layout === "byExperiment"
      ? Array.from(created).filter((id) => !memberDbPresent(memberFile(root, id))).sort()
      : []
    for (const id of missing) {
      if (selected.includes(id)) {
        return yield* issue(memberPath(id), missingMemberDbMessage(id, memberFile(root, id)))
      }
    }
    for (const id of missing) {
      yield* Console.error(
        `warning: suite "${o.suiteId}": the database of member "${id}" (${memberFile(root, id)}) is missing; ` +
          `that member reads as empty (restore the file to see its results)`
      )
    }

    let activeRun: NewRun | undefined
    const cache = layout === "byExperiment"
      ? yield* makeCache({
        root,
        suiteId: o.suiteId,
        selected: new Set(selected),
        readOnly,
        maxOpen: o.maxOpen ?? DEFAULT_MAX_OPEN,
        catalog: env,
        created,
        storeOptions,
        backendOf: (id, writable) => backendIn(nodePath.join(root, "experiments", id), writable),
        activeRun: () => activeRun
      })
      : undefined
    const memberSource = (id: string): Source =>
      cache === undefined
        ? always({ ...catalogDb, prefix: `${memberDigest(o.suiteId, id)}-` })
        : {
          name: id,
          use: (f, empty) => cache.use(id, f, empty),
          isOpen: () => cache.isOpen(id),
          featureLevel: () => cache.levelOf(id)
        }

    const mergedView = (): SuiteView => {
      if (cache === undefined) {
        return makeView({
          runs: catalogSource,
          extraEvents: undefined,
          sources: [catalogSource],
          route: () => catalogSource,
          memberMetricPrefix: undefined,
          readOnly,
          journal
        })
      }
      const sources = new Map(memberIds().map((id) => [id, memberSource(id)]))
      return makeView({
        runs: catalogSource,
        extraEvents: catalogSource,
        sources: Array.from(sources.values()),
        route: (pipelineId) => {
          const digest = memberDigestOf(pipelineId)
          const id = digest === undefined ? undefined : memberOfDigest.get(digest)
          return id === undefined ? undefined : sources.get(id)
        },
        memberMetricPrefix: undefined,
        readOnly,
        journal
      })
    }
    const memberView = (id: string): SuiteView => {
      const source = memberSource(id)
      const prefix = `${memberDigest(o.suiteId, id)}-`
      return makeView({
        runs: catalogSource,
        extraEvents: undefined,
        sources: [source],
        route: (pipelineId) => (pipelineId.startsWith(prefix) ? source : undefined),
        memberMetricPrefix: memberMetricPrefix(id),
        readOnly,
        journal
      })
    }

    const store: StoreService = cache === undefined
      ? catalogService
      : makeRouter({
        suiteId: o.suiteId,
        catalog: catalogDb,
        cache,
        memberOfDigest,
        selected,
        view: mergedView(),
        setActiveRun: (run) => {
          activeRun = run
        }
      })

    const catalog: SuiteCatalogService = {
      suiteId: o.suiteId,
      layout,
      root,
      outputDirOf: (id) => (layout === "combined" ? root : nodePath.join(root, "experiments", id)),
      missingDatabases: missing.map((id) => ({ experimentId: id, file: memberFile(root, id) })),
      registerMembers: (ms, nowMs) =>
        Effect.gen(function*() {
          for (const m of ms) {
            const reason = checkId(m.experimentId)
            if (reason !== undefined) return yield* issue(memberPath(m.experimentId), `the member id ${reason}`)
          }
          if (readOnly) return yield* env.roError
          // a member database or pipelines under an id that differs only in case (a root the catalog
          // rows do not cover): refused like a registered one, before anything is written
          const existing = new Map([...created, ...found].map((id) => [idKey(id), id]))
          for (const m of ms) {
            const other = existing.get(idKey(m.experimentId))
            if (other !== undefined && other !== m.experimentId) {
              return yield* issue(
                memberPath(m.experimentId),
                `the member id "${m.experimentId}" differs only in letter case from the existing member "${other}" ` +
                  `(ids name directories, which some file systems do not tell apart by case): spell it "${other}" or use another id`
              )
            }
          }
          yield* Catalog.registerMembers(env, ms, nowMs)
          for (const m of ms) learn(m.experimentId)
          const now = yield* Catalog.members(env)
          registered.splice(0, registered.length, ...now)
        }),
      members: Catalog.members(env),
      recordMembership: (runId, experimentId, facts, nowMs) => Catalog.recordMembership(env, runId, experimentId, facts, nowMs),
      membership: (runId) => Catalog.membership(env, runId),
      acceptChangedRows: (change) =>
        Effect.gen(function*() {
          if (readOnly) return yield* env.roError
          const n = yield* memberSource(change.experimentId).use((db) => Catalog.supersede(db.env, change), 0)
          if (change.staleKeys.length > 0) {
            yield* Catalog.recordAcceptance(env, {
              experimentId: change.experimentId,
              acceptedAt: change.nowMs,
              staleKeys: change.staleKeys,
              newKeys: change.newKeys,
              pipelines: n
            })
          }
          return n
        }),
      acceptances: Catalog.acceptances(env),
      superseded: (experimentId) =>
        Effect.suspend((): Effect.Effect<ReadonlyArray<SupersededRecord>, StoreUnavailable | ConfigError> => {
          if (experimentId === undefined) return mergedView().superseded
          if (!memberIds().includes(experimentId)) {
            return Effect.fail(
              issue("experiment", `"${experimentId}" is not a member of suite "${o.suiteId}" (members: ${memberIds().join(", ") || "none"})`)
            )
          }
          return memberView(experimentId).superseded
        }),
      view: (experimentId) =>
        Effect.suspend(() => {
          if (experimentId === undefined) return Effect.succeed(mergedView())
          if (!memberIds().includes(experimentId)) {
            return Effect.fail(
              issue("experiment", `"${experimentId}" is not a member of suite "${o.suiteId}" (members: ${memberIds().join(", ") || "none"})`)
            )
          }
          return Effect.succeed(memberView(experimentId))
        })
    }
    return { store, catalog, study: StudyTables.make(env) }
  })

/**
 * A suite root as layers: the `Store` (an ordinary store service, see the module docs), the
 * `SuiteCatalog` and the `StudyCatalog` (empty unless a study runs on the root). Hoist the layer into a module-level constant: two builds would be two
 * writers on one root (the second is refused).
 *
 * @since 0.5.0
 * @category layers
 */
export const layer = (
  o: SuiteStoreOptions
): Layer.Layer<Store | SuiteCatalog | StudyCatalog, StoreUnavailable | ConfigError, FileSystem.FileSystem> =>
  Layer.scopedContext(Effect.map(make(o), contextOf))

const contextOf = (h: SuiteStoreHandle) =>
  Context.make(Store, h.store).pipe(Context.add(SuiteCatalog, h.catalog), Context.add(StudyCatalog, h.study))

/**
 * Opens an existing suite root read-only (report, watch, serve, export): suite id and layout
 * come from its manifest, members from its catalog; with `experiment`, the `Store`'s reads are
 * that member's view. Never locks, creates, migrates or writes; every write fails with
 * `StoreUnavailable`. Fails with `StoreUnavailable` when `root` is not a suite root and with
 * `ConfigError` (path `experiment`) on an unknown member.
 *
 * @since 0.5.0
 * @category layers
 */
export const makeRead = (
  root: string,
  options: { readonly experiment?: string | undefined } = {}
): Effect.Effect<SuiteStoreHandle, StoreUnavailable | ConfigError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const manifest = yield* Manifest.read(nodePath.resolve(root))
    if (manifest === undefined) {
      return yield* new StoreUnavailable({ message: `${root} is not a suite root (no ${Manifest.MANIFEST})`, path: root })
    }
    const h = yield* make({ root, suiteId: manifest.suiteId, layout: manifest.layout, members: [], readOnly: true })
    if (options.experiment === undefined) return h
    const view = yield* h.catalog.view(options.experiment)
    // (a spread copies the feature level's value: read it through the view instead)
    const store: StoreService = Object.defineProperty({ ...h.store, ...view }, "featureLevel", {
      get: () => view.featureLevel,
      enumerable: true
    })
    return { store, catalog: h.catalog, study: h.study }
  })

/**
 * {@link makeRead} as layers (`Store`, `SuiteCatalog` and `StudyCatalog`).
 *
 * @since 0.5.0
 * @category layers
 */
export const layerRead = (
  root: string,
  options: { readonly experiment?: string | undefined } = {}
): Layer.Layer<Store | SuiteCatalog | StudyCatalog, StoreUnavailable | ConfigError, FileSystem.FileSystem> =>
  Layer.scopedContext(Effect.map(makeRead(root, options), contextOf))
