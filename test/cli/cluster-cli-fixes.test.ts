/**
 * Fixes of a fresh user's findings on the cluster CLI (tester17af):
 *
 * - `study run|resume|confirm --max-admitted 0` (or negative) is refused as `run --engine
 *   cluster` refuses it (exit 2, `--max-admitted must be an integer >= 1 (got 0)`).
 * - the commands printed to be pasted after a stop (`continue with: assay study resume …`) or
 *   while no runner is up (`assay runner -c FILE --database URL`) give the URL without its
 *   password (a masked `user:***@` would log in with `***`), plus a note saying the password is
 *   to be given again, only when the URL had one; so does the `assay migrate --database URL`
 *   named when the database is not migrated.
 * - a refused login (SQLSTATE 28000 here: a role the server does not know) on the cluster's
 *   paths (runner start, study run / resume, study status) is explained as `assay migrate`
 *   explains it (`refused the login of user …`, what to check); every command that connects
 *   (runner, submitters, study status, migrate, report) exits 2 for it (a configuration error).
 * - a runner whose `--listen` address is in use names it and says so, exit 2 (not `error: Open`,
 *   exit 1, which a supervisor would restart forever).
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as net from "node:net"
import * as path from "node:path"
import { vi } from "vitest"
import * as ClusterRun from "../../src/cli/ClusterRun.js"
import * as StudyRun from "../../src/cli/StudyRun.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as InternalSubmit from "../../src/services/internal/cluster/submit.js"
import { assay, root, start, tempDir, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const study = path.join(root, "examples/studies/study.yaml")

/** Waits (real time, bounded) until `check` holds. */
const until = (check: () => boolean, ms: number) =>
  Effect.promise(async () => {
    const end = Date.now() + ms
    while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 100))
    return check()
  })
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

  it("runners that refused a new protocol version's pipelines: restart them, said once, then the command that continues (F7)", () => {
    const refused = InternalSubmit.refusedError(20, ["pipeline ab3f-1 is not among the pipelines this runner serves (its file, as it read it when it started)"])
    const e = StudyRun.refusedByRunners(refused, 2, args)
    assert.strictEqual(e._tag, "ConfigError")
    assert.include(e.message, "20 pipeline(s) were refused by the runners: pipeline ab3f-1 is not among the pipelines this runner serves")
    assert.include(e.message, `restart every runner (assay runner -c study.yaml --database ${bare}) so that it serves protocol version 2`)
    assert.include(e.message, `continue with: assay study resume study.yaml --engine cluster --database ${bare}`)
    // the advice once: no second "start the runners with the submitter's file"
    assert.strictEqual(e.message.split("assay runner -c").length, 2, e.message)
    assert.notInclude(e.message, "submitter's")
    assert.notInclude(e.message, secret)
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

describe("the submitter's progress line", () => {
  it.effect("is printed when it changed, not after every poll", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const spy = vi.spyOn(console, "error").mockImplementation((...xs: Array<unknown>) => {
        lines.push(xs.join(" "))
      })
      const progress = { runId: "r1", admitted: 4, skipped: 0, succeeded: 0, failed: 0, interrupted: 0, refused: 0, running: 4, withheld: 0, followed: { running: 0, succeeded: 0, failed: 0, interrupted: 0, runIds: [] } }
      try {
        const { onProgress } = ClusterRun.followProgress({ quiet: false, config: "suite.yaml" }, url)
        for (
          const p of [
            progress,
            progress,
            progress,
            { ...progress, running: 3, succeeded: 1 },
            { ...progress, running: 3, succeeded: 1 },
            // a cancel's interrupted pipelines are counted once there are some
            { ...progress, running: 0, succeeded: 1, interrupted: 3 }
          ]
        ) {
          yield* onProgress!(p as never)
        }
      } finally {
        spy.mockRestore()
      }
      assert.deepStrictEqual(lines, [
        "cluster run r1: 4 admitted, 4 running, 0 succeeded, 0 failed, 0 already done",
        "cluster run r1: 4 admitted, 3 running, 1 succeeded, 0 failed, 0 already done",
        "cluster run r1: 4 admitted, 0 running, 1 succeeded, 0 failed, 3 interrupted, 0 already done"
      ])
    }))
})

describe("pipelines the runners refused (F7): counted interrupted, as their rows are left (fix17ai)", () => {
  const refused = { runId: "r2" as RunId, admitted: 3, skipped: 1, succeeded: 0, failed: 0, interrupted: 3, refused: 3, running: 0, withheld: 5, followed: { running: 0, succeeded: 0, failed: 0, interrupted: 0, runIds: [] } }
  it.effect("the progress line says them interrupted and refused, not failed", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const spy = vi.spyOn(console, "error").mockImplementation((...xs: Array<unknown>) => {
        lines.push(xs.join(" "))
      })
      try {
        yield* ClusterRun.followProgress({ quiet: false, config: "x.yaml" }, url).onProgress!(refused as never)
      } finally {
        spy.mockRestore()
      }
      assert.deepStrictEqual(lines, ["cluster run r2: 3 admitted, 0 running, 0 succeeded, 0 failed, 3 interrupted (3 refused by the runners), 1 already done"])
    }))
  it.effect("pipelines of an earlier run a re-submission follows are said apart, with their run (newuser37)", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const spy = vi.spyOn(console, "error").mockImplementation((...xs: Array<unknown>) => {
        lines.push(xs.join(" "))
      })
      const followed = { ...refused, admitted: 0, interrupted: 0, refused: 0, withheld: 0, followed: { running: 2, succeeded: 880, failed: 2, interrupted: 0, runIds: ["r1" as RunId] } }
      try {
        yield* ClusterRun.followProgress({ quiet: false, config: "x.yaml" }, url).onProgress!(followed)
      } finally {
        spy.mockRestore()
      }
      assert.deepStrictEqual(lines, ["cluster run r2: 0 admitted, 0 running, 0 succeeded, 0 failed, 1 already done; followed 884 of run r1: 880 succeeded, 2 failed, 2 still running"])
      const json = ClusterRun.clusterJson({ ...followed, status: "completed", stopReason: null, durationMs: 5, causes: [] }, url)
      assert.deepInclude(json["cluster"] as object, { admitted: 0, running: 0 })
      expect((json["cluster"] as { followed: unknown }).followed).toStrictEqual(followed.followed)
    }))
  it("the text summary says the pipelines read and not admitted (withheld), with why (break38 F3)", () => {
    const done = { ...refused, admitted: 48, interrupted: 0, refused: 0, succeeded: 44, failed: 4, skipped: 0, withheld: 12, status: "completed" as const, stopReason: null, durationMs: 7, causes: [] }
    assert.strictEqual(
      ClusterRun.summaryLine(done),
      "cluster run r2: 44 succeeded, 4 failed, 0 already done, 12 not admitted (a stop came first, or another submission admitted them) (7 ms)"
    )
    // none withheld: nothing said of them
    assert.strictEqual(ClusterRun.summaryLine({ ...done, withheld: 0 }), "cluster run r2: 44 succeeded, 4 failed, 0 already done (7 ms)")
  })
  it("the --summary json object counts them interrupted in stats.pipelines, refused under cluster", () => {
    const json = ClusterRun.clusterJson({ ...refused, status: "interrupted", stopReason: "submit_failed", durationMs: 5, causes: [] }, url)
    assert.deepStrictEqual(json["stats"], { pipelines: { total: 3, byState: { succeeded: 0, failed: 0, interrupted: 3 } } })
    assert.deepInclude(json["cluster"] as object, { admitted: 3, refused: 3, withheld: 5 })
  })
})

describe("a refused login on the cluster's paths", () => {
  it.live("runner, study run, resume, status, migrate and report explain it and exit 2", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = `postgres://nobody_here:s3cretPw@127.0.0.1:${pg.port}/postgres`
      // study status reads the cluster's database only for a study that has a state: run it
      // embedded first (status --database then reads the pipelines from the database)
      const out = path.join(yield* tempDir("refused-login"), "root")
      const ran = yield* assay(["study", "run", study, "--output-root", out, "--quiet"])
      assert.strictEqual(ran.code, 0, ran.stderr)
      const commands: ReadonlyArray<readonly [ReadonlyArray<string>, number]> = [
        [["runner", "-c", study, "--database", url], 2],
        [["study", "run", study, "--engine", "cluster", "--database", url], 2],
        [["study", "resume", study, "--engine", "cluster", "--database", url], 2],
        [["study", "status", study, "--output-root", out, "--database", url], 2],
        // one rule for every command that connects: a refused login is a configuration mistake
        [["migrate", "--database", url], 2],
        [["report", url], 2]
      ]
      // side by side: each is a process of its own (one after the other, their starts under load
      // took more than the test's time once)
      const results = yield* Effect.forEach(commands, ([argv]) => assay(argv), { concurrency: "unbounded" })
      for (const [i, [argv, code]] of commands.entries()) {
        const r = results[i]!
        const out = r.stdout + r.stderr
        assert.strictEqual(r.code, code, `${argv.slice(0, 2).join(" ")}: ${out}`)
        assert.include(out, `refused the login of user "nobody_here"`, argv.slice(0, 2).join(" "))
        assert.include(out, "PGPASSWORD")
        assert.notInclude(out, "Failed to connect")
        assert.notInclude(out, "s3cretPw")
        // nothing said to be served before the refusal (F11)
        assert.notInclude(out, "serving the trials")
      }
    })), 180_000)
})

describe("a runner whose --listen address is in use", () => {
  it.live("names the address, says it is in use, exit 2", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("listen"))
      const url = pg.url("listen")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const server = net.createServer()
      const port = yield* Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as net.AddressInfo).port)))
      })
      const r = yield* assay(["runner", "-c", study, "--database", url, "--listen", `127.0.0.1:${port}`]).pipe(
        Effect.ensuring(Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
        }))
      )
      const out = r.stdout + r.stderr
      assert.strictEqual(r.code, 2, out)
      assert.include(out, `cannot listen on 127.0.0.1:${port}: the address is already in use`)
      assert.notInclude(out, "error: Open")
      // what it serves and where it listens are said once it does, not before a refusal (F11)
      assert.notInclude(out, "listening on")
      assert.notInclude(out, "serving the trials")
    }), 180_000)
})

describe("an unmigrated cluster database", () => {
  it.live("the `assay migrate` command to paste has the URL without the password, and the note", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("unmigrated"))
      // the harness's server trusts loopback logins: the password is accepted and ignored
      const url = `postgres://${pg.user}:s3cretPw@127.0.0.1:${pg.port}/unmigrated`
      const r = yield* assay(["runner", "-c", study, "--database", url])
      const out = r.stdout + r.stderr
      assert.strictEqual(r.code, 2, out)
      assert.include(out, `run \`assay migrate --database postgres://${pg.user}@127.0.0.1:${pg.port}/unmigrated\` once`)
      assert.include(out, "PGPASSWORD")
      assert.notInclude(out, "s3cretPw")
    }), 120_000)
})

describe("a suite submitter stopped by Ctrl-C", () => {
  it.scopedLive("reports the specs read and not admitted as withheld; the members' figures add up to the run's", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-sigint")
      const exp = { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 6 } } }
      write(dir, "a.json", exp)
      write(dir, "b.json", exp)
      const suite = write(dir, "suite.json", {
        suite: { id: "held" },
        output: { root: "out" },
        experiments: { a: { config: "a.json" }, b: { config: "b.json" } }
      })
      yield* Effect.promise(() => pg.createDatabase("sigint"))
      const url = pg.url("sigint")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      // no runner: the submitter admits 2 and waits for room, with the other specs read
      const sub = start(["run", "-c", suite, "--engine", "cluster", "--database", url, "--max-admitted", "2", "--summary", "json"])
      const admitted = yield* until(() => sub.stderr().includes("2 admitted"), 60_000)
      assert.isTrue(admitted, sub.stderr())
      sub.child.kill("SIGINT")
      const r = yield* Effect.promise(() => sub.done)
      assert.strictEqual(r.code, 130, r.stderr)
      const json = JSON.parse(r.stdout) as {
        cluster: { admitted: number; withheld: number }
        skipped: number
        members: ReadonlyArray<{ experimentId: string; submitted: number; admitted: number; skipped: number; withheld: number }>
      }
      const sum = (f: (m: (typeof json.members)[number]) => number) => json.members.reduce((n, m) => n + f(m), 0)
      assert.strictEqual(json.cluster.admitted, 2)
      assert.strictEqual(sum((m) => m.admitted), json.cluster.admitted, r.stdout)
      assert.strictEqual(sum((m) => m.withheld), json.cluster.withheld, r.stdout)
      assert.isAbove(json.cluster.withheld, 0, r.stdout)
      for (const m of json.members) assert.strictEqual(m.submitted, m.admitted + m.skipped + m.withheld, JSON.stringify(m))
      // every spec read is accounted for: 12 in all, none read twice
      assert.strictEqual(sum((m) => m.submitted), json.cluster.admitted + json.cluster.withheld + json.skipped, r.stdout)
    }), 120_000)
})

describe("a study runner's start line", () => {
  it.scopedLive("counts the declared trials of one version and the confirmation trials once, said when it is up", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("serving"))
      const url = pg.url("serving")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      // the study at protocol version 3 on the cluster, with one confirmation trial recorded
      pg.psql("serving", `INSERT INTO assay_meta (key, value) VALUES ('study/multiples/version', '3'),
        ('study/multiples/trials', '[{"variantId":"v01","repeat":3}]')`)
      const port = yield* Effect.promise(freePort)
      const runner = start(["runner", "-c", study, "--database", url, "--listen", `127.0.0.1:${port}`])
      yield* Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL")))
      const up = yield* until(() => runner.stderr().includes("listening on"), 90_000)
      assert.isTrue(up, runner.stderr())
      runner.child.kill("SIGTERM")
      const r = yield* Effect.promise(() => runner.done)
      // 6 variants × 2 repeats declared in each version; the confirmation trial counted once
      assert.include(
        r.stderr,
        "runner: study multiples: serving the trials of protocol versions 1-3 (12 declared trials per version, and the 1 confirmation trial recorded by study confirm)"
      )
      assert.isBelow(r.stderr.indexOf("serving the trials"), r.stderr.indexOf("listening on"))
    }), 180_000)
})

describe("assay report ROOT on a study root the cluster engine ran", () => {
  it.scopedLive("names the Postgres store that holds the trials' pipelines, with the commands to type (not an empty suite view)", () =>
    Effect.gen(function*() {
      const out = path.join(yield* tempDir("report-cluster-root"), "root")
      const ran = yield* assay(["study", "run", study, "--output-root", out, "--quiet"])
      assert.strictEqual(ran.code, 0, ran.stderr)
      // what `study run --engine cluster` records in the root (the URL as it was given, masked)
      write(out, "cluster.json", { engine: "cluster", database: "postgres://pwuser:***@127.0.0.1:5432/pw" })
      const r = yield* assay(["report", out])
      assert.strictEqual(r.code, 0, r.stderr)
      const bare = "postgres://pwuser@127.0.0.1:5432/pw"
      assert.include(r.stdout, `--output-root ${out} --database ${bare}`)
      assert.include(r.stdout, `they are in the Postgres store, not in this root: assay report ${bare}`)
      assert.include(r.stdout, "PGPASSWORD")
      assert.notInclude(r.stdout, "***")
      assert.notInclude(r.stdout, "no runs")
      assert.notInclude(r.stdout, "Pipelines: ")
      const json = yield* assay(["report", out, "--json"])
      assert.strictEqual(json.code, 0, json.stderr)
      const data = JSON.parse(json.stdout) as { study: { database: string; command: string }; pipelines?: unknown }
      assert.strictEqual(data.study.database, bare)
      assert.isUndefined(data.pipelines)
    }), 180_000)
})

describe("a -c file that does not exist (newuser37 F11)", () => {
  it.scopedLive("is refused as `run` refuses it: `error: … no such file`, exit 2, not a bare `Path … must exist`", () =>
    Effect.gen(function*() {
      const missing = path.join(yield* tempDir("missing-config"), "nope.yaml")
      for (
        const args of [
          ["runner", "-c", missing, "--database", "postgres://u@127.0.0.1:1/x"],
          ["plugins", "-c", missing],
          ["run", "-c", missing]
        ]
      ) {
        const r = yield* assay(args)
        assert.strictEqual(r.code, 2, `${args[0]}: ${r.stderr}`)
        assert.include(r.stderr, `error: invalid experiment ${missing}`, `${args[0]}: ${r.stderr}`)
        assert.include(r.stderr, `no such file: ${missing}`, `${args[0]}: ${r.stderr}`)
        assert.notInclude(r.stderr, "must exist", `${args[0]}: ${r.stderr}`)
      }
    }), 60_000)
})
