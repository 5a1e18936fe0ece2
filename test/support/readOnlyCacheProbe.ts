/**
 * A child process for test/layers/SqliteCallCacheReadOnly.test.ts, run as another user (an
 * ordinary one, since permissions do not bind root): opens the cache file `argv[2]` as a
 * `readOnly` run does and prints one JSON line `{ size, keys }` (the entries it serves and
 * the first 16 hex digits of their keys), or `{ error }`, after the log (the snapshot line, also
 * on stdout).
 */
import { Effect } from "effect"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"

const file = process.argv[2] ?? ""
const program = Effect.scoped(Effect.gen(function*() {
  const cache = yield* SqliteCallCache.make({ filename: file, shared: true, readOnly: true })
  const size = yield* cache.size
  const keys: Array<string> = []
  for (const key of (process.argv[3] ?? "").split(",").filter((k) => k !== "")) {
    const got = yield* cache.get(key)
    if (got._tag === "Some") keys.push(key.slice(0, 16))
  }
  return { size, keys }
}))

Effect.runPromise(program).then(
  (r) => process.stdout.write(`${JSON.stringify(r)}\n`),
  (e: unknown) => process.stdout.write(`${JSON.stringify({ error: String(e) })}\n`)
)
