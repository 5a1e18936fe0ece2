/**
 * A child process for test/cli/cacheDbWritable.test.ts, run as another user (an ordinary one,
 * since permissions do not bind root): runs what `assay validate` checks of `run.cache.db`
 * (`Flags.probeCacheDb`) and what `assay run` does before it creates anything
 * (`Flags.checkCacheDb`) on the file `argv[2]` in each mode of `argv[3]` (comma-separated),
 * and prints one JSON line `{ [mode]: { validate, run } }`, each the refusal's message or
 * `null` when accepted.
 */
import { Effect } from "effect"
import * as Flags from "../../src/cli/Flags.js"

const file = process.argv[2] ?? ""
const modes = (process.argv[3] ?? "readWrite").split(",")
const outcome = (check: Effect.Effect<void, { readonly message: string }>) =>
  check.pipe(Effect.as(null), Effect.catchAll((e) => Effect.succeed(e.message)))

Effect.runPromise(Effect.all(Object.fromEntries(modes.map((mode) => [mode, Effect.all({
  validate: outcome(Flags.probeCacheDb(file, "run.cache.db", mode)),
  run: outcome(Flags.checkCacheDb(file, "run.cache.db", mode))
})])))).then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
