/**
 * Test helpers for a database that goes away: a SQL client with a switch, and a bounded wait
 * for real I/O under the test clock.
 */
import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/** The client with a switch: while `broken`, every statement fails like a dropped connection. */
export const breakable = (sql: SqlClient.SqlClient) => {
  const state = { broken: false }
  const proxy = new Proxy(sql, {
    apply: (target, self, args) =>
      state.broken
        ? Effect.fail(new SqlError({ cause: "connection terminated (test)", message: "Failed to execute statement" }))
        : Reflect.apply(target as any, self, args)
  })
  return { sql: proxy as SqlClient.SqlClient, state }
}

/** Lets real I/O finish (bounded): the macrotask queue turns until `cond` holds. */
export const eventually = <E, R>(cond: Effect.Effect<boolean, E, R>, turns = 500) =>
  Effect.gen(function*() {
    for (let i = 0; i < turns; i++) {
      if (yield* cond) return true
      yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
    }
    return false
  })
