/**
 * `study run` interrupted by a stop signal before any trial started says so (tester16e F6: it
 * exited with no word): the command is interrupted while loading, and its one line says what is true.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Console, Effect, Fiber, Option } from "effect"
import * as StudyRun from "../../src/cli/StudyRun.js"

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
