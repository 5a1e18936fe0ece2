/**
 * Issue 21, "watch": a run whose writer died (kill -9) shows as stale in `assay watch`, as
 * `assay report` shows it, never as "running 0.00/s"; and `watch` ends by itself.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, start, tempDir, write } from "../support/cli.js"

describe("assay watch: a dead run", () => {
  it.scopedLive("after kill -9, watch says stale (no heartbeat since …), not running 0.00/s, and ends", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const store = path.join(dir, "w.db")
      const conf = write(dir, "w.json", JSON.stringify({
        run: { concurrency: 2, heartbeat: "200 millis", staleAfter: "1 second" },
        pipeline: { name: "w", tasks: [{ use: "delay", args: ["300 millis"] }] },
        source: { range: { n: 100 } }
      }))
      const p = start(["run", "-c", conf, "--store", store])
      yield* Effect.promise(async () => {
        const t0 = Date.now()
        while (true) {
          try {
            const db = new Database(store, { readonly: true, fileMustExist: true })
            const n = (db.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'succeeded'").get() as { n: number }).n
            db.close()
            if (n >= 4) break
          } catch {
            // not created yet
          }
          if (Date.now() - t0 > 30_000) throw new Error("the run never progressed")
          await new Promise((r) => setTimeout(r, 50))
        }
      })
      p.child.kill("SIGKILL")
      yield* Effect.promise(() => p.done)
      yield* Effect.sleep("1500 millis")

      const w = yield* assay(["watch", store, "--interval", "0.2"])
      assert.strictEqual(w.code, 0, w.stderr)
      const first = w.stdout.split("\n")[0]!
      assert.match(first, /^run \S+ stale \(no heartbeat since \d\d:\d\d:\d\d: its writer is gone; resume continues it\): \d+\/100 done/, w.stdout)
      assert.notInclude(first, "running")
      assert.notInclude(w.stdout, "0.00/s")
      assert.include(w.stdout, "stopped sending heartbeats: its writer is gone (the run stays resumable)")

      // report says the same thing, in its words
      const r = yield* assay(["report", store])
      assert.include(r.stdout, "interrupted (stale: stored as running, no heartbeat since")
    }), { timeout: 60_000 })
})
