/**
 * `study run` interrupted by a stop signal before any trial started says so (tester16e F6: it
 * exited with no word): the command is interrupted while loading, and its one line says what is
 * true; through `bin/assay` with a real SIGINT (fix16aa), exit 130 and the same line.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Console, Effect, Fiber, Option } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as StudyRun from "../../src/cli/StudyRun.js"
import { root, start, tempDir, write } from "../support/cli.js"
import { waitFor } from "../support/killHarness.js"

const args: StudyRun.RunStudyArgs = {
  file: "study.yaml",
  resume: false,
  newVersion: false,
  outputRoot: Option.none(),
  trials: [],
  strictEnv: false,
  json: false,
  quiet: false
}

describe("study run: a stop signal before any trial started", () => {
  it.effect("while loading: interrupted, with \"stopped before any trial started; nothing was stored\"", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const base = yield* Effect.console
      const console: Console.Console = { ...base, error: (...xs: ReadonlyArray<unknown>) => Effect.sync(() => void lines.push(xs.join(" "))) } as Console.Console
      const fiber = yield* Effect.fork(StudyRun.runStudy({ load: () => Effect.never }, args).pipe(Console.withConsole(console)))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(lines, ["stopped before any trial started; nothing was stored"])
      assert.strictEqual(
        StudyRun.startupInterruptText({ at: "prepared", version: 2 }, args),
        "stopped before any trial started: protocol version 2 is registered, nothing ran; continue with: assay study resume study.yaml"
      )
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("study run: Ctrl-C at startup through bin/assay (a real SIGINT)", () => {
  it.scopedLive("SIGINT while the study's task module loads: exit 130, \"stopped before any trial started; nothing was stored\", no store written", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("study-sigint")
      const gate = path.join(dir, "gate")
      const reached = path.join(dir, "reached")
      write(dir, "package.json", JSON.stringify({ type: "module" }))
      // the module's top level waits while the gate exists: the CLI is held in its startup
      // (loading the experiment) for as long as the test needs, whatever the machine's speed
      write(dir, "tasks.ts", [
        `import * as fs from "node:fs"`,
        `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
        `if (fs.existsSync(${JSON.stringify(gate)})) {`,
        `  fs.writeFileSync(${JSON.stringify(reached)}, "")`,
        `  while (fs.existsSync(${JSON.stringify(gate)})) await new Promise((r) => setTimeout(r, 20))`,
        `}`,
        `export const score = () => Task.sync("score", (n: number) => n)`
      ].join("\n"))
      write(dir, "experiment.json", JSON.stringify({ pipeline: { name: "cases", tasks: [{ use: "./tasks.ts#score" }] }, source: { range: { n: 3 } } }))
      const file = write(dir, "study.json", JSON.stringify({
        study: { id: "sig", question: "q?", type: "compare" },
        protocol: { experiment: "./experiment.json" },
        output: { root: "out" },
        variables: [{ name: "k", type: "enum", values: [0, 1] }],
        baseline: { k: 0 },
        repeats: 1,
        objectives: [{ metric: "wallMs", direction: "minimize" }]
      }))
      fs.writeFileSync(gate, "")
      const p = start(["study", "run", file], { cwd: dir })
      yield* Effect.addFinalizer(() => Effect.sync(() => { fs.rmSync(gate, { force: true }); if (p.child.exitCode === null) p.child.kill("SIGKILL") }))
      yield* Effect.promise(() => waitFor(() => fs.existsSync(reached) || p.child.exitCode !== null, 120_000))
      assert.isTrue(fs.existsSync(reached), p.stderr())
      p.child.kill("SIGINT")
      const ran = yield* Effect.promise(() => p.done)
      assert.strictEqual(ran.code, 130, ran.stdout + ran.stderr)
      assert.include(ran.stderr, "stopped before any trial started; nothing was stored")
      assert.isFalse(fs.existsSync(path.join(dir, "out", "state.db")), "nothing was stored")
    }), 180_000)
})
