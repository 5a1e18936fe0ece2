/**
 * `assay watch` and `assay serve` as a person runs them: the real `bin/assay` in a child
 * process, on a store that a runner in this test is writing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fails, runRows, writerLayer } from "../fixtures/monitor/liveRun.js"

const BIN = path.resolve(import.meta.dirname, "../../bin/assay")
const tmpFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-cli-")), "store.db")

interface Child {
  readonly proc: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  readonly exit: Effect.Effect<number | null>
}

/** Spawns `bin/assay args` (stdout a pipe, so not a TTY); killed by pid if still alive at scope end. */
const assay = (args: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.sync((): Child => {
      const proc = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"] })
      let out = ""
      let err = ""
      proc.stdout!.on("data", (d) => (out += String(d)))
      proc.stderr!.on("data", (d) => (err += String(d)))
      const done = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)))
      return { proc, stdout: () => out, stderr: () => err, exit: Effect.promise(() => done) }
    }),
    (c) => Effect.sync(() => { if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill("SIGKILL") })
  )

const waitFor = (what: string, check: () => boolean, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const start = Date.now()
    while (!check()) {
      if (Date.now() - start > timeoutMs) return yield* Effect.dieMessage(`timed out waiting for ${what}`)
      yield* Effect.sleep("50 millis")
    }
  })

describe("assay watch / serve (bin/assay)", () => {
  it.live("watch prints plain progress lines while a run proceeds and ends by itself when it ends", () =>
    Effect.scoped(Effect.gen(function*() {
      const file = tmpFile()
      const writer = yield* Layer.build(writerLayer(file, { concurrency: 2 }))
      const watch = yield* assay(["watch", file, "--interval", "0.25"])
      // the watcher waits for a run; start it once the watcher is up
      yield* waitFor("watch to wait for a run", () => watch.stdout().includes("waiting for a run"))
      const run = yield* Effect.fork(Effect.provide(runRows(50, 120), writer))
      const code = yield* watch.exit
      const report = yield* Fiber.join(run)
      const out = watch.stdout()
      assert.strictEqual(code, 0, watch.stderr())
      assert.notInclude(out, "\u001b", "no ANSI sequences when stdout is not a terminal")
      const lines = out.split("\n").filter((l) => l.startsWith(`run ${report.runId} `) && l.includes(" done ("))
      assert.isAtLeast(lines.length, 3, out)
      const done = lines.map((l) => Number(/: (\d+)\/50 done/.exec(l)?.[1] ?? NaN))
      assert.isFalse(done.some(Number.isNaN), out)
      for (let i = 1; i < done.length; i++) assert.isAtLeast(done[i]!, done[i - 1]!)
      assert.isTrue(done.some((d) => d > 0 && d < 50), `saw the run part-way: ${done.join(",")}`)
      assert.include(lines[lines.length - 1]!, "completed: 50/50 done (100.0%)")
      // the final full picture, with the reported metrics and the errors as plain text
      const failed = Array.from({ length: 50 }, (_, n) => n).filter(fails).length
      assert.include(out, `pipelines 50: ${50 - failed} succeeded · ${failed} failed`)
      assert.include(out, "Accuracy: ")
      assert.include(out, "Phase: done")
      assert.include(out, "<script>alert(1)</script> bad row")
    })), { timeout: 60_000 })

  it.live("watch started before the store exists waits for it, then follows the run to its end", () =>
    Effect.scoped(Effect.gen(function*() {
      const file = tmpFile()
      const watch = yield* assay(["watch", file, "--interval", "0.2"])
      yield* waitFor("watch to wait for the store", () => watch.stdout().includes("to be created"))
      assert.isFalse(fs.existsSync(file), "watch creates nothing")
      const report = yield* Effect.provide(runRows(20, 40), writerLayer(file))
      const code = yield* watch.exit
      assert.strictEqual(code, 0, watch.stderr())
      assert.include(watch.stdout(), `run ${report.runId} completed: 20/20 done (100.0%)`)
    })), { timeout: 60_000 })

  it.live("serve started before the store exists waits for it (said once), then serves it", () =>
    Effect.scoped(Effect.gen(function*() {
      const file = tmpFile()
      const serve = yield* assay(["serve", file, "--port", "0"])
      yield* waitFor("serve to wait for the store", () => serve.stdout().includes("to be created") || serve.proc.exitCode !== null)
      assert.isNull(serve.proc.exitCode, `serve exited: ${serve.stderr()}`)
      assert.isFalse(fs.existsSync(file), "serve creates nothing")
      yield* Effect.provide(runRows(6, 1), writerLayer(file))
      yield* waitFor("serve to listen", () => serve.stdout().includes("http://") || serve.proc.exitCode !== null)
      assert.isNull(serve.proc.exitCode, `serve exited: ${serve.stderr()}`)
      assert.strictEqual(serve.stdout().split("to be created").length, 2, "said once")
      const url = /(http:\/\/127\.0\.0\.1:\d+)\//.exec(serve.stdout())![1]!
      const stats = yield* Effect.promise(() => fetch(`${url}/stats`).then((r) => r.json() as Promise<any>))
      assert.strictEqual(stats.pipelines.total, 6)
      serve.proc.kill("SIGTERM")
      assert.strictEqual(yield* serve.exit, 130)
    })), { timeout: 60_000 })

  it.live("serve binds loopback, says so, answers read-only; refuses other hosts and unknown runs (exit 2)", () =>
    Effect.scoped(Effect.gen(function*() {
      const file = tmpFile()
      yield* Effect.provide(runRows(6, 1), writerLayer(file))
      const serve = yield* assay(["serve", file, "--port", "0"])
      yield* waitFor("serve to listen", () => serve.stdout().includes("http://"))
      assert.include(serve.stdout(), "(bound to loopback only)")
      const url = /(http:\/\/127\.0\.0\.1:\d+)\//.exec(serve.stdout())![1]!
      // by default the whole store; the latest run on request
      const store = yield* Effect.promise(() => fetch(`${url}/stats`).then((r) => r.json() as Promise<any>))
      assert.strictEqual(store.run_id, "all")
      assert.strictEqual(store.pipelines.total, 6)
      const stats = yield* Effect.promise(() => fetch(`${url}/stats?run_id=latest`).then((r) => r.json() as Promise<any>))
      assert.strictEqual(stats.pipelines.total, 6)
      assert.strictEqual(stats.run.status, "completed")
      const post = yield* Effect.promise(() => fetch(`${url}/stats`, { method: "POST" }))
      assert.strictEqual(post.status, 405)
      serve.proc.kill("SIGTERM")
      assert.strictEqual(yield* serve.exit, 130)

      const remote = yield* assay(["serve", file, "--host", "0.0.0.0", "--port", "0"])
      assert.strictEqual(yield* remote.exit, 2)
      assert.include(remote.stderr(), "refusing to listen on 0.0.0.0")

      // a busy port names the port and says what to do (exit 2), never a bare "ServeError"
      const second = yield* assay(["serve", file, "--port", "0"])
      yield* waitFor("serve on another port to listen", () => second.stdout().includes("http://"))
      const busy = yield* assay(["serve", file, "--port", /:(\d+)\//.exec(second.stdout())![1]!])
      assert.strictEqual(yield* busy.exit, 2)
      assert.include(busy.stderr(), "is already in use")
      assert.include(busy.stderr(), "--port 0")
      assert.notInclude(busy.stderr(), "ServeError")
      second.proc.kill("SIGTERM")
      yield* second.exit

      const unknown = yield* assay(["watch", file, "--run-id", "nope"])
      assert.strictEqual(yield* unknown.exit, 2)
      assert.include(unknown.stderr(), `unknown run id "nope"`)
    })), { timeout: 60_000 })
})
