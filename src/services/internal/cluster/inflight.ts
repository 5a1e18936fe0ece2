/**
 * The task claims of the cluster engine: at most one live execution of a (pipeline, task) at a
 * time across every runner process, and a record of an execution cut short.
 *
 * One row per pipeline in `assay_cluster_inflight` (next to the cluster's own tables, created by
 * `assay migrate`): the task (`seq`, `run_id`) an execution claimed, its `token` (unique per
 * execution), the execution's task-run id and attempt, and `heartbeat_at`, the database's clock
 * at the last renewal. The claim is a lease with a heartbeat, on the database's clock only:
 *
 * - an execution {@link Claims.claim claims} its task before its first attempt; the claim is won
 *   when the row is free, names an earlier task or another run, is this execution's own, or
 *   has not been renewed for `ttl` (its execution is presumed dead: killed, frozen, cut off);
 *   the decision and the write are one statement (`INSERT … ON CONFLICT DO UPDATE … WHERE`), so
 *   two executions racing for one task never both win;
 * - the winner {@link Claims.renew renews} it every heartbeat while it runs, and once more after
 *   each lease it is granted, the last step before the task's call: a renewal that finds
 *   another token means the claim was taken over while this execution was frozen or cut off
 *   past `ttl` (a zombie), and the execution stops before calling;
 * - the loser waits for the winner's checkpoint (or for its claim to go stale) and never calls.
 *
 * Why (issue 17, chaos C5 with lock rows): a runner frozen past the shard lock expiry had
 * attempts waiting for a pool lease; its shards moved, the new owner ran the same tasks, and
 * when the frozen runner woke up its waiting attempts got their leases and called the provider
 * a second time, before its cluster noticed the shards were gone. The checkpoint re-read after
 * a lease (L4) only catches a task already committed; the claim catches one still running.
 *
 * A claim won over a stale claim of the same task under the same run, held by another
 * execution, means that execution started and never committed: the winner records it as an
 * abandoned attempt (its attempt number and task-run id), as the embedded engine's resume does.
 * A finished execution leaves its claim in place (the task's checkpoint, read first, says it is
 * done, and the next task's claim overwrites it); an interrupted one (its runner stopping)
 * releases it, so that the next owner need not wait `ttl`.
 *
 * The same fencing idea as a lock service's fencing token (Kleppmann, "How to do distributed
 * locking", 2016): the holder's right to act is checked against the shared store right before
 * the side effect, not trusted from a local view. PostgreSQL only (the cluster's storage); on
 * another dialect no claim is kept.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Deferred, Duration, Effect, FiberId, Option } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"

/** The claim table (one row per pipeline). */
export const TABLE = "assay_cluster_inflight"

/**
 * Creates the claim table when missing, and adds the columns an older `assay migrate` did not
 * create (idempotent; `assay migrate` runs it).
 */
export const createTable = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.zipRight(
    sql.unsafe(`CREATE TABLE IF NOT EXISTS ${TABLE} (
      pipeline_id text PRIMARY KEY,
      seq integer NOT NULL,
      run_id text NOT NULL,
      started_at bigint NOT NULL
    )`),
    sql.unsafe(`ALTER TABLE ${TABLE}
      ADD COLUMN IF NOT EXISTS token text,
      ADD COLUMN IF NOT EXISTS task_run_id text,
      ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 0,
      ADD COLUMN IF NOT EXISTS heartbeat_at timestamptz`)
  ))

/**
 * Fails with a {@link StoreUnavailable} naming `assay migrate` when the client is PostgreSQL and
 * the claim table is missing or lacks the columns of this version (a library user who built
 * the engine on a database never migrated, or migrated by an older assay): without the check,
 * every task start would fail its claim and the engine would retry it for ever. Succeeds at
 * once on another dialect (no claim is kept there).
 */
export const requireTable = (sql: SqlClient.SqlClient): Effect.Effect<void, StoreUnavailable> =>
  sql.onDialectOrElse({
    pg: () =>
      sql<{ present: boolean; current: boolean }>`SELECT to_regclass(${TABLE}) IS NOT NULL AS present,
          EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(${TABLE}) AND attname = 'heartbeat_at' AND NOT attisdropped) AS current`
        .pipe(
          Effect.mapError((e) => new StoreUnavailable({ message: `cannot check the task claim table: ${e.message}`, cause: e })),
          Effect.flatMap((rows) =>
            rows[0]?.present === true && rows[0]?.current === true
              ? Effect.void
              : Effect.fail(
                new StoreUnavailable({
                  message: `the cluster database has ${
                    rows[0]?.present === true ? `an \`${TABLE}\` table from an older version` : `no \`${TABLE}\` table`
                  }: run \`assay migrate --database URL\` once before starting runners (or create it with the engine's \`InFlight.createTable\`)`
                })
              )
          )
        ),
    orElse: () => Effect.void
  })

/** A claim as it was before an execution took it over. */
export interface Marker {
  readonly seq: number
  readonly runId: string
  /** The execution that held it (`undefined` for a row written by an older version). */
  readonly token: string | undefined
  readonly taskRunId: string | undefined
  /** The attempt that execution was on (0 when unknown). */
  readonly attempt: number
  /** Epoch ms, by the clock of the executor that wrote it. */
  readonly startedAt: number
  /** Whether it had not been renewed for `ttl` when it was read. */
  readonly stale: boolean
}

/** What one execution claims. */
export interface ClaimRequest {
  readonly pipelineId: string
  readonly seq: number
  readonly runId: string
  /** Unique per execution. */
  readonly token: string
  readonly taskRunId: string
  readonly attempt: number
  /** Epoch ms, the executor's clock (kept for reading only; staleness is on the database's clock). */
  readonly startedAt: number
}

/** What {@link Claims.claimRunnable} is asked: a {@link ClaimRequest} without the run (read from the row). */
export interface RunnableRequest {
  readonly pipelineId: string
  readonly seq: number
  readonly token: string
  readonly attempt: number
  /** Epoch ms, the executor's clock (kept for reading only, and in the task-run id). */
  readonly startedAt: number
}

/**
 * What {@link Claims.claimRunnable} found: `pipeline`, the row's run, state and cursor (`null`:
 * no row); `won` and `previous` as {@link ClaimResult} (`won` is `false` when the task was not
 * runnable, and then nothing was written).
 */
export interface RunnableClaim extends ClaimResult {
  readonly pipeline: { readonly runId: string; readonly state: string; readonly nTasksDone: number } | null
}

/** The answer of {@link Claims.claim}: whether the claim was won, and the row it found. */
export interface ClaimResult {
  readonly won: boolean
  readonly previous: Option.Option<Marker>
}

/**
 * The task claims over one database (see the module comment).
 */
export interface Claims {
  /** A claim is stale when not renewed for this long (the shard lock expiry by default). */
  readonly ttl: Duration.Duration
  /** How often a running execution renews its claim (the shard lock refresh by default). */
  readonly heartbeat: Duration.Duration
  /** Claims a task for an execution (one statement; see the module comment for when it is won). */
  readonly claim: (request: ClaimRequest) => Effect.Effect<ClaimResult, StoreUnavailable>
  /**
   * The first read of a task's execution and its claim in one statement, for a store that lives
   * in this database ({@link Claims.holdsStore}): reads the pipeline's row (its run, state and
   * cursor: the L1 read) and claims the task as {@link Claims.claim} does, only when the row
   * says the task is the next one to run (`n_tasks_done = seq`, neither `succeeded` nor
   * `failed`): a committed task is never claimed. The run and the task-run id are the row's
   * (`pipelineId:seq:runId:startedAt`, as the executor writes it). See {@link RunnableClaim}.
   */
  readonly claimRunnable: (request: RunnableRequest) => Effect.Effect<RunnableClaim, StoreUnavailable>
  /**
   * Renews an execution's claim (and records the attempt it is on): `false` when the row names
   * another execution now (the claim was taken over), `true` otherwise.
   */
  readonly renew: (pipelineId: string, token: string, attempt: number) => Effect.Effect<boolean, StoreUnavailable>
  /** Gives a claim up (when its execution is interrupted): a no-op when another holds it now. */
  readonly release: (pipelineId: string, token: string) => Effect.Effect<void, StoreUnavailable>
  /**
   * The last step before a task's call, after each lease, in one statement: renews the claim
   * (as {@link Claims.renew}), renews the lease's global slot when it lives in this database
   * (`slot`: only the same lease id, only while not expired, as the pools' own renewal), and
   * reads the pipeline's row when the store lives in this database (`readPipeline`: the
   * checkpoint re-read of L4). See {@link FenceResult}.
   */
  readonly fence: (request: FenceRequest) => Effect.Effect<FenceResult, StoreUnavailable>
  /**
   * {@link Claims.fence} as parts of another statement on this database (without `slot`:
   * the statement claims the slot itself), for task `seq`; see {@link FenceParts}. Its
   * result row is read with {@link Claims.fenceResult}.
   */
  readonly fenceParts: (request: FenceRequest, seq: number, first: number) => FenceParts
  /** Reads a fence's answer from the row of a statement built with {@link Claims.fenceParts}. */
  readonly fenceResult: (request: FenceRequest, row: Record<string, unknown> | undefined) => FenceResult
  /**
   * Whether `other` reaches this database (the same server instance and database; compared
   * once per client): a global pool on it has its slots renewed inside {@link Claims.fence}.
   * `false` when unknown.
   */
  readonly sameDatabase: (other: SqlClient.SqlClient) => Effect.Effect<boolean>
  /**
   * {@link Claims.sameDatabase} asked at a runner's start, where "unknown" must not be read as
   * "no" (block leases would be off for the process's whole life): fails with a
   * `StoreUnavailable` naming the database error when either identity cannot be read, and
   * keeps the answer for {@link Claims.sameDatabase} once both were read.
   */
  readonly checkSameDatabase: (other: SqlClient.SqlClient) => Effect.Effect<boolean, StoreUnavailable>
  /**
   * Whether the store whose identity is `storeId` (`Store.storeId`) lives in this database:
   * then {@link Claims.fence} reads its pipeline rows. Fails with a `StoreUnavailable` naming
   * the database error when it cannot be read (asked once, at a runner's start: a transient
   * error must not make the runner read the store apart for its whole life).
   */
  readonly holdsStore: (storeId: string) => Effect.Effect<boolean, StoreUnavailable>
}

/** What {@link Claims.fence} is asked. */
export interface FenceRequest {
  readonly pipelineId: string
  readonly token: string
  readonly attempt: number
  /**
   * The task the claim now covers (one claim per pipeline: it is carried from task to task,
   * and each fence moves it to the task about to be called, so that a takeover records the
   * right abandoned attempt and a competitor's claim of a later task than the row says does
   * not win over a live execution): the row's `seq`, `task_run_id` and `started_at` are set
   * with the renewal. Nothing moves when not given.
   */
  readonly advance?: { readonly seq: number; readonly taskRunId: string; readonly startedAt: number } | undefined
  /**
   * The input this execution holds in memory for the task (the output of task `seq` that its
   * own commit wrote), to check against what the store kept: its checkpoint's digest is read
   * and compared (`FenceResult.inputKept`). Needs the store in this database.
   */
  readonly input?: { readonly seq: number; readonly digest: string } | undefined
  /** The lease's global slot, when the pools live in this database. */
  readonly slot?: {
    readonly pool: string
    readonly resource: string
    readonly slot: number
    readonly leaseId: string
    readonly ttlMs: number
  } | undefined
  /** Read the pipeline's row (the store lives in this database). */
  readonly readPipeline: boolean
}

/**
 * What {@link Claims.fence} found: `claimHeld`, the claim is still this execution's;
 * `slotHeld`, the slot is still the lease's (`undefined` when not asked); `pipeline`, the
 * row's state and cursor (`null`: no row; `undefined`: not asked).
 */
export interface FenceResult {
  readonly claimHeld: boolean
  readonly slotHeld: boolean | undefined
  readonly pipeline: { readonly state: string; readonly nTasksDone: number } | null | undefined
  /**
   * Whether the checkpoint of `input.seq` is stored with `input.digest` (the store kept this
   * execution's value, or an equal one): `undefined` when not asked.
   */
  readonly inputKept?: boolean | undefined
}

/**
 * A fence as parts of a larger statement (the global pools' slot claim, `PgPools`): its CTEs
 * and result columns, its parameters (numbered from the `first` given to
 * {@link Claims.fenceParts}), and `when`, a SQL condition over its CTEs that holds when the
 * call may go out (the claim renewed, the task not committed, the input kept): the slot is
 * claimed only under it.
 */
export interface FenceParts {
  readonly ctes: ReadonlyArray<string>
  readonly cols: ReadonlyArray<string>
  readonly params: ReadonlyArray<unknown>
  readonly when: string
}

/** Options of {@link make}: `ttl` (default 35 s) and `heartbeat` (default 10 s; at most a third of `ttl` is wise). */
export interface ClaimOptions {
  readonly ttl?: Duration.DurationInput | undefined
  readonly heartbeat?: Duration.DurationInput | undefined
}

const unavailable = (what: string) => (e: { readonly message: string }) =>
  new StoreUnavailable({ message: `cannot ${what} the task claim: ${e.message}`, cause: e })

/**
 * What identifies the database a client reaches: its name and oid, the server's port and
 * start time (`undefined` when it cannot be read). Two clients with the same identity reach
 * the same database of the same server instance.
 */
const databaseIdentity = (sql: SqlClient.SqlClient): Effect.Effect<string | undefined, StoreUnavailable> =>
  Effect.map(
    sql<{ id: string }>`SELECT current_database() || '/' || (SELECT oid FROM pg_database WHERE datname = current_database())::text
      || '/' || COALESCE(inet_server_port(), 0)::text || '/' || pg_postmaster_start_time()::text AS id`,
    (rows) => rows[0]?.id
  ).pipe(
    Effect.mapError((e) =>
      new StoreUnavailable({ message: `cannot read which database a client reaches: ${e.message}`, cause: e })
    )
  )

/** A claim row as the claim statements return it (`prev.*`). */
interface PreviousRow {
  readonly seq: number | null
  readonly run_id: string | null
  readonly token: string | null
  readonly task_run_id: string | null
  readonly attempt: number | null
  readonly started_at: string | number | null
  readonly stale: boolean | null
}

const previousOf = (row: PreviousRow | undefined): Option.Option<Marker> =>
  row === undefined || row.seq === null
    ? Option.none<Marker>()
    : Option.some<Marker>({
      seq: Number(row.seq),
      runId: row.run_id ?? "",
      token: row.token ?? undefined,
      taskRunId: row.task_run_id ?? undefined,
      attempt: Number(row.attempt ?? 0),
      startedAt: Number(row.started_at ?? 0),
      stale: row.stale === true
    })

/**
 * The fence's CTEs (`c`: the claim renewed, and moved to `advance`; `s`: the slot renewed;
 * `p`: the pipeline row; `d`: the input's checkpoint digest), its columns, its parameters
 * numbered from `first`, and (with `seq`) the condition under which the call may go out.
 */
const fenceParts = (r: FenceRequest, seq: number | undefined, first: number): FenceParts => {
  const params: Array<unknown> = []
  const $ = (v: unknown) => `$${first + params.push(v) - 1}`
  const pid = $(r.pipelineId)
  const sets = [`heartbeat_at = now()`, `attempt = ${$(r.attempt)}::int`]
  if (r.advance !== undefined) {
    sets.push(
      `seq = ${$(r.advance.seq)}::int`,
      `task_run_id = ${$(r.advance.taskRunId)}::text`,
      `started_at = ${$(r.advance.startedAt)}::bigint`
    )
  }
  const ctes = [`c AS (UPDATE ${TABLE} SET ${sets.join(", ")} WHERE pipeline_id = ${pid}::text AND token = ${$(r.token)}::text RETURNING 1)`]
  const cols = ["EXISTS (SELECT 1 FROM c) AS claim"]
  if (r.slot !== undefined) {
    ctes.push(`s AS (UPDATE assay_pool_slot SET expires_at = now() + make_interval(secs => ${$(r.slot.ttlMs / 1000)}::float8)
      WHERE pool = ${$(r.slot.pool)}::text AND resource = ${$(r.slot.resource)}::text AND slot = ${$(r.slot.slot)}::int
        AND lease_id = ${$(r.slot.leaseId)}::uuid AND expires_at > now()
      RETURNING 1)`)
    cols.push("EXISTS (SELECT 1 FROM s) AS slot")
  }
  const conditions = ["EXISTS (SELECT 1 FROM c)"]
  if (r.readPipeline) {
    ctes.push(`p AS (SELECT state, n_tasks_done FROM assay_pipelines WHERE pipeline_id = ${pid}::text)`)
    cols.push("EXISTS (SELECT 1 FROM p) AS found, (SELECT state FROM p) AS state, (SELECT n_tasks_done FROM p) AS n_tasks_done")
    if (seq !== undefined) {
      // a missing row does not stop the call (as the fence after a lease never did)
      conditions.push(`NOT EXISTS (SELECT 1 FROM p WHERE p.n_tasks_done > ${$(seq)}::int OR p.state IN ('succeeded', 'failed'))`)
    }
    if (r.input !== undefined) {
      ctes.push(
        `d AS (SELECT digest FROM assay_checkpoints WHERE pipeline_id = ${pid}::text AND seq = ${$(r.input.seq)}::int AND visit = 0)`
      )
      const kept = `COALESCE((SELECT digest FROM d) = ${$(r.input.digest)}::text, false)`
      cols.push(`${kept} AS input_kept`)
      conditions.push(kept)
    }
  }
  return { ctes, cols, params, when: conditions.join(" AND ") }
}

const fenceResult = (r: FenceRequest, row: Record<string, unknown> | undefined): FenceResult => ({
  claimHeld: row?.claim === true,
  slotHeld: r.slot === undefined ? undefined : row?.slot === true,
  pipeline: !r.readPipeline
    ? undefined
    : row?.found === true
    ? { state: String(row.state), nTasksDone: Number(row.n_tasks_done) }
    : null,
  inputKept: r.input === undefined || !r.readPipeline ? undefined : row?.input_kept === true
})

/** The claims over a Postgres client (`undefined` on another dialect). */
export const make = (sql: SqlClient.SqlClient, options: ClaimOptions = {}): Claims | undefined => {
  const ttl = Duration.decode(options.ttl ?? Duration.seconds(35))
  const heartbeat = Duration.decode(options.heartbeat ?? Duration.seconds(10))
  const ttlMs = Math.max(1, Math.round(Duration.toMillis(ttl)))
  const sameDb = new WeakMap<SqlClient.SqlClient, boolean>()
  const asking = new WeakMap<SqlClient.SqlClient, Deferred.Deferred<boolean>>()
  /** The claim row as it was (`prev`), with whether it was stale (not renewed for `ttl`). */
  const prevColumns = `SELECT seq, run_id, token, task_run_id, attempt, started_at,
    (heartbeat_at IS NULL OR heartbeat_at < now() - ${ttlMs} * interval '1 millisecond') AS stale`
  /** When a claim is won over an existing row (see the module comment), and what it writes. */
  const takeOver = `ON CONFLICT (pipeline_id) DO UPDATE SET seq = EXCLUDED.seq, run_id = EXCLUDED.run_id,
    started_at = EXCLUDED.started_at, token = EXCLUDED.token, task_run_id = EXCLUDED.task_run_id,
    attempt = EXCLUDED.attempt, heartbeat_at = now()
    WHERE t.token IS NULL OR t.token = EXCLUDED.token OR t.run_id <> EXCLUDED.run_id OR t.seq < EXCLUDED.seq
    OR t.heartbeat_at IS NULL OR t.heartbeat_at < now() - ${ttlMs} * interval '1 millisecond'
    RETURNING 1`
  return sql.onDialectOrElse({
    pg: (): Claims | undefined => ({
      ttl,
      heartbeat,
      claim: (r) =>
        Effect.map(
          // `prev` locks the row (if any) first, so that it is the version the upsert decides
          // on; a row inserted concurrently is met by ON CONFLICT and its WHERE, never lost
          sql<
            {
              won: boolean
              seq: number | null
              run_id: string | null
              token: string | null
              task_run_id: string | null
              attempt: number | null
              started_at: string | number | null
              stale: boolean | null
            }
          >`WITH prev AS (
              ${sql.literal(prevColumns)} FROM ${sql(TABLE)} WHERE pipeline_id = ${r.pipelineId} FOR UPDATE
            ), up AS (
              INSERT INTO ${sql(TABLE)} AS t (pipeline_id, seq, run_id, started_at, token, task_run_id, attempt, heartbeat_at)
              VALUES (${r.pipelineId}, ${r.seq}, ${r.runId}, ${r.startedAt}, ${r.token}, ${r.taskRunId}, ${r.attempt}, now())
              ${sql.literal(takeOver)}
            )
            SELECT EXISTS (SELECT 1 FROM up) AS won, prev.* FROM (SELECT 1) AS one LEFT JOIN prev ON true`,
          (rows): ClaimResult => ({ won: rows[0]?.won === true, previous: previousOf(rows[0]) })
        ).pipe(Effect.mapError(unavailable("write"))),
      claimRunnable: (r) =>
        Effect.map(
          // as `claim`, the insert's rows coming from the pipeline row only when the task is the
          // next one to run (so a committed task is never claimed)
          sql<PreviousRow & { won: boolean; found: boolean; p_run_id: string | null; p_state: string | null; p_done: number | null }>`WITH p AS (
              SELECT run_id, state, n_tasks_done FROM assay_pipelines WHERE pipeline_id = ${r.pipelineId}
            ), prev AS (
              ${sql.literal(prevColumns)} FROM ${sql(TABLE)} WHERE pipeline_id = ${r.pipelineId} FOR UPDATE
            ), up AS (
              INSERT INTO ${sql(TABLE)} AS t (pipeline_id, seq, run_id, started_at, token, task_run_id, attempt, heartbeat_at)
              SELECT ${r.pipelineId}::text, ${r.seq}::int, p.run_id, ${r.startedAt}::bigint, ${r.token}::text,
                ${`${r.pipelineId}:${r.seq}:`}::text || p.run_id || ${`:${r.startedAt}`}::text, ${r.attempt}::int, now()
              FROM p WHERE p.n_tasks_done = ${r.seq}::int AND p.state <> 'succeeded' AND p.state <> 'failed'
              ${sql.literal(takeOver)}
            )
            SELECT EXISTS (SELECT 1 FROM up) AS won, EXISTS (SELECT 1 FROM p) AS found,
              (SELECT run_id FROM p) AS p_run_id, (SELECT state FROM p) AS p_state, (SELECT n_tasks_done FROM p) AS p_done,
              prev.* FROM (SELECT 1) AS one LEFT JOIN prev ON true`,
          (rows): RunnableClaim => {
            const row = rows[0]
            return {
              won: row?.won === true,
              previous: previousOf(row),
              pipeline: row?.found === true
                ? { runId: String(row.p_run_id), state: String(row.p_state), nTasksDone: Number(row.p_done) }
                : null
            }
          }
        ).pipe(Effect.mapError(unavailable("write"))),
      renew: (pipelineId, token, attempt) =>
        Effect.map(
          sql<{ one: number }>`UPDATE ${sql(TABLE)} SET heartbeat_at = now(), attempt = ${attempt}
            WHERE pipeline_id = ${pipelineId} AND token = ${token} RETURNING 1 AS one`,
          (rows) => rows.length > 0
        ).pipe(Effect.mapError(unavailable("renew"))),
      release: (pipelineId, token) =>
        Effect.asVoid(
          sql`UPDATE ${sql(TABLE)} SET token = NULL, heartbeat_at = NULL WHERE pipeline_id = ${pipelineId} AND token = ${token}`
        ).pipe(Effect.mapError(unavailable("release"))),
      fence: (r) => {
        const parts = fenceParts(r, undefined, 1)
        return Effect.map(
          sql.unsafe<Record<string, unknown>>(`WITH ${parts.ctes.join(", ")} SELECT ${parts.cols.join(", ")}`, parts.params),
          (rows): FenceResult => fenceResult(r, rows[0])
        ).pipe(Effect.mapError(unavailable("fence")))
      },
      fenceParts: (r, seq, first) => fenceParts({ ...r, slot: undefined }, seq, first),
      fenceResult: (r, row) => fenceResult(r, row),
      sameDatabase: (other) => {
        if (other === sql) return Effect.succeed(true)
        const known = sameDb.get(other)
        if (known !== undefined) return Effect.succeed(known)
        // the callers that ask while the first answer is on its way wait for it (a runner's
        // first window asks from every task at once)
        const waiting = asking.get(other)
        if (waiting !== undefined) return Deferred.await(waiting)
        const answer = Deferred.unsafeMake<boolean>(FiberId.none)
        asking.set(other, answer)
        return Effect.map(
          Effect.all([databaseIdentity(sql), databaseIdentity(other)]).pipe(
            Effect.orElseSucceed(() => [undefined, undefined] as const)
          ),
          ([a, b]) => {
            const same = a !== undefined && a === b
            // kept once both were read (an unreachable database is asked again next time)
            if (a !== undefined && b !== undefined) sameDb.set(other, same)
            return same
          }
        ).pipe(
          Effect.onExit((exit) => {
            asking.delete(other)
            return Deferred.succeed(answer, exit._tag === "Success" ? exit.value : false)
          })
        )
      },
      checkSameDatabase: (other) =>
        other === sql ? Effect.succeed(true) : Effect.map(
          Effect.all([databaseIdentity(sql), databaseIdentity(other)]),
          ([a, b]) => {
            const same = a !== undefined && a === b
            sameDb.set(other, same)
            return same
          }
        ),
      holdsStore: (storeId) =>
        sql<{ present: boolean }>`SELECT to_regclass('assay_meta') IS NOT NULL AS present`.pipe(
          Effect.flatMap((rows) =>
            rows[0]?.present === true
              ? Effect.map(
                sql<{ value: string }>`SELECT value FROM assay_meta WHERE key = 'store_id'`,
                (found) => found[0]?.value === storeId
              )
              : Effect.succeed(false)
          ),
          Effect.mapError((e) =>
            new StoreUnavailable({ message: `cannot read whether the store lives in the cluster's database: ${e.message}`, cause: e })
          )
        )
    }),
    orElse: () => undefined
  })
}
