/**
 * assay used from outside, as a user installs it: `npm pack` makes the tarball (no tests,
 * benches or fixtures in it), a temporary project installs it with npm's cache alone (`npm ci
 * --offline` over a lock derived from the checkout's, see `lockfile.ts`), and there:
 * `npx assay --help`, a YAML experiment run and reported, a TypeScript Effect program that
 * imports `assay` and `effect` with a test layer swapped in, and `tsc` type-checking that
 * program (and refusing a wrong one: the `.d.ts` carry real types). Then, in the same project,
 * every step of `docs/tutorial.md` in order.
 */
import { assert, layer } from "@effect/vitest"
import Database from "better-sqlite3"
import { Context, Effect, Layer, Schedule } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { exec, root } from "../support/cli.js"
import { projectLock } from "./lockfile.js"
import { readTutorial } from "./tutorial.js"

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

/**
 * Packs the checkout and installs the tarball (plus `extra`) into `project`, offline. Gives the
 * paths of the files in the tarball (as `npm pack --json` lists them).
 */
const installPacked = (dir: string, project: string) =>
  Effect.gen(function*() {
    const packed = yield* exec("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", dir])
    assert.strictEqual(packed.code, 0, packed.stderr)
    const pack = (JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<PackedFile> }>)[0]!
    const tarball = path.join(dir, pack.filename)
    fs.mkdirSync(project, { recursive: true })
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
    return pack.files.map((f) => f.path)
  })

const freePort = () =>
  Effect.async<number>((resume) => {
    const server = net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resume(Effect.succeed(port)))
    })
  })

/**
 * A command of the tutorial started in its own process group (as a terminal does), killed with
 * its group when the scope closes; `output()` is what it printed so far.
 */
const background = (command: string, cwd: string, env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child = spawn("bash", ["-c", `exec ${command}`], { cwd, env: { ...process.env, ...env }, detached: true, stdio: ["ignore", "pipe", "pipe"] })
      let out = ""
      child.stdout!.on("data", (d: Buffer) => (out += d.toString()))
      child.stderr!.on("data", (d: Buffer) => (out += d.toString()))
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code, signal) => resolve(code ?? (signal === null ? null : 128 + os.constants.signals[signal]))))
      return { child, output: () => out, exited }
    }),
    ({ child }) => Effect.sync(() => killGroup(child, "SIGKILL"))
  )

const killGroup = (child: ChildProcess, signal: NodeJS.Signals) => {
  try {
    process.kill(-child.pid!, signal)
  } catch {
    // already gone
  }
}

const httpGet = (url: string) =>
  Effect.tryPromise(() => fetch(url).then(async (r) => ({ status: r.status, text: await r.text() })))

const untilOk = <A, E>(self: Effect.Effect<A, E>) =>
  self.pipe(Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("60 seconds"))))

const succeededIn = (store: string): number => {
  if (!fs.existsSync(store)) return 0
  const db = new Database(store, { readonly: true, fileMustExist: true })
  try {
    return (db.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'succeeded'").get() as { n: number }).n
  } catch {
    return 0
  } finally {
    db.close()
  }
}

/**
 * The packed tarball installed into a new project under a temporary directory (removed after),
 * and the paths of the files in the tarball.
 */
class Packed extends Context.Tag("test/Packed")<Packed, { readonly dir: string; readonly project: string; readonly files: ReadonlyArray<string> }>() {}

const PackedLive = Layer.scoped(
  Packed,
  Effect.acquireRelease(
    Effect.suspend(() => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-pack-"))
      const project = path.join(dir, "project")
      return installPacked(dir, project).pipe(
        Effect.map((files) => ({ dir, project, files })),
        Effect.onError(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
      )
    }),
    ({ dir }) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
)

layer(PackedLive, { timeout: "10 minutes", excludeTestServices: true })("the packed package, installed from npm's cache into a new project", (it) => {
  it.effect("has no tests in the tarball; npx assay, a YAML run, a TS program with a test layer, tsc", () =>
    Effect.gen(function*() {
      const { dir, files, project } = yield* Packed
      // 1. What the tarball holds (dist/ was built by the run's global setup), as the `npm
      // pack` that made it listed it (a second `npm pack --dry-run` would list the same files).
      for (const needed of ["bin/assay", "dist/index.js", "dist/index.d.ts", "dist/cli/launcher.js", "dist/cli/bin.js", "dist/cli/resolveHooks.mjs", "package.json"]) {
        assert.include(files, needed)
      }
      assert.isTrue(files.some((f) => /^dist\/bundle\/assay-[0-9a-f]+\.cjs$/.test(f)), "the fast-start bundle")
      const unwanted = files.filter((f) => /^(test|bench|examples|scripts|\.ci)\/|fixtures|\.test\.|tsbuildinfo|^docs\/api\//.test(f))
      assert.deepStrictEqual(unwanted, [])

      // 2. The CLI.
      const cwd = path.join(dir, "outside")
      fs.mkdirSync(cwd, { recursive: true })
      fs.cpSync(path.join(project, "package.json"), path.join(cwd, "package.json"))
      fs.symlinkSync(path.join(project, "node_modules"), path.join(cwd, "node_modules"))
      const help = yield* exec("npx", ["--no-install", "assay", "--help"], { cwd })
      assert.strictEqual(help.code, 0, help.stderr)
      for (const command of ["validate", "run", "resume", "report", "export"]) assert.include(help.stdout, command)

      // 3. A YAML experiment: run, then report.
      fs.writeFileSync(path.join(cwd, "experiment.yaml"), experiment)
      const run = yield* exec("npx", ["--no-install", "assay", "run", "-c", "experiment.yaml", "--store", "runs.db"], { cwd })
      assert.strictEqual(run.code, 0, run.stderr)
      const report = yield* exec("npx", ["--no-install", "assay", "report", "runs.db"], { cwd })
      assert.strictEqual(report.code, 0, report.stderr)
      assert.include(report.stdout, "succeeded 3")

      // 4. A TypeScript Effect program importing assay and effect, with a test layer.
      fs.writeFileSync(path.join(cwd, "program.ts"), program)
      const ran = yield* exec("npx", ["--no-install", "tsx", "program.ts"], { cwd })
      assert.strictEqual(ran.code, 0, ran.stderr)
      assert.strictEqual((JSON.parse(ran.stdout) as { succeeded: number }).succeeded, 3)

      // 5. tsc accepts the program against the installed .d.ts (and the .d.ts themselves: no
      // skipLibCheck), and refuses a broken chain: one tsc over both files (each run loads and
      // checks every .d.ts of assay and effect again), whose only errors are the broken file's.
      fs.writeFileSync(path.join(cwd, "wrong.ts"), wrong)
      fs.writeFileSync(path.join(cwd, "tsconfig.json"), JSON.stringify({ ...tsconfig, include: ["program.ts", "wrong.ts"] }, null, 2))
      const tsc = path.join(project, "node_modules/typescript/bin/tsc")
      const checked = yield* exec(process.execPath, [tsc, "-p", "tsconfig.json", "--pretty", "false"], { cwd })
      assert.notStrictEqual(checked.code, 0, "the broken chain is refused")
      const errors = (checked.stdout + checked.stderr).split("\n").filter((l) => /error TS\d+/.test(l))
      assert.isAbove(errors.length, 0, checked.stdout + checked.stderr)
      assert.deepStrictEqual(errors.filter((l) => !l.startsWith("wrong.ts(")), [], "program.ts and the .d.ts type-check")
    }), 600_000)

  it.scoped("docs/tutorial.md, every step in order", () =>
    Effect.gen(function*() {
      const { project } = yield* Packed
      const steps = readTutorial(path.join(root, "docs/tutorial.md"))
      const mockPort = yield* freePort()
      const servePort = yield* freePort()
      const local = (text: string) => text.replaceAll("8787", String(mockPort)).replaceAll("8080", String(servePort))
      const env: Record<string, string> = { NO_COLOR: "1" }
      const seen = new Set<string>()
      for (const step of steps) {
        const body = local(step.body)
        const where = `docs/tutorial.md:${step.line}`
        seen.add(`${step.kind} ${step.arg}`.trim())
        switch (step.kind) {
          case "install": {
            // done in beforeAll from the packed tarball (the block is what a user types)
            assert.include(body, "npm install assay effect", where)
            break
          }
          case "env": {
            for (const m of body.matchAll(/^export (\w+)=(.*)$/gm)) env[m[1]!] = m[2]!
            break
          }
          case "file": {
            fs.mkdirSync(path.dirname(path.join(project, step.arg)), { recursive: true })
            fs.writeFileSync(path.join(project, step.arg), body)
            break
          }
          case "background": {
            const proc = yield* background(body.trim(), project, env)
            if (step.arg === "mock-llm") {
              yield* untilOk(httpGet(`http://127.0.0.1:${mockPort}/_mock/health`))
            } else {
              const page = yield* untilOk(httpGet(`http://127.0.0.1:${servePort}/`))
              assert.strictEqual(page.status, 200, where)
              const stats = yield* httpGet(`http://127.0.0.1:${servePort}/stats`)
              assert.strictEqual(stats.status, 200, where)
              assert.include(stats.text, "succeeded", where)
              killGroup(proc.child, "SIGINT")
              const code = yield* Effect.promise(() => proc.exited)
              assert.include([0, 130], code, `${where}: serve stopped by Ctrl-C: ${proc.output()}`)
            }
            break
          }
          case "interrupt": {
            const store = path.join(project, "runs/tutorial.db")
            const proc = yield* background(body.trim(), project, env)
            // Ctrl-C once a few pipelines have finished (the mock answers in about 300 ms)
            let exitedEarly: number | null | undefined
            proc.exited.then((code) => (exitedEarly = code))
            yield* untilOk(Effect.suspend(() =>
              exitedEarly !== undefined
                ? Effect.die(`${where}: the run ended (${exitedEarly}) before Ctrl-C: ${proc.output()}`)
                : succeededIn(store) >= 4 ? Effect.void : Effect.fail("fewer than 4 pipelines done")
            ))
            killGroup(proc.child, "SIGINT")
            const code = yield* Effect.promise(() => proc.exited)
            assert.strictEqual(code, 130, `${where}: ${proc.output()}`)
            const done = succeededIn(store)
            assert.isTrue(done >= 4 && done < 24, `${where}: ${done} succeeded before Ctrl-C`)
            break
          }
          case "run": {
            for (const command of body.split("\n").filter((l) => l.trim() !== "")) {
              const r = yield* exec("bash", ["-c", command], { cwd: project, env })
              assert.strictEqual(r.code, 0, `${where}: ${command}\n${r.stdout}\n${r.stderr}`)
              if (/assay validate/.test(command)) assert.include(r.stdout, "valid")
              if (/assay report \S+$/.test(command) && seen.has("interrupt") && !seen.has("run resume")) {
                assert.include(r.stdout, "interrupted", `${where}: the report after Ctrl-C`)
              }
              if (/assay resume/.test(command)) {
                seen.add("run resume")
                assert.include(r.stdout, "skipped", `${where}: ${r.stdout}`)
                assert.strictEqual(succeededIn(path.join(project, "runs/tutorial.db")), 24)
              }
              if (/assay export/.test(command)) {
                const csv = fs.readFileSync(path.join(project, "results.csv"), "utf8").trim().split("\n")
                assert.strictEqual(csv.length, 25, `${where}: header + 24 rows`)
              }
              if (/assay report .*--json/.test(command)) JSON.parse(r.stdout)
              if (/tsx program\.ts/.test(command)) assert.include(r.stdout, "succeeded 24", r.stdout)
              if (/tsx program\.check\.ts/.test(command)) assert.include(r.stdout, "ok:", r.stdout)
            }
            break
          }
        }
      }
      for (const kind of ["install", "background mock-llm", "env", "interrupt", "run", "background serve"]) {
        assert.isTrue(seen.has(kind), `the tutorial has a "${kind}" step`)
      }
      // The tutorial's TypeScript type-checks against the installed package too.
      fs.writeFileSync(
        path.join(project, "tsconfig.json"),
        JSON.stringify({ ...tsconfig, include: ["grade.ts", "program.ts", "program.check.ts"] }, null, 2)
      )
      const tsc = path.join(project, "node_modules/typescript/bin/tsc")
      const typed = yield* exec(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project })
      assert.strictEqual(typed.code, 0, typed.stdout + typed.stderr)
    }), 600_000)
})
