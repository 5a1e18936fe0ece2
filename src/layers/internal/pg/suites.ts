/**
 * A suite's catalog in a Postgres store (the cluster engine's suites: `assay run -c SUITE
 * --engine cluster`): the members registered under a suite id with their definition digests,
 * and per run the facts of each member (selected, admitted, source exhausted / failed, limit
 * reached) with its outcome counts. Kept as rows of the store's `assay_meta` table (key →
 * JSON), so a store needs no migration of its own for suites:
 *
 * - `suite/<suiteId>/member/<experimentId>`: a `MemberRecord`;
 * - `suite/<suiteId>/run/<runId>/<experimentId>`: a `MembershipRecord` with, once the
 *   submission ended, `succeeded`, `failed` and `skipped` (this run's counts).
 *
 * The pipelines themselves carry their member in their row (`suite_id`, `experiment_id`,
 * `local_key`, written at admission from the spec's membership) and in their id (the member
 * digest prefix: `Suite.memberPipelineId`), which is what a runner routes by.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { RunId } from "../../../domain/Ids.js"
import type { SuiteLayout } from "../../../domain/Suite.js"
import type {
  MemberRecord,
  MembershipFacts,
  MembershipRecord,
  SuiteCatalogService
} from "../../../services/SuiteCatalog.js"
import { registrationIssues } from "../suite/catalog.js"

const memberKey = (suiteId: string, experimentId: string) => `suite/${suiteId}/member/${experimentId}`
const runPrefix = (suiteId: string, runId: string) => `suite/${suiteId}/run/${runId}/`

/** `LIKE` pattern text with `%`, `_` and `\` taken literally. */
const literal = (s: string) => s.replace(/[\\%_]/g, (c) => `\\${c}`)

const unavailable = (what: string) => (e: unknown) =>
  new StoreUnavailable({ message: `suite catalog: cannot ${what}: ${e instanceof Error ? e.message : String(e)}` })

/**
 * One member's facts in one run, as this catalog keeps them: the catalog's
 * {@link MembershipRecord} and, once the submission ended, the run's outcome counts of the
 * member's pipelines (`null` before).
 *
 * @internal
 */
export interface ClusterMembership extends MembershipRecord {
  readonly succeeded: number | null
  readonly failed: number | null
  readonly skipped: number | null
}

/**
 * What {@link make} returns: the suite catalog service the suite's admission stream records
 * into (`Suite.pipelines`), and what only the cluster's submitter writes: each member's
 * outcome counts of a run (`recordOutcome`) and the run's memberships with them
 * (`runMembership`).
 *
 * @internal
 */
export interface ClusterSuiteCatalog extends SuiteCatalogService {
  readonly recordOutcome: (
    runId: RunId,
    experimentId: string,
    outcome: { readonly succeeded: number; readonly failed: number; readonly skipped: number },
    nowMs: number
  ) => Effect.Effect<void, StoreUnavailable>
  readonly runMembership: (runId: RunId) => Effect.Effect<ReadonlyArray<ClusterMembership>, StoreUnavailable>
}

const readMembers = (sql: SqlClient.SqlClient, suiteId: string) =>
  Effect.map(
    sql.unsafe<{ readonly value: string }>(
      `SELECT value FROM assay_meta WHERE key LIKE $1 ESCAPE '\\' ORDER BY key`,
      [`${literal(`suite/${suiteId}/member/`)}%`]
    ),
    (rows) => rows.map((r) => JSON.parse(r.value) as MemberRecord)
  )

const readRun = (sql: SqlClient.SqlClient, suiteId: string, runId: string | undefined) =>
  Effect.map(
    sql.unsafe<{ readonly value: string }>(
      `SELECT value FROM assay_meta WHERE key LIKE $1 ESCAPE '\\' ORDER BY key`,
      [`${literal(runId === undefined ? `suite/${suiteId}/run/` : runPrefix(suiteId, runId))}%`]
    ),
    (rows) =>
      rows.map((r) => {
        const v = JSON.parse(r.value) as Partial<ClusterMembership> & Pick<MembershipRecord, "runId" | "experimentId">
        return {
          runId: v.runId,
          experimentId: v.experimentId,
          selected: v.selected ?? false,
          admitted: v.admitted ?? 0,
          sourceExhausted: v.sourceExhausted ?? false,
          sourceError: v.sourceError ?? null,
          limitReached: v.limitReached ?? false,
          updatedAt: v.updatedAt ?? 0,
          succeeded: v.succeeded ?? null,
          failed: v.failed ?? null,
          skipped: v.skipped ?? null
        } satisfies ClusterMembership
      })
  )

/**
 * The catalog of suite `suiteId` in the Postgres store reached by `sql`. `registerMembers`
 * refuses a known member whose definition changed with the suite store's own check
 * (`registrationIssues`: `ConfigError` at `experiments.ID` naming the changed parts) before
 * anything is written, and inserts the new ones (a concurrent registration of the same
 * member is checked again after the insert); `view`, `acceptChangedRows` and the other read
 * views of a suite root are not kept here (`view` fails with `ConfigError`: read the store
 * with `assay report URL`). Every statement's failure is `StoreUnavailable`.
 *
 * @internal
 */
export const make = (
  sql: SqlClient.SqlClient,
  options: {
    readonly suiteId: string
    readonly root: string
    readonly layout: SuiteLayout
    readonly outputDirOf: (experimentId: string) => string
  }
): ClusterSuiteCatalog => {
  const { suiteId } = options
  const members = readMembers(sql, suiteId).pipe(Effect.mapError(unavailable("read the suite's members")))
  const upsertRun = (runId: RunId, experimentId: string, fields: Record<string, unknown>, nowMs: number) =>
    Effect.gen(function*() {
      const key = `${runPrefix(suiteId, runId)}${experimentId}`
      const [row] = yield* sql.unsafe<{ readonly value: string }>(`SELECT value FROM assay_meta WHERE key = $1`, [key])
      const before: Record<string, unknown> = row === undefined
        ? { runId, experimentId, selected: false, admitted: 0, sourceExhausted: false, sourceError: null, limitReached: false }
        : JSON.parse(row.value)
      const value = JSON.stringify({ ...before, ...fields, runId, experimentId, updatedAt: nowMs })
      yield* sql.unsafe(
        `INSERT INTO assay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
        [key, value]
      )
    }).pipe(Effect.mapError(unavailable(`record member "${experimentId}" of run ${runId}`)))
  return {
    suiteId,
    layout: options.layout,
    root: options.root,
    outputDirOf: options.outputDirOf,
    members,
    registerMembers: (ms, nowMs) =>
      Effect.gen(function*() {
        const check = (registered: ReadonlyArray<MemberRecord>) => {
          // a cluster suite has no output root: its members live in the database
          const issues = registrationIssues(registered, ms, "another database (--database)")
          return issues.length === 0
            ? Effect.void
            : Effect.fail(new ConfigError({ message: issues.map((i) => `${i.path}: ${i.message}`).join("\n"), issues }))
        }
        yield* check(yield* members)
        for (const m of ms) {
          const record: MemberRecord = {
            experimentId: m.experimentId,
            definitionDigest: m.definitionDigest,
            definitionParts: m.definitionParts ?? null,
            label: m.label,
            limit: m.limit,
            createdAt: nowMs
          }
          yield* sql.unsafe(
            `INSERT INTO assay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`,
            [memberKey(suiteId, m.experimentId), JSON.stringify(record)]
          ).pipe(Effect.mapError(unavailable(`register member "${m.experimentId}"`)))
        }
        // two submitters registering the same new member at once: the first insert holds
        yield* check(yield* members)
      }),
    recordMembership: (runId, experimentId, facts: MembershipFacts, nowMs) => upsertRun(runId, experimentId, facts, nowMs),
    membership: (runId) =>
      Effect.map(readRun(sql, suiteId, runId), (rows) => rows.map(({ failed: _f, skipped: _s, succeeded: _o, ...r }) => r)).pipe(
        Effect.mapError(unavailable("read the suite's runs"))
      ),
    view: () =>
      Effect.fail(
        new ConfigError({
          message: `suite "${suiteId}" lives in a Postgres store: read it with assay report URL (its suites section)`,
          issues: [{ path: "experiment", message: "a member view is not kept in a Postgres store" }]
        })
      ),
    recordOutcome: (runId, experimentId, outcome, nowMs) => upsertRun(runId, experimentId, outcome, nowMs),
    runMembership: (runId) => readRun(sql, suiteId, runId).pipe(Effect.mapError(unavailable("read the suite's runs")))
  }
}

/**
 * The local keys of member `experimentId` of suite `suiteId` that the Postgres store reached by
 * `sql` holds pipelines of, each with the seed digest its pipeline ran from (what a suite
 * submission compares with the member's source: rows edited or removed since they ran).
 *
 * @internal
 */
export const storedKeys = (
  sql: SqlClient.SqlClient,
  suiteId: string,
  experimentId: string
): Effect.Effect<ReadonlyMap<string, string>, StoreUnavailable> =>
  Effect.map(
    sql.unsafe<{ readonly k: string; readonly d: string }>(
      `SELECT local_key AS k, seed_digest AS d FROM assay_pipelines
       WHERE suite_id = $1 AND experiment_id = $2 AND local_key IS NOT NULL`,
      [suiteId, experimentId]
    ),
    (rows) => new Map(rows.map((r) => [r.k, r.d]))
  ).pipe(Effect.mapError(unavailable(`read member "${experimentId}"'s stored pipelines`)))

/**
 * One member of a suite in a Postgres store as `assay report` shows it: its registration, its
 * pipelines in the store by state (every run: the cumulative view), and its facts in the
 * suite's latest run (`null`: none recorded).
 *
 * @internal
 */
export interface MemberSummary {
  readonly experimentId: string
  readonly label: string | null
  readonly byState: Readonly<Record<string, number>>
  readonly latest: ClusterMembership | null
}

/**
 * One suite of a Postgres store: its id, its latest run (the run whose membership was updated
 * last) and its members.
 *
 * @internal
 */
export interface SuiteSummary {
  readonly suiteId: string
  readonly latestRunId: string | null
  readonly members: ReadonlyArray<MemberSummary>
}

/**
 * Every suite the Postgres store reached by `sql` holds (none: an experiments-only store),
 * by suite id: see {@link SuiteSummary}. Three statements whatever the number of pipelines
 * (the pipelines are counted by `suite_id`, `experiment_id` and state).
 *
 * @internal
 */
export const summaries = (sql: SqlClient.SqlClient): Effect.Effect<ReadonlyArray<SuiteSummary>, StoreUnavailable> =>
  Effect.gen(function*() {
    const rows = yield* sql.unsafe<{ readonly key: string; readonly value: string }>(
      `SELECT key, value FROM assay_meta WHERE key LIKE 'suite/%' ORDER BY key`
    )
    if (rows.length === 0) return []
    const counts = yield* sql.unsafe<{ readonly s: string; readonly e: string; readonly state: string; readonly n: unknown }>(
      `SELECT suite_id AS s, experiment_id AS e, state, count(*) AS n FROM assay_pipelines
       WHERE suite_id IS NOT NULL GROUP BY suite_id, experiment_id, state`
    )
    const suites = new Map<string, { members: Map<string, MemberRecord>; runs: Array<ClusterMembership> }>()
    for (const r of rows) {
      const m = /^suite\/(.+)\/(member|run)\/(.+)$/.exec(r.key)
      if (m === null) continue
      const s = suites.get(m[1]!) ?? { members: new Map<string, MemberRecord>(), runs: [] }
      suites.set(m[1]!, s)
      const v = JSON.parse(r.value)
      if (m[2] === "member") s.members.set(v.experimentId, v)
      else s.runs.push({ succeeded: null, failed: null, skipped: null, ...v })
    }
    return [...suites].map(([suiteId, s]): SuiteSummary => {
      const latest = s.runs.reduce<ClusterMembership | undefined>((a, r) => a === undefined || r.updatedAt > a.updatedAt ? r : a, undefined)
      const latestRunId = latest?.runId ?? null
      return {
        suiteId,
        latestRunId,
        members: [...s.members.values()].map((m) => {
          const byState: Record<string, number> = {}
          for (const c of counts) if (c.s === suiteId && c.e === m.experimentId) byState[c.state] = Number(c.n)
          return {
            experimentId: m.experimentId,
            label: m.label,
            byState,
            latest: s.runs.find((r) => r.runId === latestRunId && r.experimentId === m.experimentId) ?? null
          }
        })
      }
    })
  }).pipe(Effect.mapError(unavailable("read the store's suites")))

/**
 * The text of {@link summaries} for `assay report`: per suite a header and a line per member
 * (its pipelines in the store by state; its latest run's submitted, succeeded, failed and
 * already-done counts). Empty for a store without suites.
 *
 * @internal
 */
export const renderSummaries = (suites: ReadonlyArray<SuiteSummary>): string =>
  suites.map((s) =>
    [
      `suite ${s.suiteId} (every run's pipelines by member${s.latestRunId === null ? "" : `; latest run ${s.latestRunId}`}):`,
      ...s.members.map((m) => {
        const name = m.label === null ? m.experimentId : `${m.experimentId} (${m.label})`
        const states = Object.entries(m.byState).sort(([a], [b]) => a.localeCompare(b)).map(([k, n]) => `${k} ${n}`).join(" · ")
        const l = m.latest
        const run = l === null
          ? ""
          : !l.selected
          ? " · latest run: not selected"
          : ` · latest run: submitted ${l.admitted}${
            l.succeeded === null ? "" : ` · succeeded ${l.succeeded} · failed ${l.failed} · already done ${l.skipped}`
          }`
        return `  ${name}: ${states === "" ? "no pipelines" : states}${run}`
      })
    ].join("\n")
  ).join("\n")
