/**
 * `assay run|resume|validate -c SUITE` as a user runs it: spawned `bin/assay` processes on a
 * suite of members in a temp dir: run (members' pools shared or private, ctx fields, a line per
 * member), selective run and resume (`--experiment`), `--output-root`, refused flags, exit codes
 * (0 / 1 for a failed task or a member's failed source / 2 for invalid input and changed
 * definitions).
 *
 * Each spawn costs ~1.5 s of start-up: the tests share spawns where they can.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

import { assay, query, root, start, waitFor, write } from "../support/cli.js"

/** `<member> <localKey> <seq> <actual pool>` per task execution. */
const logLines = (log: string) => fs.existsSync(log) ? fs.readFileSync(log, "utf8").trim().split("\n").filter((l) => l !== "") : []

/**
 * A suite dir: members a (pool apis bound to the shared pool) and b (its own apis, private),
 * each a range of `n` rows through a task that leases from `apis` and logs what it ran;
 * member c (optional) fails its task on row 1.
 */
const suiteDir = (
  options: {
    readonly n?: number
    readonly layout?: string
    readonly withFailing?: boolean
    readonly withBadSource?: boolean
    readonly ms?: number
  } = {}
) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-suite-cli-"))
  const log = path.join(dir, "exec.log")
  write(dir, "lib/package.json", { type: "module" })
  write(dir, "lib/tasks.ts", [
    `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
    `import * as fs from "node:fs"`,
    `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
    `import { FatalError } from ${JSON.stringify(path.join(root, "src/domain/Errors.ts"))}`,
    `export const logged = (log: string, failOn: number = -1, ms: number = 0) =>`,
    `  Task.make("work", { parameters: { failOn } }, (n: number, ctx) => Effect.scoped(Effect.gen(function*() {`,
    `    const lease = yield* ctx.acquire()`,
    `    if (ms > 0) yield* Effect.sleep(ms)`,
    `    if (n === failOn) return yield* Effect.fail(new FatalError({ message: "row " + n + " is bad" }))`,
    `    fs.appendFileSync(log, [ctx.experimentId, ctx.localKey, ctx.seq, lease.pool, ctx.outputDir].join(" ") + "\\n")`,
    `    return n * 2`,
    `  })))`
  ].join("\n"))
  const n = options.n ?? 4
  const memberFile = (failOn?: number) => ({
    run: { concurrency: 1, store: "ignored.db" },
    pools: { apis: { resources: [{ id: "k", capacity: 2 }] } },
    pipeline: {
      name: "m",
      tasks: [{ use: "../lib/tasks.ts#logged", args: [log, failOn ?? -1, options.ms ?? 0], resource: "apis" }]
    },
    source: { range: { n } }
  })
  write(dir, "members/a.json", memberFile())
  write(dir, "members/b.json", memberFile())
  write(dir, "members/c.json", memberFile(1))
  const experiments: Record<string, unknown> = {
    a: { config: "members/a.json", poolBindings: { apis: "shared" }, label: "A" },
    b: { config: "members/b.json" }
  }
  if (options.withFailing === true) experiments["c"] = { config: "members/c.json", poolBindings: { apis: "shared" } }
  if (options.withBadSource === true) {
    // a source that breaks at run time: its third row is not JSON
    write(dir, "members/rows.jsonl", "1\n2\n{not json\n4\n")
    write(dir, "members/d.json", { ...memberFile(), source: { jsonl: { path: path.join(dir, "members/rows.jsonl") } } })
    experiments["d"] = { config: "members/d.json" }
  }
  const suite = write(dir, "suite.json", {
    suite: { id: "cmp" },
    run: { concurrency: 4 },
    output: { root: "out/cmp", layout: options.layout ?? "byExperiment" },
    pools: { shared: { resources: [{ id: "s", capacity: 2 }] } },
    experiments
  })
  return { dir, log, suite, out: path.join(dir, "out/cmp") }
}

describe("assay run -c SUITE", () => {
  it.live("runs every member (shared and private pools, ctx fields, a line per member), then resume skips everything", () =>
    Effect.gen(function*() {
      const s = suiteDir()
      const r = yield* assay(["run", "-c", s.suite])
      assert.strictEqual(r.code, 0, r.stderr)
      assert.include(r.stdout, "suite cmp:")
      assert.match(r.stdout, /a \(A\): submitted 4 .*succeeded 4.*source exhausted/)
      assert.match(r.stdout, /b: submitted 4 .*succeeded 4.*source exhausted/)
      assert.isTrue(fs.existsSync(path.join(s.out, "manifest.json")))
      const lines = logLines(s.log).map((l) => l.split(" "))
      assert.strictEqual(lines.length, 8)
      for (const [member, , seq, pool, outputDir] of lines) {
        assert.strictEqual(seq, "0")
        assert.strictEqual(pool, member === "a" ? "shared" : "experiment:b:apis")
        assert.strictEqual(outputDir, path.join(s.out, "experiments", member!))
      }
      const b = query(path.join(s.out, "experiments/b/state.db"), "SELECT experiment_id, local_key, repeat FROM pipelines")
      assert.strictEqual(b.length, 4)
      for (const row of b) {
        assert.strictEqual(row["experiment_id"], "b")
        assert.strictEqual(row["repeat"], 0)
        assert.isString(row["local_key"])
      }

      const again = yield* assay(["resume", "-c", s.suite, "--summary", "json"])
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(logLines(s.log).length, 8, "nothing ran again")
      const json = JSON.parse(again.stdout.trim().split("\n").pop()!)
      assert.strictEqual(json.suiteId, "cmp")
      // the member line adds up: submitted = succeeded + failed + interrupted + skipped
      assert.deepStrictEqual(json.members.map((m: any) => [m.experimentId, m.admitted, m.skipped]), [["a", 4, 4], ["b", 4, 4]])
      const text = yield* assay(["resume", "-c", s.suite])
      assert.match(text.stdout, /a \(A\): submitted 4 · succeeded 0 · failed 0 · interrupted 0 · skipped 4 · source exhausted/)
      assert.deepStrictEqual(json.members.map((m: any) => [m.experimentId, m.selected, m.sourceExhausted]), [
        ["a", true, true],
        ["b", true, true]
      ])
    }), 120_000)

  it.live("--experiment runs only that member, leaving the other's database unopened; resume --experiment runs the rest", () =>
    Effect.gen(function*() {
      const s = suiteDir()
      // the id resolves ignoring case to the canonical member id
      const first = yield* assay(["run", "-c", s.suite, "--experiment", "A"])
      assert.strictEqual(first.code, 0, first.stderr)
      assert.isFalse(fs.existsSync(path.join(s.out, "experiments/A")) && !fs.existsSync(path.join(s.out, "experiments/a")))
      assert.match(first.stdout, /b: not selected/)
      assert.isFalse(fs.existsSync(path.join(s.out, "experiments/b/state.db")), "b's database is not created")
      assert.deepStrictEqual([...new Set(logLines(s.log).map((l) => l.split(" ")[0]))], ["a"])
      const aDb = path.join(s.out, "experiments/a/state.db")
      const aStat = fs.statSync(aDb).mtimeMs
      const second = yield* assay(["resume", "-c", s.suite, "--experiment", "b"])
      assert.strictEqual(second.code, 0, second.stderr)
      assert.strictEqual(logLines(s.log).filter((l) => l.startsWith("b ")).length, 4)
      assert.strictEqual(logLines(s.log).filter((l) => l.startsWith("a ")).length, 4)
      assert.strictEqual(fs.statSync(aDb).mtimeMs, aStat, "a's database is not written by b's resume")
      const unknown = yield* assay(["run", "-c", s.suite, "--experiment", "zzz"])
      assert.strictEqual(unknown.code, 2)
      assert.include(unknown.stderr, "--experiment")
      assert.include(unknown.stderr, "(members: a, b)")
    }), 120_000)

  it.live("refused flags (--store, --shard, --shards) exit 2 before anything is written; --experiment needs a suite", () =>
    Effect.gen(function*() {
      const s = suiteDir()
      for (const flags of [["--store", "x.db"], ["--shard", "0/2"], ["--shards", "2"]]) {
        const r = yield* assay(["run", "-c", s.suite, ...flags])
        assert.strictEqual(r.code, 2, `${flags[0]}: ${r.stderr}`)
        assert.include(r.stderr, flags[0]!)
        assert.include(r.stderr, "suite")
      }
      assert.isFalse(fs.existsSync(s.out), "nothing was written")
      const plain = yield* assay(["run", "-c", path.join(s.dir, "members/a.json"), "--experiment", "a", "--store", ":memory:"])
      assert.strictEqual(plain.code, 2)
      assert.include(plain.stderr, "--experiment")
      // help: run and validate name suite files; --experiment says "Repeatable." once
      for (const command of ["run", "validate"]) {
        const help = yield* assay([command, "--help"])
        assert.strictEqual(help.code, 0, help.stderr)
        assert.include(help.stdout, "suite file", command)
        if (command === "run") {
          const at = help.stdout.indexOf("--experiment")
          assert.isAtLeast(at, 0)
          const section = help.stdout.slice(at, help.stdout.indexOf("\n  -", at + 1) === -1 ? undefined : help.stdout.indexOf("\n  -", at + 1))
          assert.notInclude(section, "(repeatable)")
          assert.strictEqual(section.split("Repeatable.").length - 1, 1, section)
        }
      }
    }), 120_000)

  it.live("exit 1 when a member's task fails, the others finishing; --output-root is relative to the working directory; validate", () =>
    Effect.gen(function*() {
      const s = suiteDir({ withFailing: true, layout: "combined" })
      const r = yield* assay(["run", "-c", s.suite, "--output-root", "elsewhere"], { cwd: s.dir })
      assert.strictEqual(r.code, 1, r.stderr)
      // the member lines count each member's own pipelines (one database for all)
      assert.match(r.stdout, /a \(A\): submitted 4 · succeeded 4 · failed 0/)
      assert.match(r.stdout, /c: submitted 4 · succeeded 3 · failed 1/)
      const db = path.join(s.dir, "elsewhere/state.db")
      assert.isTrue(fs.existsSync(db))
      assert.isFalse(fs.existsSync(s.out))
      const states = query(db, "SELECT experiment_id, state, count(*) AS n FROM pipelines GROUP BY experiment_id, state ORDER BY 1, 2")
      assert.deepStrictEqual(states, [
        { experiment_id: "a", state: "succeeded", n: 4 },
        { experiment_id: "b", state: "succeeded", n: 4 },
        { experiment_id: "c", state: "failed", n: 1 },
        { experiment_id: "c", state: "succeeded", n: 3 }
      ])
      const v = yield* assay(["validate", "-c", s.suite, "--json"])
      assert.strictEqual(v.code, 0, v.stderr)
      const described = JSON.parse(v.stdout)
      assert.isTrue(described.valid)
      assert.include(v.stdout, "experiment:b:apis")
      // validate takes --output-root like run (relative to the working directory) and shows it
      const vr = yield* assay(["validate", "-c", s.suite, "--json", "--output-root", "elsewhere"], { cwd: s.dir })
      assert.strictEqual(vr.code, 0, vr.stderr)
      assert.include(vr.stdout, path.join(s.dir, "elsewhere"))
      // ... and refuses it for an experiment file, which names its store instead
      const ve = yield* assay(["validate", "-c", path.join(s.dir, "members/a.json"), "--output-root", "x"])
      assert.strictEqual(ve.code, 2)
      assert.include(ve.stderr, "--output-root")
    }), 120_000)

  it.live("exit 1 when a member's source fails at run time, the other members finishing", () =>
    Effect.gen(function*() {
      const s = suiteDir({ withBadSource: true, layout: "combined" })
      const r = yield* assay(["run", "-c", s.suite])
      assert.strictEqual(r.code, 1, r.stderr)
      assert.include(r.stderr, "member d: its source failed")
      // the source error names the file and line
      assert.include(r.stderr, `${path.join(s.dir, "members/rows.jsonl")}:3: `)
      assert.match(r.stdout, /d: submitted 2 .*source failed/)
      const states = query(path.join(s.out, "state.db"), "SELECT experiment_id, count(*) AS n FROM pipelines WHERE state = 'succeeded' GROUP BY 1 ORDER BY 1")
      assert.deepStrictEqual(states, [
        { experiment_id: "a", n: 4 },
        { experiment_id: "b", n: 4 },
        { experiment_id: "d", n: 2 }
      ])
    }), 120_000)

  it.live("SIGINT: exit 130 with the resume command; resume finishes the rest", () =>
    Effect.gen(function*() {
      const s = suiteDir({ n: 30, ms: 40 })
      const p = start(["run", "-c", s.suite])
      yield* Effect.promise(() => waitFor(() => logLines(s.log).length >= 3, "3 tasks run"))
      p.child.kill("SIGINT")
      const code = yield* Effect.promise(() => p.done)
      assert.strictEqual(code.code, 130, code.stderr)
      // every submitted pipeline is in one state: none "lost" between admission and a row
      const lines = [...code.stdout.matchAll(/: submitted (\d+) · succeeded (\d+) · failed (\d+) · interrupted (\d+) · skipped (\d+)(?: · pending (\d+))?/g)]
      assert.strictEqual(lines.length, 3, code.stdout)
      for (const m of lines) {
        const [, submitted, ...rest] = m
        assert.strictEqual(rest.reduce((a, x) => a + Number(x ?? 0), 0), Number(submitted), m[0])
      }
      // the first is the suite's line: its totals are the sums of the members' (pending included)
      assert.match(lines[0]![0], /^: submitted/)
      assert.match(code.stdout, /\nsuite [^:\n]+: submitted \d+/)
      for (let i = 1; i <= 6; i++) {
        assert.strictEqual(Number(lines[0]![i] ?? 0), Number(lines[1]![i] ?? 0) + Number(lines[2]![i] ?? 0), `column ${i}: ${code.stdout}`)
      }
      assert.include(code.stderr, "resume with: assay resume -c")
      assert.isBelow(logLines(s.log).length, 60)
      // the interrupted run's view on this fresh root: nothing skipped, no member source "running"
      const [run] = query(path.join(s.out, "suite.db"), "SELECT run_id FROM runs")
      const view = yield* assay(["report", s.out, "--run-id", String(run!["run_id"]), "--json"])
      assert.strictEqual(view.code, 0, view.stderr)
      const rep = JSON.parse(view.stdout)
      assert.strictEqual(rep.skipped, 0)
      assert.deepStrictEqual(rep.members.map((m: any) => [m.skipped, m.sourceStatus, m.byState.running]), [[0, "interrupted", 0], [0, "interrupted", 0]])
      const resumed = yield* assay(["resume", "-c", s.suite])
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      const done = query(path.join(s.out, "experiments/a/state.db"), "SELECT count(*) AS n FROM pipelines WHERE state = 'succeeded'")
      assert.strictEqual(done[0]!["n"], 30)
    }), 120_000)

  it.live("a changed member definition under a known id, or a reused --run-id, exits 2 and writes nothing", () =>
    Effect.gen(function*() {
      const s = suiteDir({ n: 2 })
      const r = yield* assay(["run", "-c", s.suite, "--run-id", "first"])
      assert.strictEqual(r.code, 0, r.stderr)
      const before = logLines(s.log).length
      const reused = yield* assay(["resume", "-c", s.suite, "--run-id", "first"])
      assert.strictEqual(reused.code, 2, reused.stderr)
      assert.include(reused.stderr, "--run-id")
      // validate compares with the existing root (read-only): both members match
      const same = yield* assay(["validate", "-c", s.suite])
      assert.strictEqual(same.code, 0, same.stderr)
      assert.include(same.stdout, "existing root: 2 member(s) match (a, b), 0 new (none)")
      // the text is a description, not the --json document (tester17ad F14): the shared pool
      // with who binds it, each member with its pool mapping, the run fields the suite
      // overrides (member value → effective) and its tasks, one line each
      const lines = same.stdout.split("\n")
      assert.include(lines, "shared pool shared: algorithm \"wait\", bound by a (as apis)")
      assert.include(lines, "  pools: apis → shared (shared)")
      assert.include(lines, "  pools: apis (its own)")
      assert.include(lines, "  pool apis: algorithm \"wait\"", "b's own pool is described under b")
      assert.strictEqual(lines.filter((l) => l.startsWith("  pool apis")).length, 1, "a's bound pool is the shared one: not listed under a")
      assert.isTrue(lines.some((l) => /^experiment a "A": .*members\/a\.json \(definition [0-9a-f]+\)$/.test(l)), same.stdout)
      assert.isTrue(lines.some((l) => l.startsWith("  run fields ignored (the suite's apply): ") && l.includes("store (\"ignored.db\" → \"output.root (") && l.includes("concurrency (1 → 4)")), same.stdout)
      assert.strictEqual(lines.filter((l) => l === "    task work: resource apis, algorithm -, timeout -, maxAttempts 1").length, 2)
      assert.notInclude(same.stdout, "retryClassified", "no JSON dump of every default")
      // the member's pool resource and source change (b), and a's source: their definition digests change
      const file = path.join(s.dir, "members/b.json")
      const member = JSON.parse(fs.readFileSync(file, "utf8"))
      member.pools.apis.resources[0].id = "k2"
      member.source.range.n = 3
      fs.writeFileSync(file, JSON.stringify(member))
      const aFile = path.join(s.dir, "members/a.json")
      const a = JSON.parse(fs.readFileSync(aFile, "utf8"))
      a.source.range.n = 5
      fs.writeFileSync(aFile, JSON.stringify(a))
      const dbFiles = () => fs.readdirSync(s.out, { recursive: true }).map(String).sort().map((f) => [f, fs.statSync(path.join(s.out, f)).mtimeMs])
      const filesBefore = dbFiles()
      for (const command of ["validate", "run"]) {
        const changed = yield* assay([command, "-c", s.suite])
        assert.strictEqual(changed.code, 2, changed.stderr)
        // one problem per line, each naming the parts that changed
        const lines = changed.stderr.split("\n")
        const aLine = lines.find((l) => l.includes("experiments.a:"))
        const bLine = lines.find((l) => l.includes("experiments.b:"))
        assert.isDefined(aLine, changed.stderr)
        assert.isDefined(bLine, changed.stderr)
        assert.match(aLine!, /changed: its source \(field range\.n: [0-9a-f]{12} -> [0-9a-f]{12}\)\. /)
        assert.notInclude(aLine!, "pool \"apis\"")
        assert.match(bLine!, /changed: its source \(field range\.n: [0-9a-f]{12} -> [0-9a-f]{12}\); its pool "apis" \(declaration, field resources\[0\]\.id: /)
        assert.notInclude(changed.stderr, "; experiments.")
        if (command === "validate") assert.deepStrictEqual(dbFiles(), filesBefore, "validate reads the root only")
      }
      assert.strictEqual(logLines(s.log).length, before)
    }), 120_000)
})
