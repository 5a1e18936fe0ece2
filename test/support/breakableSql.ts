/**
 * Test helpers for a database that goes away: a SQL client with a switch, and a bounded wait
 * for real I/O under the test clock.
 */
import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Deferred, Effect } from "effect"

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

/**
 * The client with its slot claims (the global pools' statement that takes a slot,
 * `pool/pg/sql.ts`) held back on request: while `state.held` is set, a slot claim made then
 * completes `started` and waits for `go` before it is sent.
 */
export const holdingClaims = (sql: SqlClient.SqlClient) => {
  const state = {
    held: undefined as { readonly started: Deferred.Deferred<void>; readonly go: Deferred.Deferred<void> } | undefined
  }
  const proxy = new Proxy(sql, {
    get: (target, key, receiver) => {
      const value = Reflect.get(target, key, receiver)
      if (key !== "unsafe") return value
      return (text: string, params?: ReadonlyArray<unknown>) => {
        const statement = (value as SqlClient.SqlClient["unsafe"]).call(target, text, params as any)
        const held = state.held
        if (held === undefined || !/UPDATE\s+assay_pool_slot/i.test(text) || !/SET holder =/i.test(text)) return statement
        return Effect.zipRight(Effect.zipRight(Deferred.succeed(held.started, undefined), Deferred.await(held.go)), statement)
      }
    }
  })
  return { sql: proxy as SqlClient.SqlClient, state }
}

/**
 * Lets real I/O finish (bounded): the macrotask queue turns until `cond` holds. With `turns`,
 * at most that many turns (to let whatever is ready run, e.g. `eventually(Effect.succeed(false), 5)`);
 * without, until `cond` holds or `boundMs` of wall time pass (default 20,000 ms): a database
 * round trip on a loaded machine can outlast any fixed number of turns. Returns whether `cond` held.
 */
export const eventually = <E, R>(cond: Effect.Effect<boolean, E, R>, turns?: number, boundMs = 20_000) =>
  Effect.gen(function*() {
    // wall time only bounds the wait for real I/O (the test clock does not move real sockets)
    const giveUpAt = Date.now() + boundMs
    for (let i = 0; turns === undefined ? Date.now() < giveUpAt : i < turns; i++) {
      if (yield* cond) return true
      yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
    }
    return turns === undefined ? false : yield* cond
  })
