/**
 * The member databases of a `byExperiment` suite root (`experiments/ID/state.db`), opened on
 * demand and cached: at most `maxOpen` connections are open at once, the least recently used
 * idle one is closed (its queued writes committed and buffered facts flushed first) to make
 * room, and a database in use is never closed (a caller waits for one to become idle).
 *
 * Rules of opening:
 * - a selected member of a writable root is opened for writing (created and migrated when
 *   new, and recorded in the catalog as created);
 * - any other member is opened read-only (never created, migrated or written), and one without
 *   a database reads as empty;
 * - a member whose database the catalog records as created but which is missing is never
 *   silently recreated: opening it for writing is an error (`StoreUnavailable`); read, it is
 *   empty (the suite store refuses a run selecting it and warns about the others at open).
 *
 * @since 0.5.0
 */
import Database from "better-sqlite3"
import { Clock, Effect, Exit, Option, Queue, Scope } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { type ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { NewRun, StoreOptions } from "../../../services/Store.js"
import { ArtifactBackend, type ArtifactBackendService } from "../../../services/ArtifactBackend.js"
import { makeWith } from "../../../services/Store.js"
import { makeDriverWithEnv } from "../sqlite/driver.js"
import type { SqliteEnv } from "../sqlite/open.js"
import * as Catalog from "./catalog.js"
import { type Db, makeDb } from "./view.js"

/**
 * One open member database.
 *
 * @since 0.5.0
 * @category models
 */
export interface Entry {
  readonly id: string
  readonly db: Db
  readonly writable: boolean
  readonly scope: Scope.CloseableScope
  refs: number
  tick: number
}

/**
 * What the cache needs: the root, the selection, the catalog (to record created databases),
 * the store options, the backend of a member (`writable`: may create its directory), and the
 * run to record in a member opened for writing while one is open.
 *
 * @since 0.5.0
 * @category models
 */
export interface CacheOptions {
  readonly root: string
  readonly suiteId: string
  readonly selected: ReadonlySet<string>
  readonly readOnly: boolean
  readonly maxOpen: number
  readonly catalog: SqliteEnv
  readonly created: Set<string>
  readonly storeOptions: StoreOptions
  readonly backendOf: (id: string, writable: boolean) => Effect.Effect<ArtifactBackendService, StoreUnavailable | ConfigError>
  readonly activeRun: () => NewRun | undefined
}

/**
 * The database file of a member.
 *
 * @since 0.5.0
 * @category layout
 */
export const memberFile = (root: string, id: string): string => nodePath.join(root, "experiments", id, "state.db")

const exists = (file: string): boolean => {
  try {
    return fs.statSync(file).size > 0
  } catch {
    return false
  }
}

/**
 * Whether a member database file is there (exists and is not empty).
 *
 * @param file the member's database path ({@link memberFile})
 * @since 0.5.0
 * @category layout
 */
export const memberDbPresent = (file: string): boolean => exists(file)

/**
 * Why a run (and `validate`) refuses a member whose recorded database is gone: the one message
 * both say, under the member's path (`experiments.ID`).
 *
 * @param id the member id; `file` its database path (`ROOT/experiments/ID/state.db`)
 */
export const missingMemberDbMessage = (id: string, file: string): string =>
  `the database of member "${id}" (${file}) is missing; a member database is never recreated ` +
  `(restore it, leave the member out with --experiment, or run the suite into another output root)`

/** The `feature_level` in a store file's `store_meta` (`"base"` when it cannot be read). */
const storedLevel = (file: string): string => {
  try {
    const db = new Database(file, { readonly: true, fileMustExist: true })
    try {
      const row = db.prepare("SELECT value FROM store_meta WHERE key = 'feature_level'").get() as { value?: unknown } | undefined
      return typeof row?.value === "string" ? row.value : "base"
    } finally {
      db.close()
    }
  } catch {
    return "base"
  }
}

/**
 * Builds the cache in the current scope; closing the scope closes every open member (flushed).
 *
 * @since 0.5.0
 * @category constructors
 */
export const makeCache = (o: CacheOptions) =>
  Effect.gen(function*() {
    const entries = new Map<string, Entry>()
    const lock = yield* Effect.makeSemaphore(1)
    const idle = yield* Queue.dropping<void>(1)
    let clock = 0

    /** The last known feature level of each member not open now (at its close, or read from its file). */
    const levels = new Map<string, string>()
    const close = (e: Entry) =>
      Effect.gen(function*() {
        entries.delete(e.id)
        levels.set(e.id, e.db.service.featureLevel)
        // commits queued writes and flushes buffered facts as a typed error first
        const flushed = e.writable ? yield* Effect.exit(e.db.service.flush) : Exit.void
        yield* Scope.close(e.scope, Exit.void)
        if (Exit.isFailure(flushed)) return yield* Effect.failCause(flushed.cause)
      })

    const open = (id: string): Effect.Effect<Option.Option<Entry>, StoreUnavailable> =>
      Effect.gen(function*() {
        const file = memberFile(o.root, id)
        const writable = !o.readOnly && o.selected.has(id)
        const present = exists(file)
        if (!present) {
          // a missing database of a member this run does not write reads as empty (the suite
          // store warned at open); a written member's is an error, never silently recreated
          if (o.created.has(id) && writable) {
            return yield* new StoreUnavailable({
              message:
                `suite "${o.suiteId}": the database of member "${id}" (${file}) is missing; a member database is never recreated ` +
                `(restore it, or run the suite into another output root)`,
              path: file
            })
          }
          if (!writable) return Option.none()
        }
        const backend = yield* o.backendOf(id, writable)
        const scope = yield* Scope.make()
        // interruptible: the fibers the store forks (group commit, flusher) inherit it, and
        // closing the member's scope interrupts them (the cache opens inside an acquire)
        const built = yield* Effect.exit(Effect.interruptible(
          Effect.gen(function*() {
            const { driver, env } = yield* makeDriverWithEnv({ ...o.storeOptions, filename: file, readonly: !writable, suiteRoot: o.root })
            const service = yield* makeWith(driver, o.storeOptions)
            const db = yield* makeDb(service, env)
            return { service, env, db }
          }).pipe(Effect.provideService(ArtifactBackend, backend), Scope.extend(scope))
        ))
        if (Exit.isFailure(built)) {
          yield* Scope.close(scope, Exit.void)
          return yield* Effect.failCause(built.cause)
        }
        const { db, service } = built.value
        if (!present) {
          yield* Catalog.markMemberDb(o.catalog, id, yield* Clock.currentTimeMillis)
          o.created.add(id)
        }
        const run = o.activeRun()
        if (writable && run !== undefined && Option.isNone(yield* service.getRun(run.runId))) {
          // interruptible for the same reason as the build: the run's write policy may fork a flusher
          yield* Effect.interruptible(service.openRun(run))
        }
        const e: Entry = { id, db, writable, scope, refs: 0, tick: 0 }
        entries.set(id, e)
        return Option.some(e)
      }).pipe(
        // the options were checked when the root was opened: a config error here names the member's file
        Effect.catchTag("ConfigError", (e) =>
          Effect.fail(new StoreUnavailable({ message: `member "${id}" of suite "${o.suiteId}": ${e.message}`, path: memberFile(o.root, id) })))
      )

    /** Takes a reference to the open entry of `id`, opening it (and evicting) when needed. */
    const acquire = (id: string): Effect.Effect<Option.Option<Entry>, StoreUnavailable> =>
      Effect.suspend(() => {
        const e = entries.get(id)
        if (e !== undefined) {
          e.refs++
          e.tick = ++clock
          return Effect.succeed(Option.some(e))
        }
        return lock.withPermits(1)(Effect.gen(function*() {
          for (;;) {
            const again = entries.get(id)
            if (again !== undefined) {
              again.refs++
              again.tick = ++clock
              return Option.some(again)
            }
            if (entries.size < o.maxOpen) break
            yield* Queue.takeAll(idle)
            let victim: Entry | undefined
            for (const c of entries.values()) if (c.refs === 0 && (victim === undefined || c.tick < victim.tick)) victim = c
            if (victim !== undefined) {
              // out of the map before anything yields: a use of an open member takes no lock
              entries.delete(victim.id)
              yield* close(victim)
              break
            }
            yield* Queue.take(idle) // every open member is in use: wait for one to be released
          }
          const opened = yield* open(id)
          if (Option.isSome(opened)) {
            opened.value.refs++
            opened.value.tick = ++clock
          }
          return opened
        }))
      })

    const releaseEntry = (e: Entry) =>
      Effect.suspend(() => {
        e.refs--
        return e.refs === 0 ? Effect.asVoid(Queue.offer(idle, undefined)) : Effect.void
      })
    const release = (e: Option.Option<Entry>) => (Option.isNone(e) ? Effect.void : releaseEntry(e.value))

    yield* Effect.addFinalizer(() =>
      Effect.forEach(Array.from(entries.values()), (e) => Effect.orDie(close(e)), { discard: true })
    )

    return {
      /** Runs `f` with member `id` open, or returns `empty` when it has no database (read). */
      use: <A, E>(id: string, f: (db: Db) => Effect.Effect<A, E>, empty: A) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            // an open member (the common case): one reference, taken and dropped around `f`
            const e = entries.get(id)
            if (e === undefined) {
              return Effect.acquireUseRelease(
                acquire(id),
                (e) => (Option.isNone(e) ? Effect.succeed(empty) : restore(f(e.value.db))),
                release
              )
            }
            e.refs++
            e.tick = ++clock
            return Effect.onExit(restore(f(e.db)), () => releaseEntry(e))
          })
        ),
      /** The open members (a snapshot). */
      open: () => Array.from(entries.values()),
      /**
       * Member `id`'s feature level: its open store's, else the last one seen, else the one in its
       * file's `store_meta` (read once, read-only); `"base"` without a database.
       */
      levelOf: (id: string): string => {
        const e = entries.get(id)
        if (e !== undefined) return e.db.service.featureLevel
        const known = levels.get(id)
        if (known !== undefined) return known
        const file = memberFile(o.root, id)
        if (!exists(file)) return "base"
        const level = storedLevel(file)
        levels.set(id, level)
        return level
      },
      /** Whether member `id`'s database is open now. */
      isOpen: (id: string) => entries.has(id),
      /** How many member databases are open now. */
      size: () => entries.size
    }
  })

/**
 * The member cache (see {@link makeCache}).
 *
 * @since 0.5.0
 * @category models
 */
export type Cache = Effect.Effect.Success<ReturnType<typeof makeCache>>
