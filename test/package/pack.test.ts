/**
 * assay used from outside, as a user installs it: `npm pack` makes the tarball (no tests,
 * benches or fixtures in it), a temporary project installs it with npm's cache alone (`npm ci
 * --offline` over a lock derived from the checkout's, see `lockfile.ts`), and there:
 * `npx assay --help`, a YAML experiment run and reported, a TypeScript Effect program that
 * imports `assay` and `effect` with a test layer swapped in, and `tsc` type-checking that
 * program (and refusing a wrong one: the `.d.ts` carry real types).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { exec, root, tempDir } from "../support/cli.js"
import { projectLock } from "./lockfile.js"

interface PackedFile {
  readonly path: string
}

const experiment = `pipeline:
  name: outside
  tasks:
    - use: delay
      args: [5 millis]
    - use: echo
source:
  range: { n: 3 }
`

const program = `import { Context, Effect, Layer } from "effect"
import { MemoryStore, Pipeline, Pool, Runner, Task } from "assay"

/** What the experiment depends on: a judge (in real life a model behind HTTP). */
class Judge extends Context.Tag("user/Judge")<Judge, { readonly grade: (text: string) => Effect.Effect<number> }>() {}

export const JudgeLive = Layer.succeed(Judge, { grade: () => Effect.die("the live judge is not reachable from a test") })
export const JudgeTest = Layer.succeed(Judge, { grade: (text) => Effect.succeed(text.length) })

const ask = Task.sync("ask", (q: string) => \`answer to \${q}\`)
const grade = Task.make("grade", (a: string) => Effect.flatMap(Judge, (j) => j.grade(a)))

export const program = Runner.run(Pipeline.make("graded", ask, grade).map(["a", "bb", "ccc"]))

const RunnerTest = Runner.layer({ handleSignals: false }).pipe(
  Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))
)

const report = await Effect.runPromise(program.pipe(Effect.provide([RunnerTest, JudgeTest])))
console.log(JSON.stringify({ succeeded: report.stats.byState.succeeded, summary: report.summary() }))
`

/** A type error tsc must report: a task's output does not fit the next task's input. */
const wrong = `import { Pipeline, Task } from "assay"
const count = Task.sync("count", (s: string) => s.length)
const shout = Task.sync("shout", (s: string) => s.toUpperCase())
export const broken = Pipeline.make("broken", count, shout)
`

const tsconfig = {
  compilerOptions: {
    strict: true,
    exactOptionalPropertyTypes: true,
    module: "NodeNext",
    moduleResolution: "NodeNext",
    target: "ES2022",
    lib: ["ES2022"],
    types: ["node"],
    noEmit: true
  },
  include: ["program.ts"]
}

describe("the packed package, installed from npm's cache into a new project", { timeout: 600_000 }, () => {
  it.scopedLive("has no tests in the tarball; npx assay, a YAML run, a TS program with a test layer, tsc", () =>
    Effect.gen(function*() {
      // 1. What the tarball holds (dist/ was built by the run's global setup).
      const dry = yield* exec("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"])
      assert.strictEqual(dry.code, 0, dry.stderr)
      const files = (JSON.parse(dry.stdout) as Array<{ files: Array<PackedFile> }>)[0]!.files.map((f) => f.path)
      for (const needed of ["bin/assay", "dist/index.js", "dist/index.d.ts", "dist/bundle/fastStart.js", "dist/cli/bin.js", "dist/cli/resolveHooks.mjs", "package.json"]) {
        assert.include(files, needed)
      }
      const unwanted = files.filter((f) => /^(test|bench|examples|scripts|\.ci)\/|fixtures|\.test\.|tsbuildinfo/.test(f))
      assert.deepStrictEqual(unwanted, [])

      // 2. Pack, and install into a new project from the cache alone.
      const dir = yield* tempDir("pack")
      const packed = yield* exec("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", dir])
      assert.strictEqual(packed.code, 0, packed.stderr)
      const tarball = path.join(dir, (JSON.parse(packed.stdout) as Array<{ filename: string }>)[0]!.filename)
      const project = path.join(dir, "project")
      fs.mkdirSync(project)
      const { dependencies, lock } = projectLock({
        checkoutLock: path.join(root, "package-lock.json"),
        tarball,
        assayPackageJson: JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")),
        extra: ["effect", "typescript", "@types/node"]
      })
      fs.writeFileSync(
        path.join(project, "package.json"),
        JSON.stringify({ name: "assay-user", private: true, type: "module", dependencies }, null, 2)
      )
      fs.writeFileSync(path.join(project, "package-lock.json"), JSON.stringify(lock, null, 2))
      // Install scripts off: the only one that matters, better-sqlite3's native compile (about
      // 90 s of CPU), is replaced by the checkout's own build of the very same version.
      const install = yield* exec("npm", ["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], { cwd: project })
      assert.strictEqual(install.code, 0, install.stderr)
      const native = "node_modules/better-sqlite3/build/Release/better_sqlite3.node"
      assert.strictEqual(
        JSON.parse(fs.readFileSync(path.join(project, "node_modules/better-sqlite3/package.json"), "utf8")).version,
        JSON.parse(fs.readFileSync(path.join(root, "node_modules/better-sqlite3/package.json"), "utf8")).version
      )
      fs.mkdirSync(path.dirname(path.join(project, native)), { recursive: true })
      fs.copyFileSync(path.join(root, native), path.join(project, native))

      // 3. The CLI.
      const help = yield* exec("npx", ["--no-install", "assay", "--help"], { cwd: project })
      assert.strictEqual(help.code, 0, help.stderr)
      for (const command of ["validate", "run", "resume", "report", "export"]) assert.include(help.stdout, command)

      // 4. A YAML experiment: run, then report.
      fs.writeFileSync(path.join(project, "experiment.yaml"), experiment)
      const run = yield* exec("npx", ["--no-install", "assay", "run", "-c", "experiment.yaml", "--store", "runs.db"], { cwd: project })
      assert.strictEqual(run.code, 0, run.stderr)
      const report = yield* exec("npx", ["--no-install", "assay", "report", "runs.db"], { cwd: project })
      assert.strictEqual(report.code, 0, report.stderr)
      assert.include(report.stdout, "succeeded 3")

      // 5. A TypeScript Effect program importing assay and effect, with a test layer.
      fs.writeFileSync(path.join(project, "program.ts"), program)
      const ran = yield* exec("npx", ["--no-install", "tsx", "program.ts"], { cwd: project })
      assert.strictEqual(ran.code, 0, ran.stderr)
      assert.strictEqual((JSON.parse(ran.stdout) as { succeeded: number }).succeeded, 3)

      // 6. tsc accepts the program against the installed .d.ts, and refuses a broken chain.
      fs.writeFileSync(path.join(project, "tsconfig.json"), JSON.stringify(tsconfig, null, 2))
      const tsc = path.join(project, "node_modules/typescript/bin/tsc")
      const typed = yield* exec(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project })
      assert.strictEqual(typed.code, 0, typed.stdout + typed.stderr)
      fs.writeFileSync(path.join(project, "wrong.ts"), wrong)
      fs.writeFileSync(path.join(project, "tsconfig.json"), JSON.stringify({ ...tsconfig, include: ["wrong.ts"] }))
      const refused = yield* exec(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project })
      assert.notStrictEqual(refused.code, 0)
      assert.include(refused.stdout, "wrong.ts")
    }))
})
