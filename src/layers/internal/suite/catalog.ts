/**
 * The suite catalog tables (migration 0007: `suite_members`, `suite_membership`,
 * `suite_member_dbs`) read and written on the catalog database of a suite root (`state.db`
 * of a combined root, `suite.db` of a byExperiment root). Writes are one synchronous
 * transaction each on the store's write connection; reads go through its read client.
 *
 * @since 0.5.0
 */
import { Effect } from "effect"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { RunId } from "../../../domain/Ids.js"
import { idKey, memberPath } from "../../../domain/Suite.js"
import type { MemberRecord, MemberRegistration, MembershipFacts, MembershipRecord, RowAcceptance } from "../../../services/SuiteCatalog.js"
import { describeSqlError, type SqliteEnv } from "../sqlite/open.js"

type Row = Record<string, unknown>

const query = (env: SqliteEnv, text: string, params: ReadonlyArray<unknown> = []) =>
  env.sql.unsafe<Row>(text, params as Array<unknown>).pipe(
    Effect.mapError((e) => new StoreUnavailable({ message: `store ${env.path}: ${describeSqlError(e.cause)}`, path: env.path, cause: e }))
  )

const partsOf = (u: unknown): Readonly<Record<string, string>> | null => {
  if (typeof u !== "string") return null
  try {
    const parsed: unknown = JSON.parse(u)
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
      ? Object.fromEntries(Object.entries(parsed).map(([k, v]) => [k, String(v)]))
      : null
  } catch {
    return null
  }
}

const toMember = (r: Row): MemberRecord => ({
  experimentId: String(r.experiment_id),
  definitionDigest: String(r.definition_digest),
  definitionParts: partsOf(r.definition_parts),
  label: r.label === null || r.label === undefined ? null : String(r.label),
  limit: r.member_limit === null || r.member_limit === undefined ? null : Number(r.member_limit),
  createdAt: Number(r.created_at)
})

const toMembership = (r: Row): MembershipRecord => ({
  runId: String(r.run_id) as RunId,
  experimentId: String(r.experiment_id),
  selected: Number(r.selected) === 1,
  admitted: Number(r.admitted),
  sourceExhausted: Number(r.source_exhausted) === 1,
  sourceError: r.source_error === null || r.source_error === undefined ? null : String(r.source_error),
  limitReached: Number(r.limit_reached) === 1,
  updatedAt: Number(r.updated_at)
})

/**
 * Every registered member, by id.
 *
 * @since 0.5.0
 * @category catalog
 */
export const members = (env: SqliteEnv): Effect.Effect<ReadonlyArray<MemberRecord>, StoreUnavailable> =>
  Effect.map(query(env, "SELECT * FROM suite_members ORDER BY experiment_id"), (rs) => rs.map(toMember))

/** The prefix of field leaves among the parts (see `SuiteConfig.definitionParts`). */
const FIELD = "field:"

/**
 * The fields under `prefix` (`source`, `pools.apis`) whose leaves differ, as paths relative to
 * it (`range.n`, `resources[0].id`); `undefined` when either side recorded no leaves there (a
 * root registered by an older build, or a section too large to record field by field).
 */
const changedFields = (
  registered: Readonly<Record<string, string>>,
  now: Readonly<Record<string, string>>,
  prefix: string
): ReadonlyArray<string> | undefined => {
  const under = (parts: Readonly<Record<string, string>>) =>
    Object.keys(parts).filter((k) => k.startsWith(`${FIELD}${prefix}.`) || k.startsWith(`${FIELD}${prefix}[`))
  const a = under(registered)
  const b = under(now)
  if (a.length === 0 || b.length === 0) return undefined
  const names = Array.from(new Set([...a, ...b])).sort()
  return names.filter((k) => registered[k] !== now[k]).map((k) => k.slice(FIELD.length + prefix.length).replace(/^\./, ""))
}

/**
 * The parts of a member's definition that differ between the registered record and a new one,
 * one phrase each, in the order pipeline definition, source, pools, run options, in words: which part (`pipeline definition`, `source`, `pool "NAME"`, `run
 * options`), the changed fields when the parts record them, and the old and new value or
 * 12-character digest, e.g.
 *
 * - `pipeline definition (tasks, versions, options or control: spec 1a2b3c4d5e6f -> 6f5e4d3c2b1a)`
 * - `source (field range.n: 1a2b3c4d5e6f -> 6f5e4d3c2b1a)`
 * - `pool "apis" (binding: shared -> private)`, `pool "apis" (declaration, fields resources[0].id: …)`
 * - `run options (limit: none -> 5)`
 *
 * Parts present on one side only count as changed (`(none)`). When either side has no parts (a
 * root registered by an older build) the result is empty: only the digests can be compared.
 *
 * @param registered the parts stored in the catalog (or `null`)
 * @param now the parts of the definition given now (or `null`)
 * @returns the changed parts, described
 * @since 0.5.0
 * @category catalog
 */
export const changedParts = (
  registered: Readonly<Record<string, string>> | null | undefined,
  now: Readonly<Record<string, string>> | null | undefined
): ReadonlyArray<string> => {
  if (registered === null || registered === undefined || now === null || now === undefined) return []
  // pipeline definition, source, pools (each pool's binding, then its declaration), run options
  const rank = (n: string) =>
    n === "tasks" ? "0" : n === "source" ? "1" : n.startsWith("bindings.") ? `2${n.slice(9)}\u00000` :
    n.startsWith("pools.") ? `2${n.slice(6)}\u00001` : n === "limit" ? "3" : `4${n}`
  const names = Array.from(new Set([...Object.keys(registered), ...Object.keys(now)]))
    .filter((n) => !n.startsWith(FIELD))
    .sort((a, b) => rank(a) < rank(b) ? -1 : rank(a) > rank(b) ? 1 : 0)
  const change = (n: string) => `${registered[n] ?? "(none)"} -> ${now[n] ?? "(none)"}`
  const fields = (prefix: string) => {
    const f = changedFields(registered, now, prefix)
    return f === undefined || f.length === 0 ? "" : `${f.length === 1 ? "field" : "fields"} ${f.join(", ")}: `
  }
  return names.flatMap((n) => {
    if (registered[n] === now[n]) return []
    if (n === "tasks") return [`pipeline definition (tasks, their versions, options or control: spec ${change(n)})`]
    if (n === "source") return [`source (${fields("source")}${change(n)})`]
    if (n === "limit") return [`run options (limit: ${change(n)})`]
    if (n.startsWith("bindings.")) {
      const b = (v: string | undefined) => v === undefined ? "(none)" : v === "(private)" ? "private" : `shared pool "${v}"`
      return [`pool "${n.slice("bindings.".length)}" (binding: ${b(registered[n])} -> ${b(now[n])})`]
    }
    if (n.startsWith("pools.")) return [`pool "${n.slice("pools.".length)}" (declaration, ${fields(n)}${change(n)})`]
    return [`${n}: ${change(n)}`]
  })
}

/**
 * The message of a refused definition change of member `id`: the changed parts in words when
 * both sides have them (see {@link changedParts}), else the two digests.
 *
 * @since 0.5.0
 * @category catalog
 */
export const definitionChangeMessage = (
  id: string,
  registered: Pick<MemberRecord, "definitionDigest" | "definitionParts">,
  now: Pick<MemberRecord, "definitionDigest" | "definitionParts">,
  /** Where else the suite could start afresh: "another output root" (a suite root), "another database" (the cluster). */
  elsewhere = "another output root"
): string => {
  const parts = changedParts(registered.definitionParts, now.definitionParts)
  const what = parts.length > 0
    ? `changed: its ${parts.join("; its ")}`
    : `changed (stored digest ${registered.definitionDigest}, now ${now.definitionDigest}; ` +
      `the root does not record the digest's parts, so it cannot tell which part)`
  return `the definition of member "${id}" ${what}. A member id keeps its definition for life: ` +
    `use a new member id or ${elsewhere}`
}

/**
 * Whether a registered member holds the definition given now: the same digest, or one of the
 * digests an older format gave it (`previousDigests`).
 *
 * @since 0.6.0
 * @category catalog
 */
export const matchesRegistered = (
  registered: Pick<MemberRecord, "definitionDigest">,
  now: Pick<MemberRegistration, "definitionDigest" | "previousDigests">
): boolean => registered.definitionDigest === now.definitionDigest || (now.previousDigests ?? []).includes(registered.definitionDigest)

/**
 * The problems registering `ms` beside the `registered` members would refuse (see
 * {@link registerMembers}): a member id differing from a registered one only in letter case, a
 * registered member whose definition changed. Pure: what a suite run checks before it opens any
 * store for writing, and what the registration checks again.
 *
 * @since 0.9.0
 * @category catalog
 */
export const registrationIssues = (
  registered: ReadonlyArray<MemberRecord>,
  ms: ReadonlyArray<Pick<MemberRegistration, "experimentId" | "definitionDigest" | "definitionParts" | "previousDigests">>,
  /** As {@link definitionChangeMessage}'s: where else the suite could start afresh. */
  elsewhere = "another output root"
): ReadonlyArray<{ readonly path: string; readonly message: string }> => {
  // ids are compared ignoring case: they name directories, one directory on some file systems
  const known = new Map(registered.map((m) => [idKey(m.experimentId), m]))
  return ms.flatMap((m) => {
    const k = known.get(idKey(m.experimentId))
    if (k !== undefined && k.experimentId !== m.experimentId) {
      return [{
        path: memberPath(m.experimentId),
        message: `the member id "${m.experimentId}" differs only in letter case from the registered member ` +
          `"${k.experimentId}" (ids name directories, which some file systems do not tell apart by case): ` +
          `spell it "${k.experimentId}" or use another id`
      }]
    }
    return k === undefined || matchesRegistered(k, m) ? [] : [{
      path: memberPath(m.experimentId),
      message: definitionChangeMessage(m.experimentId, k, m, elsewhere)
    }]
  })
}

/**
 * Registers members (see `SuiteCatalogService.registerMembers`): every digest is checked
 * before the one transaction that writes.
 *
 * @since 0.5.0
 * @category catalog
 */
export const registerMembers = (
  env: SqliteEnv,
  ms: ReadonlyArray<MemberRegistration>,
  nowMs: number
): Effect.Effect<void, ConfigError | StoreUnavailable> =>
  Effect.gen(function*() {
    const registered = yield* members(env)
    const issues = registrationIssues(registered, ms)
    if (issues.length > 0) {
      // one problem per line
      return yield* new ConfigError({ message: issues.map((i) => `${i.path}: ${i.message}`).join("\n"), issues })
    }
    // ids are compared ignoring case: they name directories, one directory on some file systems
    const known = new Map(registered.map((m) => [idKey(m.experimentId), m]))
    yield* env.tx((d) => {
      // a member registered under an older format's digest of the same definition: upgraded
      const upgrade = d.prepare(
        "UPDATE suite_members SET definition_digest = ?, definition_parts = ? WHERE experiment_id = ? AND definition_digest = ?"
      )
      for (const m of ms) {
        const k = known.get(idKey(m.experimentId))
        if (k === undefined || k.definitionDigest === m.definitionDigest) continue
        const parts = m.definitionParts === null || m.definitionParts === undefined ? null : JSON.stringify(m.definitionParts)
        upgrade.run(m.definitionDigest, parts, m.experimentId, k.definitionDigest)
      }
      // the parts are recorded when the member is first registered, and filled in for a member
      // registered by a build that did not record them (same digest, so the same definition)
      const upsert = d.prepare(
        `INSERT INTO suite_members (experiment_id, definition_digest, definition_parts, label, member_limit, created_at)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT(experiment_id) DO UPDATE SET label = excluded.label, member_limit = excluded.member_limit,
           definition_parts = COALESCE(suite_members.definition_parts, excluded.definition_parts)`
      )
      for (const m of ms) {
        const parts = m.definitionParts === null || m.definitionParts === undefined ? null : JSON.stringify(m.definitionParts)
        upsert.run(m.experimentId, m.definitionDigest, parts, m.label, m.limit, nowMs)
      }
    })
  })

const FACT_COLUMNS: ReadonlyArray<readonly [keyof MembershipFacts, string]> = [
  ["selected", "selected"],
  ["admitted", "admitted"],
  ["sourceExhausted", "source_exhausted"],
  ["sourceError", "source_error"],
  ["limitReached", "limit_reached"]
]

/**
 * Upserts the facts of (run, member): only the given fields change.
 *
 * @since 0.5.0
 * @category catalog
 */
export const recordMembership = (
  env: SqliteEnv,
  runId: RunId,
  experimentId: string,
  facts: MembershipFacts,
  nowMs: number
): Effect.Effect<void, StoreUnavailable> =>
  env.tx((d) => {
    d.prepare(
      `INSERT INTO suite_membership (run_id, experiment_id, selected, admitted, source_exhausted, source_error, limit_reached, updated_at)
       VALUES (?, ?, 0, 0, 0, NULL, 0, ?) ON CONFLICT(run_id, experiment_id) DO NOTHING`
    ).run(runId, experimentId, nowMs)
    const sets: Array<string> = ["updated_at = ?"]
    const params: Array<unknown> = [nowMs]
    for (const [field, column] of FACT_COLUMNS) {
      const v = facts[field]
      if (v === undefined) continue
      sets.push(`${column} = ?`)
      params.push(typeof v === "boolean" ? (v ? 1 : 0) : v)
    }
    d.prepare(`UPDATE suite_membership SET ${sets.join(", ")} WHERE run_id = ? AND experiment_id = ?`).run(
      ...params,
      runId,
      experimentId
    )
  })

/**
 * The membership rows of one run (or every run), by run start then member id.
 *
 * @since 0.5.0
 * @category catalog
 */
export const membership = (env: SqliteEnv, runId?: RunId): Effect.Effect<ReadonlyArray<MembershipRecord>, StoreUnavailable> =>
  Effect.map(
    runId === undefined
      ? query(
        env,
        `SELECT m.* FROM suite_membership m LEFT JOIN runs r ON r.run_id = m.run_id ORDER BY r.started_at, m.run_id, m.experiment_id`
      )
      : query(env, "SELECT * FROM suite_membership WHERE run_id = ? ORDER BY experiment_id", [runId]),
    (rs) => rs.map(toMembership)
  )

/**
 * The members whose own database the root has created (`byExperiment`).
 *
 * @since 0.5.0
 * @category catalog
 */
export const memberDbs = (env: SqliteEnv): Effect.Effect<ReadonlySet<string>, StoreUnavailable> =>
  Effect.map(query(env, "SELECT experiment_id FROM suite_member_dbs"), (rs) => new Set(rs.map((r) => String(r.experiment_id))))

/**
 * Records that a member's database was created.
 *
 * @since 0.5.0
 * @category catalog
 */
export const markMemberDb = (env: SqliteEnv, experimentId: string, nowMs: number): Effect.Effect<void, StoreUnavailable> =>
  env.tx((d) =>
    void d.prepare("INSERT INTO suite_member_dbs (experiment_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING").run(experimentId, nowMs)
  )

/**
 * The member ids found on the pipelines of a database (`pipelines.experiment_id`, read from
 * its index): the members of a combined root whose catalog rows a run did not write.
 *
 * @since 0.5.0
 * @category catalog
 */
export const pipelineMembers = (env: SqliteEnv): Effect.Effect<ReadonlyArray<string>, StoreUnavailable> =>
  Effect.map(
    query(env, "SELECT DISTINCT experiment_id FROM pipelines WHERE experiment_id IS NOT NULL"),
    (rs) => rs.map((r) => String(r.experiment_id))
  )

/**
 * Marks the pipelines of member `experimentId` whose local key is in `staleKeys` superseded,
 * and those whose key is in `revivedKeys` current again, in the database holding them (`env`,
 * one transaction); returns the number newly superseded (see `SuiteCatalogService.acceptChangedRows`).
 *
 * @since 0.7.0
 * @category catalog
 */
export const supersede = (
  env: SqliteEnv,
  change: {
    readonly experimentId: string
    readonly staleKeys: ReadonlyArray<string>
    readonly revivedKeys: ReadonlyArray<string>
    readonly nowMs: number
  }
): Effect.Effect<number, StoreUnavailable> =>
  env.tx((d) => {
    d.prepare("DELETE FROM suite_superseded WHERE experiment_id = ? AND local_key IN (SELECT value FROM json_each(?))")
      .run(change.experimentId, JSON.stringify(change.revivedKeys))
    const added = d.prepare(
      `INSERT INTO suite_superseded (pipeline_id, experiment_id, local_key, superseded_at)
       SELECT pipeline_id, experiment_id, local_key, ? FROM pipelines
       WHERE experiment_id = ? AND local_key IN (SELECT value FROM json_each(?))
       ON CONFLICT(pipeline_id) DO NOTHING`
    ).run(change.nowMs, change.experimentId, JSON.stringify(change.staleKeys))
    return added.changes
  })

/**
 * Records one accepted row change in the catalog (see `RowAcceptance`).
 *
 * @since 0.7.0
 * @category catalog
 */
export const recordAcceptance = (env: SqliteEnv, a: RowAcceptance): Effect.Effect<void, StoreUnavailable> =>
  env.tx((d) =>
    void d.prepare(
      "INSERT INTO suite_row_acceptances (experiment_id, accepted_at, stale_keys, new_keys, pipelines) VALUES (?, ?, ?, ?, ?)"
    ).run(a.experimentId, a.acceptedAt, JSON.stringify(a.staleKeys), JSON.stringify(a.newKeys), a.pipelines)
  )

const keysOf = (u: unknown): ReadonlyArray<string> => {
  if (typeof u !== "string") return []
  try {
    const parsed: unknown = JSON.parse(u)
    return Array.isArray(parsed) ? parsed.map(String) : []
  } catch {
    return []
  }
}

/**
 * The accepted row changes recorded in the catalog, oldest first (none on a store older than
 * schema 11, opened read-only).
 *
 * @since 0.7.0
 * @category catalog
 */
export const acceptances = (env: SqliteEnv): Effect.Effect<ReadonlyArray<RowAcceptance>, StoreUnavailable> =>
  Effect.gen(function*() {
    const table = yield* query(env, "SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'suite_row_acceptances'")
    if (table.length === 0) return []
    const rows = yield* query(env, "SELECT * FROM suite_row_acceptances ORDER BY accepted_at, acceptance_id")
    return rows.map((r): RowAcceptance => ({
      experimentId: String(r.experiment_id),
      acceptedAt: Number(r.accepted_at),
      staleKeys: keysOf(r.stale_keys),
      newKeys: keysOf(r.new_keys),
      pipelines: Number(r.pipelines)
    }))
  })
