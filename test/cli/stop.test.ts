/**
 * Issue 21 §2 and §4 through the real `bin/assay`, as a user hits them:
 *
 * - stopping does not fail work: an attempt that fails with a retryable error while the run
 *   stops (`--stop-after`, Ctrl-C, within the grace period) leaves its pipeline `interrupted`
 *   and resumable, never `failed`; `--stop-after` exits by what really failed;
 * - the progress line's last frame after a stop counts interrupted pipelines as interrupted
 *   (C17c), never "4/4 100%"; piped progress shows a rate and an ETA from the first second and
 *   its lines are not cut at 80 columns.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, root, start, tempDir, write } from "../support/cli.js"

/**
 * A task that takes `ms` of real time, then (while `STOP_TEST_FAIL` is set) fails: even rows
 * with a retryable `upstream` error (its policy would retry it), odd rows with a fatal one
 * (unless `retryableOnly`); without the variable it succeeds.
 */
const tasksModule = [
  `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
  `const failure = (message: string, errorClass: string) => Object.assign(new Error(message), { errorClass })`,
  `export const slowFail = (ms: number, retryableOnly: boolean) =>`,
  `  Task.promise("slowFail", { parameters: { ms, retryableOnly }, retry: { maxAttempts: 5, base: "100 millis" } }, async (n: number) => {`,
  `    if (process.env.STOP_TEST_FAIL === undefined) return n`,
  `    await new Promise((resolve) => setTimeout(resolve, ms))`,
  `    throw n % 2 === 0 || retryableOnly ? failure("upstream busy", "upstream") : failure("bad row", "fatal")`,
  `  })`
].join("\n")

/**
 * Four rows of `slowFail` taking `ms` each (3 s by default: a Ctrl-C from the test process lands
 * while they run on any machine; 2 s with `--stop-after 1 second`, whose stop the run's own
 * clock fires a second before they end).
 */
const config = (dir: string, name: string, retryableOnly: boolean, ms = 3000) =>
  write(dir, `${name}.json`, JSON.stringify({
    run: { concurrency: 4, grace: "30 seconds" },
    pipeline: { name, tasks: [{ use: "./tasks.mts#slowFail", args: [ms, retryableOnly] }] },
    source: { range: { n: 4 } }
  }))

const states = (store: string): Record<string, number> => {
  const db = new Database(store, { readonly: true })
  try {
    const rows = db.prepare("SELECT state, count(*) AS n FROM pipelines GROUP BY state").all() as Array<{ state: string; n: number }>
    return Object.fromEntries(rows.map((r) => [r.state, r.n]))
  } finally {
    db.close()
  }
}

const lastLine = (stderr: string): string => {
  const progress = stderr.split("\n").filter((l) => l.startsWith("["))
  return progress[progress.length - 1] ?? ""
}

describe("stopping does not fail work (issue 21 §2, C17c)", () => {
  it.scopedLive("--stop-after: retryable failures during the grace end interrupted; the exit code follows the real failures", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "tasks.mts", tasksModule)
      const env = { STOP_TEST_FAIL: "1" }

      // even rows fail retryably, odd rows fatally, all while the run is stopping
      const mixed = path.join(dir, "mixed.db")
      const a = yield* assay(["run", "-c", config(dir, "mixed", false, 2000), "--store", mixed, "--stop-after", "1 second"], { env })
      assert.strictEqual(a.code, 1, `two pipelines really failed\n${a.stderr}`)
      assert.deepStrictEqual(states(mixed), { failed: 2, interrupted: 2 })
      assert.include(a.stderr, "stopped early (--stop-after / run.stopAfter elapsed)")
      const last = lastLine(a.stderr)
      assert.match(last, /\] 2\/4 50\.0% · /, a.stderr)
      assert.include(last, "2 failed · 2 interrupted")
      assert.include(last, "stopped")
      // a plain line longer than 80 columns, whole
      assert.isAbove(last.length, 80, last)
      assert.match(last, / · \d+s$/)
      assert.notInclude(a.stderr, "…")
      const db = new Database(mixed, { readonly: true })
      try {
        const decisions = db.prepare("SELECT decision FROM attempts ORDER BY attempt_id").all() as Array<{ decision: string }>
        const reasons = decisions.map((d) => JSON.parse(d.decision).reason).sort()
        assert.deepStrictEqual(reasons, ["policy_declined", "policy_declined", "stopped", "stopped"])
      } finally {
        db.close()
      }

      // only retryable failures: nothing really failed, exit 0; the run stays resumable
      const retryable = path.join(dir, "retryable.db")
      const conf = config(dir, "retryable", true, 2000)
      const b = yield* assay(["run", "-c", conf, "--store", retryable, "--stop-after", "1 second"], { env })
      assert.strictEqual(b.code, 0, b.stderr)
      assert.deepStrictEqual(states(retryable), { interrupted: 4 })
      assert.match(lastLine(b.stderr), /\] 0\/4 0\.0% · .*0 failed · 4 interrupted · stopped/)
      const c = yield* assay(["resume", "-c", conf, "--store", retryable])
      assert.strictEqual(c.code, 0, c.stderr)
      assert.deepStrictEqual(states(retryable), { succeeded: 4 })
    }), { timeout: 120_000 })

  it.scopedLive("Ctrl-C: attempts failing retryably within the grace period leave their pipelines interrupted; resume completes them", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "tasks.mts", tasksModule)
      const store = path.join(dir, "c.db")
      const conf = config(dir, "ctrlc", true)
      const p = start(["run", "-c", conf, "--store", store], { env: { STOP_TEST_FAIL: "1" } })
      // wait until the four attempts are in flight (their pipelines admitted), then Ctrl-C
      yield* Effect.promise(async () => {
        const t0 = Date.now()
        while (true) {
          try {
            if ((states(store)["running"] ?? 0) === 4) break
          } catch {
            // not created yet
          }
          if (Date.now() - t0 > 30_000) throw new Error("the run never admitted its pipelines")
          await new Promise((r) => setTimeout(r, 50))
        }
      })
      p.child.kill("SIGINT")
      const r = yield* Effect.promise(() => p.done)
      assert.strictEqual(r.code, 130, r.stderr)
      assert.deepStrictEqual(states(store), { interrupted: 4 })
      const last = lastLine(r.stderr)
      assert.match(last, /\] 0\/4 0\.0% · /, r.stderr)
      assert.include(last, "4 interrupted")
      assert.notInclude(r.stderr, "4/4 100.0%")
      const again = yield* assay(["resume", "-c", conf, "--store", store])
      assert.strictEqual(again.code, 0, again.stderr)
      assert.deepStrictEqual(states(store), { succeeded: 4 })
    }), { timeout: 120_000 })
})

describe("piped progress (issue 21 §4)", () => {
  it.scopedLive("a rate and an ETA from the first second, a last line with the run's average rate", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const conf = write(dir, "p.json", JSON.stringify({
        run: { concurrency: 4 },
        pipeline: { name: "p", tasks: [{ use: "delay", args: ["100 millis"] }] },
        source: { range: { n: 120 } }
      }))
      const r = yield* assay(["run", "-c", conf, "--store", path.join(dir, "p.db")])
      assert.strictEqual(r.code, 0, r.stderr)
      const lines = r.stderr.trim().split("\n").filter((l) => l.startsWith("["))
      assert.isAtLeast(lines.length, 3, r.stderr)
      // the first line (at 1 s) already has a rate and an ETA
      assert.match(lines[0]!, /\] \d+\/120 \d+\.\d% · \d+\.\d+\/s · ETA \d+s · 0 failed/, lines[0])
      assert.match(lines[0]!, / · 1s$/)
      // 120 pipelines of 100 ms at concurrency 4: about 40/s on average
      const avg = Number(/· (\d+\.\d+)\/s avg/.exec(lines[lines.length - 1]!)?.[1])
      assert.isAbove(avg, 10, lines[lines.length - 1])
      assert.match(lines[lines.length - 1]!, /\] 120\/120 100\.0% · /)
    }), { timeout: 60_000 })
})
