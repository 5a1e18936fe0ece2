/**
 * The call cache over a Postgres client: the `assay_call_cache` table (store migration 2).
 * Shared by `PgCallCache` (a client of its own) and the Postgres store (its own client, the
 * store's own cache, `Store.callCache`).
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Option } from "effect"
import type { CacheEntry, CallCacheService } from "../../../services/CallCache.js"
import { entryParams } from "../callCacheRow.js"
import { unavailableOf } from "./driver.js"
import { CALL_CACHE_TABLE } from "./migrations.js"
import { redactUrl } from "./url.js"

type Row = Record<string, unknown>

/** The entry stored under `key` from its row. */
const entryOfRow = (key: string, r: Row): CacheEntry => {
  const payload = r.payload as Uint8Array
  return {
    key,
    taskName: String(r.task_name),
    namespace: JSON.parse(String(r.namespace)) as CacheEntry["namespace"],
    typeName: String(r.type_name),
    codec: String(r.codec),
    data: new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength),
    usage: r.usage === null ? null : JSON.parse(String(r.usage)) as CacheEntry["usage"],
    createdAt: Number(r.created_at)
  }
}

/**
 * The cache over an open client (`url` only names the database in messages). Every failed
 * statement is a `StoreUnavailable` naming the database without its password.
 *
 * @internal
 */
export const makeWith = (sql: SqlClient.SqlClient, url: string): CallCacheService => {
  const run = (what: string, text: string, params: ReadonlyArray<unknown>) =>
    Effect.mapError(sql.unsafe<Row>(text, params as Array<unknown>), (e) => unavailableOf(url, `call cache ${what}`, e))
  return {
    kind: "postgres",
    location: redactUrl(url),
    get: (key) =>
      Effect.map(
        run(
          "read",
          `SELECT task_name, namespace, type_name, codec, payload, usage, created_at FROM ${CALL_CACHE_TABLE} WHERE key = $1`,
          [key]
        ),
        (rows) => {
          const r = rows[0]
          return r === undefined ? Option.none() : Option.some(entryOfRow(key, r))
        }
      ),
    put: (e) =>
      Effect.asVoid(run(
        "write",
        `INSERT INTO ${CALL_CACHE_TABLE} (key, task_name, namespace, type_name, codec, payload, usage, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (key) DO UPDATE SET task_name = EXCLUDED.task_name, namespace = EXCLUDED.namespace,
           type_name = EXCLUDED.type_name, codec = EXCLUDED.codec, payload = EXCLUDED.payload, usage = EXCLUDED.usage,
           created_at = EXCLUDED.created_at`,
        entryParams(e)
      )),
    putFirst: (e, ttlMs) =>
      Effect.flatMap(
        run(
          "write",
          `INSERT INTO ${CALL_CACHE_TABLE} (key, task_name, namespace, type_name, codec, payload, usage, created_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (key) DO UPDATE SET task_name = EXCLUDED.task_name, namespace = EXCLUDED.namespace,
             type_name = EXCLUDED.type_name, codec = EXCLUDED.codec, payload = EXCLUDED.payload, usage = EXCLUDED.usage,
             created_at = EXCLUDED.created_at
           WHERE $9::bigint IS NOT NULL AND EXCLUDED.created_at - ${CALL_CACHE_TABLE}.created_at >= $9::bigint
           RETURNING key`,
          [...entryParams(e), ttlMs]
        ),
        (stored) =>
          stored.length > 0
            ? Effect.succeed(e)
            // kept the row there: read it (a statement of its own sees the row another
            // transaction committed; the row gone meanwhile: this entry is the answer)
            : Effect.map(
              run(
                "read",
                `SELECT task_name, namespace, type_name, codec, payload, usage, created_at FROM ${CALL_CACHE_TABLE} WHERE key = $1`,
                [e.key]
              ),
              (rows) => rows[0] === undefined ? e : entryOfRow(e.key, rows[0])
            )
      ),
    size: Effect.map(run("read", `SELECT count(*) AS n FROM ${CALL_CACHE_TABLE}`, []), (r) => Number(r[0]?.n ?? 0))
  }
}

