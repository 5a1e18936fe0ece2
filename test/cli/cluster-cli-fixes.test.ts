/**
 * Fixes of a fresh user's findings on the cluster CLI (tester17af):
 *
 * - `study run|resume|confirm --max-admitted 0` (or negative) is refused as `run --engine
 *   cluster` refuses it (exit 2, `--max-admitted must be an integer >= 1 (got 0)`).
 * - the commands printed to be pasted after a stop (`continue with: assay study resume …`) or
 *   while no runner is up (`assay runner -c FILE --database URL`) give the URL without its
 *   password (a masked `user:***@` would log in with `***`), plus a note saying the password is
 *   to be given again, only when the URL had one.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as path from "node:path"
import { vi } from "vitest"
import * as ClusterRun from "../../src/cli/ClusterRun.js"
import * as StudyRun from "../../src/cli/StudyRun.js"
import { assay, root } from "../support/cli.js"

const study = path.join(root, "examples/studies/study.yaml")
const url = "postgres://nobody@127.0.0.1:1/none"

describe("study --max-admitted", () => {
  it.live("0 or a negative value is refused (exit 2) by study run, resume and confirm", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["study", "run", study, "--max-admitted", "0"], "0"],
        [["study", "resume", study, "--max-admitted", "-3"], "-3"],
        [["study", "confirm", study, "v01", "--repeats", "2", "--max-admitted", "0"], "0"]
      ]
      for (const [argv, got] of cases) {
        const r = yield* assay([...argv, "--engine", "cluster", "--database", url])
        assert.strictEqual(r.code, 2, `${argv.join(" ")}: ${r.stdout}${r.stderr}`)
        assert.include(r.stdout + r.stderr, `--max-admitted must be an integer >= 1 (got ${got})`)
      }
    }), 120_000)
})

describe("pasteable commands on the cluster engine (the database password)", () => {
  const secret = "Hunter2Secret"
  const withPw = `postgres://pwuser:${secret}@127.0.0.1:5432/pw`
  const bare = "postgres://pwuser@127.0.0.1:5432/pw"
  const args = {
    file: "study.yaml",
    resume: false,
    newVersion: false,
    outputRoot: Option.none(),
    trials: [],
    strictEnv: false,
    json: false,
    quiet: false,
    engine: "cluster" as const,
    database: Option.some(withPw)
  }

  it("continue with: the URL without the password, and a note to give it again", () => {
    const text = StudyRun.continueWith(args)
    assert.include(text, `continue with: assay study resume study.yaml --engine cluster --database ${bare}`)
    assert.notInclude(text, "***")
    assert.notInclude(text, secret)
    assert.include(text, "PGPASSWORD")
    assert.include(text, "~/.pgpass")
    assert.notInclude(StudyRun.resumeCommand(args), "***")
  })

  it("continue with: no note when the URL had no password", () => {
    const text = StudyRun.continueWith({ ...args, database: Option.some(bare) })
    assert.strictEqual(text, `continue with: assay study resume study.yaml --engine cluster --database ${bare}`)
  })

  it.effect("no runner up: the runner command to paste has the URL without the password, and the note", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const spy = vi.spyOn(console, "error").mockImplementation((...xs: Array<unknown>) => {
        lines.push(xs.join(" "))
      })
      try {
        const { onWarning } = ClusterRun.followProgress({ quiet: true, config: "suite.yaml" }, withPw)
        yield* onWarning!({ message: "no cluster runner has been up for 10 s" } as never)
        yield* ClusterRun.followProgress({ quiet: true, config: "suite.yaml" }, bare).onWarning!({ message: "again" } as never)
      } finally {
        spy.mockRestore()
      }
      const [first, second] = lines
      assert.include(first, `Start one (or several) with: assay runner -c suite.yaml --database ${bare}`)
      assert.notInclude(first, "***")
      assert.notInclude(first, secret)
      assert.include(first, "PGPASSWORD")
      assert.notInclude(second, "PGPASSWORD")
      assert.include(second, `--database ${bare}`)
    }))
})
