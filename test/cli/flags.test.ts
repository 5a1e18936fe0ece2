/**
 * Flags declared once (`src/cli/Flags.ts`, `StoreArgs.ts`) behave the same in every command
 * that takes them: `--port` is range-checked with one message (serve and mock-llm), and
 * `--rows`/`--format` refuse the same values (export and merge).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { assay } from "../support/cli.js"

describe("shared flags", () => {
  it.live("--port outside 0..65535 exits 2 with the same message in serve and mock-llm", () =>
    Effect.gen(function*() {
      for (const [args, got] of [[["serve", "x.db", "--port", "70000"], "70000"], [["mock-llm", "--port", "-1"], "-1"]] as const) {
        const r = yield* assay(args)
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, `--port must be an integer between 0 and 65535 (got ${got})`)
      }
    }))

  it.live("--rows and --format refuse the same values in export and merge", () =>
    Effect.gen(function*() {
      const lines = {
        export: (flag: ReadonlyArray<string>) => ["export", "a.db", "out.x", ...flag],
        merge: (flag: ReadonlyArray<string>) => ["merge", "a.db", "-o", "out.x", ...flag]
      }
      for (const [flag, accepted] of [[["--rows", "nope"], "results"], [["--format", "xml"], "jsonl"]] as const) {
        const ex = yield* assay(lines.export(flag))
        const me = yield* assay(lines.merge(flag))
        assert.strictEqual(ex.code, 2, ex.stderr)
        assert.strictEqual(me.code, 2, me.stderr)
        assert.include(ex.stderr, accepted, "the accepted values are listed")
        assert.strictEqual(me.stderr, ex.stderr, `${flag[0]}: one declaration, one message`)
      }
    }))
})
