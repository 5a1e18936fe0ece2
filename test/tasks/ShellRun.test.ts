import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ConfigError } from "../../src/domain/Errors.js"
import * as NodeProcessRunner from "../../src/layers/NodeProcessRunner.js"
import { shellRun } from "../../src/tasks/ShellRun.js"

const tree = fileURLToPath(new URL("../fixtures/proc/tree.sh", import.meta.url))
const ctx = {} as never
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("shellRun", () => {
  it.live("argv form: {value} is substituted as one literal argument, never through a shell", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-sh-"))
      const task = shellRun(["node", "-e", "process.stdout.write(JSON.stringify(process.argv.slice(1)))", "in={value}"], {
        cwd: dir
      })
      const value = "a b; touch pwned $(touch pwned2) 'q' \"d\""
      const out = yield* task.run(value, ctx)
      assert.deepStrictEqual(JSON.parse(out.stdout), [`in=${value}`])
      assert.strictEqual(out.exitCode, 0)
      assert.deepStrictEqual(fs.readdirSync(dir), [])
      const json = yield* task.run({ k: [1, 2] }, ctx)
      assert.deepStrictEqual(JSON.parse(json.stdout), ["in={\"k\":[1,2]}"])
    }).pipe(Effect.provide(NodeProcessRunner.layer)))

  it("the string form refuses {value}", () => {
    assert.throws(() => shellRun("cat {value}"), ConfigError)
    assert.doesNotThrow(() => shellRun("echo '{}' | wc -c"))
  })

  it.live("check: a non-zero exit fails with ProcessFailed, or is data with check false", () =>
    Effect.gen(function*() {
      const failing = yield* Effect.either(shellRun("echo oops >&2; exit 3").run(null, ctx))
      assert.isTrue(Either.isLeft(failing))
      if (Either.isLeft(failing)) {
        assert.strictEqual((failing.left as { _tag: string })._tag, "ProcessFailed")
        assert.include((failing.left as { message: string }).message, "oops")
      }
      const data = yield* shellRun("exit 3", { check: false }).run(null, ctx)
      assert.strictEqual(data.exitCode, 3)
    }).pipe(Effect.provide(NodeProcessRunner.layer)))

  it.live("timeout kills the whole process group: no grandchild survives", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-sh-"))
      const pids = path.join(dir, "pids")
      const task = shellRun(["sh", tree, pids, "stubborn"], { timeout: "1500 millis" })
      const r = yield* Effect.either(task.run(null, ctx))
      assert.isTrue(Either.isLeft(r))
      if (Either.isLeft(r)) assert.strictEqual((r.left as { _tag: string })._tag, "ProcessTimeout")
      const listed = fs.readFileSync(pids, "utf8").trim().split("\n").map(Number)
      assert.strictEqual(listed.length, 3)
      // A killed grandchild is reaped by init shortly after: give it a moment.
      for (let i = 0; i < 100 && listed.some(alive); i++) yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
      for (const pid of listed) assert.isFalse(alive(pid), `pid ${pid} survived`)
    }).pipe(Effect.provide(NodeProcessRunner.layer)))
})
