/**
 * The store on PostgreSQL: one database shared by every process of a scale-out deployment
 * (runners, the submitter, `report`, `watch`, `serve`, `export`), behind the same store front
 * as `SqliteStore` and `MemoryStore` (one contract suite runs against all three).
 *
 * - **Client.** The store opens its own `PgClient` (`@effect/sql-pg`, a node-postgres pool) on
 *   the URL it is given; each group-commit batch of the front is committed in one transaction
 *   over it, and so is each write-behind batch.
 * - **First-writer-wins checkpoints.** A task's output is committed at most once per
 *   `(pipeline, seq, visit)`: the first writer inserts the key into `assay_checkpoints`; a later
 *   writer of the same key (a runner that re-ran an activity after a crash, a paused runner
 *   that came back) writes only its attempts and events, and reading the output back gives the
 *   winner's value ({@link commitCheckpoint} does both). See `internal/pg/driver.ts`.
 * - **Fenced by the run (fence38).** A checkpoint unit with a task row is written only while
 *   its pipeline's row is `running` under the task row's run: a late commit of an
 *   execution whose pipeline failed and was admitted again by another run meanwhile writes only
 *   its attempts and events, and leaves the row (and the checkpoint key) to the new run. Read
 *   back, such a unit gives what the store holds (nothing yet, or the new run's output).
 * - **Schema.** Migrations run through `@effect/sql`'s `Migrator` (table
 *   `assay_store_migrations`), once, by `assay migrate --database URL` ({@link migrate}) before
 *   any writer starts; concurrent migrations serialize on an advisory lock. Opening an
 *   unmigrated database fails with `ConfigError` (CLI exit 2) naming the command to run; `run`
 *   does not create the schema on its own (a deployment step, not a side effect of one writer);
 *   a database migrated by a newer assay is refused with `StoreUnavailable`. The `migrate`
 *   option of {@link make} exists for programs and tests that own their database.
 * - **Secrets.** A URL's password never appears in a message, a log line or a header: every
 *   message shows the URL through `redactUrl`.
 * - **Errors.** Every SQL failure (connection refused, server restarting, serialization
 *   failure, deadlock) is a typed `StoreUnavailable`, never a defect; a caller that must ride out
 *   a database failover retries it (the engine does, inside the activity).
 *
 * @since 0.8.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Config, Duration, Effect, Layer, Option, type Scope } from "effect"
import { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import * as Traversal from "../domain/Traversal.js"
import { ArtifactBackend } from "../services/ArtifactBackend.js"
import { checkOptions } from "../services/internal/store/shared.js"
import { BASE_LEVEL, VISITS_LEVEL } from "../services/internal/store/traversal.js"
import type { CheckpointUnit, LoadedArtifact, StoreDriver, StoreOptions, StoreService } from "../services/Store.js"
import { makeWith, Store } from "../services/Store.js"
import { layerInline } from "./ArtifactBackends.js"
import { makeWith as makeCallCache } from "./internal/pg/callCache.js"
import { makeDriver as makePgDriver, type MemberScope, unavailableOf } from "./internal/pg/driver.js"
import { idKey, memberDigest } from "../domain/Suite.js"
import * as Migrations from "./internal/pg/migrations.js"
import * as Prepared from "./internal/pg/prepared.js"
import { isPostgresUrl, redactUrl } from "./internal/pg/url.js"

/**
 * `isPostgresUrl(spec)`: whether a store spec is a `postgres://` / `postgresql://` URL;
 * `redactUrl(url)`: the URL as assay shows it, its password replaced by `***`.
 *
 * @since 0.8.0
 * @category urls
 */
export { isPostgresUrl, redactUrl }

/**
 * Options of the Postgres store.
 *
 * - `url`: the connection URL (`postgres://user:password@host:port/database?…`);
 * - `readonly`: open for reading only (report, watch, serve, export): every write fails with
 *   `StoreUnavailable`; the schema is checked, never migrated;
 * - `migrate`: bring the schema up to date at open (default `false`: run `assay migrate`);
 * - `maxConnections`: size of the store's connection pool (default 4).
 *
 * @since 0.8.0
 * @category models
 */
export interface PgStoreOptions extends StoreOptions {
  readonly url: string
  readonly readonly?: boolean | undefined
  readonly migrate?: boolean | undefined
  readonly maxConnections?: number | undefined
  /**
   * How long a write or read that failed because the database could not be reached (a
   * restart, a failover) is retried before it fails with `StoreUnavailable`: exponential from
   * 100 ms, each wait at most 2 s. Default: the `ASSAY_STORE_RETRY` environment variable (a
   * duration such as `"1 minute"`), else 30 s; `0` never retries.
   */
  readonly retryFor?: Duration.DurationInput | undefined
  /**
   * With `readonly`: the reads see one suite member's pipelines alone (`PgDriver.MemberScope`;
   * see {@link layerReadOnlyMember}). Ignored for a store opened for writing.
   */
  readonly member?: MemberScope | undefined
}

/** The retry window from the environment (`ASSAY_STORE_RETRY`), else 30 s. */
const retryForConfig: Effect.Effect<Duration.Duration, ConfigError> = Effect.mapError(
  Config.duration("ASSAY_STORE_RETRY").pipe(Config.withDefault(Duration.seconds(30))),
  (e) => {
    const message = `ASSAY_STORE_RETRY: ${String(e)}; give a duration such as "30 seconds"`
    return new ConfigError({ message, issues: [{ path: "ASSAY_STORE_RETRY", message }] })
  }
)

/**
 * A `PgClient` on `url` in the current scope (closed with it), connected and checked with one
 * query. Fails with `StoreUnavailable` (the URL shown without its password) when the server
 * cannot be reached or refuses the login within 10 s.
 *
 * @since 0.8.0
 * @category constructors
 */
export const makeClient = (
  url: string,
  options: { readonly maxConnections?: number | undefined } = {}
): Effect.Effect<PgClient.PgClient, StoreUnavailable, Scope.Scope> =>
  Prepared.makeClient(url, {
    maxConnections: options.maxConnections ?? 4,
    connectTimeout: "10 seconds",
    applicationName: "assay"
  }).pipe(
    Effect.provide(Reactivity.layer),
    Effect.mapError((e) => unavailableOf(url, "connecting", e))
  )

const migrationError = (url: string, e: unknown): StoreUnavailable =>
  e instanceof Migrations.NewerSchema
    ? newer(url, e.version)
    : unavailableOf(url, "migration", e)

const newer = (url: string, version: number) =>
  new StoreUnavailable({
    message: `postgres store ${redactUrl(url)} has schema version ${version}, newer than this build's ${Migrations.SCHEMA_VERSION}; use a newer assay`,
    path: redactUrl(url)
  })

/**
 * Migrates the store schema of the database at `url` to this build's version (see the module
 * docs), over a client of its own; returns the migrations applied (`[id, name]`, empty when
 * the database was up to date). Safe to run from several processes at once. Fails with
 * `StoreUnavailable` when the database cannot be reached, a migration fails (nothing of it
 * applied) or the database is newer than this build.
 *
 * @since 0.8.0
 * @category migrations
 */
export const migrate = (url: string): Effect.Effect<ReadonlyArray<readonly [number, string]>, StoreUnavailable> =>
  Effect.scoped(Effect.flatMap(makeClient(url, { maxConnections: 1 }), (sql) => migrateWith(sql, url)))

/**
 * {@link migrate} over an existing client (`url` only names the database in messages).
 *
 * @since 0.8.0
 * @category migrations
 */
export const migrateWith = (
  sql: SqlClient.SqlClient,
  url: string
): Effect.Effect<ReadonlyArray<readonly [number, string]>, StoreUnavailable> =>
  Effect.mapError(Migrations.migrate(sql), (e) => migrationError(url, e))

/**
 * Checks the schema of an open database: `ConfigError` (exit 2) when it was never migrated or
 * misses a migration of this build, naming `assay migrate --database <url>`; `StoreUnavailable`
 * when it is newer or its feature level is unknown. Returns the feature level.
 */
const checkSchema = (sql: SqlClient.SqlClient, url: string): Effect.Effect<string, StoreUnavailable | ConfigError> =>
  Effect.gen(function*() {
    const version = yield* Effect.mapError(Migrations.schemaVersion(sql), (e) => unavailableOf(url, "opening", e))
    const problem = Migrations.problemOf(version)
    if (problem !== undefined) {
      const shown = redactUrl(url)
      switch (problem._tag) {
        case "newer":
          return yield* newer(url, problem.version)
        case "unmigrated":
        case "older": {
          const what = problem._tag === "unmigrated"
            ? "has no assay store schema"
            : `has store schema version ${problem.version}, older than this build's ${Migrations.SCHEMA_VERSION}`
          const message = `the database ${shown} ${what}: run \`assay migrate --database ${shown}\` once before opening it`
          return yield* new ConfigError({
            message,
            issues: [{ path: "store", message, suggestion: `assay migrate --database ${shown}` }]
          })
        }
      }
    }
    const [row] = yield* Effect.mapError(
      sql.unsafe<{ value: string }>("SELECT value FROM assay_meta WHERE key = 'feature_level'"),
      (e) => unavailableOf(url, "opening", e)
    )
    const level = row?.value ?? BASE_LEVEL
    if (level !== BASE_LEVEL && level !== VISITS_LEVEL) {
      return yield* new StoreUnavailable({
        message: `postgres store ${redactUrl(url)} is at feature level ${level}, unknown to this build; use a newer assay`,
        path: redactUrl(url)
      })
    }
    return level
  })

/**
 * The Postgres driver (see `Store.StoreDriver`) in the current scope, using the
 * {@link ArtifactBackend} in context: its own client, the schema checked (or migrated, with
 * `migrate`). Fails as {@link make} (without the options check).
 *
 * @since 0.8.0
 * @category constructors
 */
export const makeDriver = (
  options: PgStoreOptions
): Effect.Effect<StoreDriver, StoreUnavailable | ConfigError, ArtifactBackend | Scope.Scope> =>
  Effect.gen(function*() {
    const backend = yield* ArtifactBackend
    const url = options.url
    const readOnly = options.readonly === true
    const sql = yield* makeClient(url, { maxConnections: options.maxConnections })
    if (options.migrate === true && !readOnly) yield* migrateWith(sql, url)
    const featureLevel = yield* checkSchema(sql, url)
    const retryFor = options.retryFor ?? (yield* retryForConfig)
    return makePgDriver({
      sql,
      url,
      featureLevel,
      retryFor,
      readOnlyError: readOnly
        ? new StoreUnavailable({ message: `postgres store ${redactUrl(url)} is open read-only`, path: redactUrl(url) })
        : undefined,
      // the store's own call cache: its `assay_call_cache` table (migration 2, so present in any
      // database this build opens), through the store's client
      callCache: readOnly ? undefined : makeCallCache(sql, url),
      storeId: readOnly ? undefined : storeIdOf(sql, url),
      member: readOnly ? options.member : undefined
    }, backend)
  })

/**
 * The store's identity (`Store.storeId`): the `store_id` row of `assay_meta`, written by the
 * first writer that asks (`gen_random_uuid()`, `ON CONFLICT DO NOTHING`: every writer of the
 * database reads the same id) and read back in the same statement, or in a second one when a
 * concurrent first writer's row was committed after this statement's snapshot; kept once read
 * (a failed read is tried again at the next call).
 */
const storeIdOf = (sql: SqlClient.SqlClient, url: string): Effect.Effect<string, StoreUnavailable> => {
  let known: string | undefined
  const read = Effect.flatMap(
    Effect.mapError(
      sql<{ value: string }>`WITH ins AS (
          INSERT INTO assay_meta (key, value) VALUES ('store_id', gen_random_uuid()::text)
          ON CONFLICT (key) DO NOTHING RETURNING value
        )
        SELECT value FROM ins UNION ALL SELECT value FROM assay_meta WHERE key = 'store_id'`,
      (e) => unavailableOf(url, "reading the store id", e)
    ),
    (rows) =>
      rows[0] !== undefined
        ? Effect.sync(() => known = rows[0]!.value)
        // a concurrent first writer: this statement's insert waited for the other's to commit
        // and did nothing, while its own snapshot (taken at the statement's start) could not see
        // the committed row; a new statement does
        : Effect.flatMap(
          Effect.mapError(
            sql<{ value: string }>`SELECT value FROM assay_meta WHERE key = 'store_id'`,
            (e) => unavailableOf(url, "reading the store id", e)
          ),
          (again) =>
            again[0] === undefined
              ? Effect.fail(new StoreUnavailable({ message: `postgres store ${redactUrl(url)} has no store id`, path: redactUrl(url) }))
              : Effect.sync(() => known = again[0]!.value)
        )
  )
  return Effect.suspend(() => known === undefined ? read : Effect.succeed(known))
}

/**
 * Opens the Postgres store in the current scope: the driver ({@link makeDriver}) behind the
 * store front (`Store.makeWith`), using the {@link ArtifactBackend} in context. Closing the
 * scope commits queued writes, flushes buffered facts and closes the client.
 *
 * Fails with `ConfigError` on invalid options or an unmigrated database (exit 2: run
 * `assay migrate --database URL`), `StoreUnavailable` when the server cannot be reached or the
 * schema is newer than this build.
 *
 * @since 0.8.0
 * @category constructors
 */
export const make = (
  options: PgStoreOptions
): Effect.Effect<StoreService, StoreUnavailable | ConfigError, ArtifactBackend | Scope.Scope> =>
  Effect.flatMap(
    Effect.zipRight(checkOptions(options), makeDriver(options)),
    (driver) => makeWith(driver, options)
  )

/**
 * The Postgres store as a layer, using the {@link ArtifactBackend} in context. Hoist it into a
 * module-level constant (each build opens a client of its own).
 *
 * @since 0.8.0
 * @category layers
 */
export const layerWith = (
  options: PgStoreOptions
): Layer.Layer<Store, StoreUnavailable | ConfigError, ArtifactBackend> => Layer.scoped(Store, make(options))

/**
 * The Postgres store with the inline artifact backend (payloads in `assay_artifacts`).
 *
 * @since 0.8.0
 * @category layers
 */
export const layer = (options: PgStoreOptions): Layer.Layer<Store, StoreUnavailable | ConfigError> =>
  layerWith(options).pipe(Layer.provide(layerInline))

/**
 * A read-only Postgres store (for report, watch, serve, export): never migrates, never writes.
 *
 * @since 0.8.0
 * @category layers
 */
export const layerReadOnly = (url: string): Layer.Layer<Store, StoreUnavailable | ConfigError> =>
  layer({ url, readonly: true, maxConnections: 2 })

/**
 * Commits one checkpoint unit first-writer-wins and returns the output that is stored for it:
 * the unit's own artifact when it was the first writer of `(pipeline, seq, visit)`, the earlier
 * writer's when it was not (its artifact, task row and pipeline patch were then skipped by a
 * store that keeps checkpoints first-writer-wins, as `PgStore` does). `None` when the unit
 * carries no artifact. Works on any store; on a single-writer store the unit always wins.
 *
 * Fails with the `StoreUnavailable` of the commit or of the read.
 *
 * @since 0.8.0
 * @category checkpoints
 */
export const commitCheckpoint = (
  store: StoreService,
  unit: CheckpointUnit
): Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable> =>
  Effect.zipRight(
    store.checkpoint(unit),
    Effect.suspend(() => {
      const a = unit.artifact
      if (a === undefined) return Effect.succeed(Option.none())
      const visit = a.visit ?? 0
      if (store.traversal !== undefined) {
        return store.traversal.getArtifactById(Traversal.address(a.pipelineId, a.seq, visit))
      }
      return store.getArtifact(a.pipelineId, a.seq)
    })
  )

/**
 * The suite member `experimentId` of the Postgres store at `url`, as its suites registered it
 * (`assay run -c SUITE --engine cluster`: `assay_meta` rows `suite/<suite>/member/<member>`):
 * the member id as registered (an id differing only in case finds it, as on a suite root) and
 * the pipeline-id prefix of its pipelines. `experimentId` is a member id, or `SUITE/ID` to
 * pick the member of one suite when several suites of the store share the id (the spelling the
 * refusals list the members in). Fails with `ConfigError` at `--experiment` when no suite of
 * the store has that member (naming the members there are, as `SUITE/ID`) or when several do
 * (member ids are per suite; the refusal names each as `SUITE/ID`), `StoreUnavailable` when the
 * store cannot be read.
 *
 * @since 0.12.0
 * @category suites
 */
export const memberOf = (
  url: string,
  experimentId: string
): Effect.Effect<MemberScope & { readonly suiteId: string }, ConfigError | StoreUnavailable> =>
  Effect.gen(function*() {
    const sql = yield* makeClient(url, { maxConnections: 1 })
    const rows = yield* Effect.mapError(
      sql.unsafe<{ readonly key: string }>(`SELECT key FROM assay_meta WHERE key LIKE 'suite/%/member/%' ORDER BY key`),
      (e) => unavailableOf(url, "reading the store's suites", e)
    )
    const members = rows.flatMap((r) => {
      const m = /^suite\/(.+)\/member\/(.+)$/.exec(r.key)
      return m === null ? [] : [{ suiteId: m[1]!, experimentId: m[2]! }]
    })
    // `ID`, else `SUITE/ID` (the spelling the refusals list members in), each exactly, then
    // differing only in case
    const full = (m: { readonly suiteId: string; readonly experimentId: string }) => `${m.suiteId}/${m.experimentId}`
    const slash = experimentId.lastIndexOf("/")
    const [suitePart, idPart] = [experimentId.slice(0, slash), experimentId.slice(slash + 1)]
    const tries: ReadonlyArray<(m: { readonly suiteId: string; readonly experimentId: string }) => boolean> = [
      (m) => m.experimentId === experimentId,
      (m) => full(m) === experimentId,
      (m) => idKey(m.experimentId) === idKey(experimentId),
      (m) => slash > 0 && idKey(m.suiteId) === idKey(suitePart) && idKey(m.experimentId) === idKey(idPart)
    ]
    const found = tries.map((t) => members.filter(t)).find((f) => f.length > 0) ?? []
    const refuse = (message: string) => new ConfigError({ message: `--experiment: ${message}`, issues: [{ path: "--experiment", message }] })
    if (found.length === 0) {
      const known = members.map((m) => `${m.suiteId}/${m.experimentId}`).join(", ")
      return yield* refuse(
        `the Postgres store ${redactUrl(url)} has no suite member "${experimentId}" (members: ${known === "" ? "none: it holds no suite" : known})`
      )
    }
    if (found.length > 1) {
      return yield* refuse(
        `member "${experimentId}" is in several suites of ${redactUrl(url)} (${
          found.map((m) => m.suiteId).join(", ")
        }); report, export, watch and serve read one suite's member: name it as SUITE/ID (${found.map(full).join(", ")})`
      )
    }
    const m = found[0]!
    return { suiteId: m.suiteId, experimentId: m.experimentId, prefix: `${memberDigest(m.suiteId, m.experimentId)}-` }
  }).pipe(Effect.scoped)

/**
 * A read-only Postgres store that shows one suite member ({@link memberOf}): its pipelines and
 * their tasks, attempts, events, artifacts and handoffs, its pipelines' metrics and its own
 * member-scoped ones, the shared pools' resources and its own private pools' (a suite root's
 * member view, for `export`, `watch` and `serve --experiment ID`). Fails as {@link memberOf},
 * then as {@link layer}.
 *
 * @since 0.12.0
 * @category layers
 */
export const layerReadOnlyMember = (url: string, experimentId: string): Layer.Layer<Store, StoreUnavailable | ConfigError> =>
  Layer.unwrapEffect(Effect.map(memberOf(url, experimentId), (member) =>
    layer({ url, readonly: true, maxConnections: 2, member: { prefix: member.prefix, experimentId: member.experimentId } })))
