/**
 * Issue 17 §3: the cluster engine's flags on the command line are checked before anything
 * connects: `--engine cluster` needs `--database`, `--database` needs `--engine cluster`,
 * flags of the embedded engine are refused with it, a malformed URL or `--listen` names its
 * flag, a password in a URL is never printed, a store only one process can write (an SQLite
 * file) is refused, and the runner's pool lease timing (`--lease-ttl`, `--renew-every`) must
 * be positive durations with the renewal shorter than the TTL. All exit 2.
 */
import { assert, describe, it, expect } from "@effect/vitest"
import { Duration, Effect, Either, Option } from "effect"
import * as path from "node:path"
import { blockLeasesOf, leaseTiming } from "../../src/cli/ClusterCommand.js"
import { checkMigrated } from "../../src/cli/ClusterRun.js"
import { assay, tempDir, write } from "../support/cli.js"

const experiment = (dir: string, store?: string) =>
  write(dir, "exp.json", {
    pipeline: { name: "p", tasks: [{ use: "echo" }] },
    source: { range: { n: 2 } },
    ...(store === undefined ? {} : { run: { store } })
  })

describe("cluster engine flags", () => {
  it.scopedLive("--engine cluster without --database exits 2 naming --database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const r = yield* assay(["run", "-c", experiment(dir), "--engine", "cluster"])
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "--database")
    }))

  it.scopedLive("--database without --engine cluster, and embedded-only flags with it, exit 2 naming the flag", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir)
      const url = "postgres://u@127.0.0.1:1/db"
      const lone = yield* assay(["run", "-c", file, "--database", url])
      assert.strictEqual(lone.code, 2, lone.stderr)
      assert.include(lone.stderr, "--engine cluster")
      for (const flag of [["--shards", "2"], ["--fresh-restart"], ["--journal", "summary"], ["--stop-after", "0 seconds"]]) {
        const r = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url, ...flag])
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, flag[0]!)
      }
      // the attempts run on the runners: the submitter's --concurrency reaches none of them
      const conc = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url, "--concurrency", "4"])
      assert.strictEqual(conc.code, 2, conc.stderr)
      assert.include(conc.stderr, "run.concurrency in the file, or give --concurrency to assay runner")
      // a run setting the cluster engine does not carry out is refused too, never ignored
      const journal = write(dir, "journal.json", {
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 2 } },
        run: { journal: "summary" }
      })
      const r = yield* assay(["run", "-c", journal, "--engine", "cluster", "--database", url])
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "run.journal")
      assert.include(r.stderr, "not supported on the cluster engine yet")
      // carried out: --stop-after and run.stopAfter (the submitter), run.concurrency (the
      // runners): accepted, the submitter goes on to the database (unreachable here)
      const carried = write(dir, "carried.json", {
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 2 } },
        run: { concurrency: 4, stopAfter: "1 minute" }
      })
      const accepted = yield* assay(["run", "-c", carried, "--engine", "cluster", "--database", url, "--stop-after", "1 minute"])
      assert.notStrictEqual(accepted.code, 0, accepted.stderr)
      assert.notInclude(accepted.stderr, "not supported")
      assert.include(accepted.stderr, "127.0.0.1:1")
    }), 180_000)

  it.scopedLive("the call cache flags are refused with --engine cluster: exit 2 naming the flag and run.cache", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir)
      const url = "postgres://u@127.0.0.1:1/db"
      for (const flag of [["--cache"], ["--cache-mode", "readOnly"], ["--cache-db", path.join(dir, "c.db")], ["--cache-ttl", "1 day"]]) {
        const r = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url, ...flag])
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, flag[0]!)
        assert.include(r.stderr, "set run.cache")
      }
    }))

  it.scopedLive("a malformed --database or --listen exits 2; a password is never printed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir)
      const bad = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", "mysql://me:s3cret@h/db"])
      assert.strictEqual(bad.code, 2, bad.stderr)
      assert.include(bad.stderr, "--database")
      assert.notInclude(bad.stderr + bad.stdout, "s3cret")
      const listen = yield* assay(["runner", "-c", file, "--database", "postgres://me:s3cret@127.0.0.1:1/db", "--listen", "nohost"])
      assert.strictEqual(listen.code, 2, listen.stderr)
      assert.include(listen.stderr, "--listen")
      assert.notInclude(listen.stderr + listen.stdout, "s3cret")
      // a well-formed URL whose server cannot be reached: the error quotes the URL, masked
      const down = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", "postgres://me:s3cret@127.0.0.1:1/db"])
      assert.strictEqual(down.code, 1, down.stderr)
      assert.include(down.stderr, "postgres://me:***@127.0.0.1:1/db")
      assert.notInclude(down.stderr + down.stdout, "s3cret")
    }))

  it.effect("the cluster tables' check of an unreachable database names the URL without its password", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(checkMigrated("postgres://me:s3cret@127.0.0.1:1/db"))
      assert.strictEqual(e._tag, "StoreUnavailable")
      assert.include(e.message, "postgres://me:***@127.0.0.1:1/db")
      assert.notInclude(e.message, "s3cret")
    }))

  it.scopedLive("a refused flag or store gives the reason that holds for it (tester17ad F9)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir)
      const suite = write(dir, "suite.json", { suite: { id: "s" }, output: { root: "out" }, experiments: { a: { config: "exp.json" } } })
      const url = "postgres://me:pw@127.0.0.1:1/db"
      // --experiment applies to a suite: refused here because the file is an experiment's
      const exp = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url, "--experiment", "a"])
      assert.strictEqual(exp.code, 2, exp.stderr)
      assert.include(exp.stderr, `--experiment does not apply with --engine cluster (it selects a suite's members, and ${file} is an experiment file)`)
      // a suite's storage on the cluster is the database
      const root = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--output-root", path.join(dir, "o")])
      assert.strictEqual(root.code, 2, root.stderr)
      assert.include(root.stderr, "use another database")
      assert.notInclude(root.stderr, "resumes what is unfinished")
      // a suite is never offered a plugin store (it is refused for a suite)
      const sqlite = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--store", path.join(dir, "s.db")])
      assert.strictEqual(sqlite.code, 2, sqlite.stderr)
      assert.include(sqlite.stderr, "store every process writes")
      assert.notInclude(sqlite.stderr, "plugin store")
      // a flag out of range carries the prefix of every refusal
      const zero = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--stop-after-failures", "0"])
      assert.strictEqual(zero.code, 2, zero.stderr)
      assert.include(zero.stderr, "error: --stop-after-failures must be an integer >= 1 (got 0)")
    }))

  it.scopedLive("an SQLite store is refused: every process must write the same store", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir, path.join(dir, "s.db"))
      for (const args of [
        ["run", "-c", file, "--engine", "cluster", "--database", "postgres://me:pw@127.0.0.1:1/db", "--store", path.join(dir, "s.db")],
        ["runner", "-c", file, "--database", "postgres://me:pw@127.0.0.1:1/db", "--store", path.join(dir, "s.db")]
      ]) {
        const r = yield* assay(args)
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, "store every process writes")
        assert.notInclude(r.stderr + r.stdout, ":pw@")
      }
    }))

  it.scopedLive("--lease-ttl and --renew-every: a bad duration, zero, or a renewal not shorter than the TTL exit 2 naming the flag", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir)
      // the database is never reached: the flags are checked first
      const url = "postgres://me:s3cret@127.0.0.1:1/db"
      for (
        const [flags, named, says] of [
          [["--lease-ttl", "soon"], "--lease-ttl", "is not a duration"],
          // (2s, the form the messages print, is read since tester17ad F11: a unit it does not know is not)
          [["--lease-ttl", "2x"], "--lease-ttl", "is not a duration"],
          [["--lease-ttl", "0 seconds"], "--lease-ttl", "must be longer than 0"],
          [["--renew-every", "0 millis"], "--renew-every", "must be longer than 0"],
          [["--lease-ttl", "3 seconds", "--renew-every", "3 seconds"], "--renew-every", "not shorter than the lease TTL (3s, --lease-ttl)"],
          [["--renew-every", "45 seconds"], "--renew-every", "not shorter than the lease TTL (30s, the default)"]
        ] as const
      ) {
        const r = yield* assay(["runner", "-c", file, "--database", url, ...flags])
        assert.strictEqual(r.code, 2, `${flags.join(" ")}: ${r.stderr}`)
        assert.include(r.stderr, named)
        assert.include(r.stderr, says)
        assert.notInclude(r.stderr + r.stdout, "s3cret")
      }
      // six runner processes one after the other, each on the unbundled runtime (start17am: a
      // cluster command starts there at once, ~2.2 s of CPU): room for a loaded machine
    }), 180_000)
})

describe("leaseTiming", () => {
  const ms = (e: ReturnType<typeof leaseTiming>) =>
    Either.map(e, (t) => [Duration.toMillis(t.leaseTtl), Duration.toMillis(t.renewEvery)] as const)

  it("defaults to 30 s renewed every 10 s; the renewal defaults to a third of a given TTL", () => {
    expect(ms(leaseTiming(Option.none(), Option.none()))).toStrictEqual(Either.right([30_000, 10_000] as const))
    expect(ms(leaseTiming(Option.some("2 seconds"), Option.none()))).toStrictEqual(Either.right([2_000, 666] as const))
    expect(ms(leaseTiming(Option.some("5 minutes"), Option.some("1 minute")))).toStrictEqual(Either.right([300_000, 60_000] as const))
    expect(ms(leaseTiming(Option.none(), Option.some("29 seconds")))).toStrictEqual(Either.right([30_000, 29_000] as const))
  })

  it("refusals carry the flag as the issue's path", () => {
    const path = (e: ReturnType<typeof leaseTiming>) => Either.isLeft(e) ? e.left.issues.map((i) => i.path) : []
    expect(path(leaseTiming(Option.some("x"), Option.none()))).toStrictEqual(["--lease-ttl"])
    expect(path(leaseTiming(Option.some("1 second"), Option.some("2 seconds")))).toStrictEqual(["--renew-every"])
  })
})

describe("blockLeasesOf (block leases on by default, --no-block-leases, --expected-runners)", () => {
  const path = (e: ReturnType<typeof blockLeasesOf>) => Either.isLeft(e) ? e.left.issues.map((i) => i.path) : []

  it("on with window claims (the default), the expected runners optional (the first blocks' size guess); off with either opt-out", () => {
    expect(blockLeasesOf(true, true, Option.some(3))).toStrictEqual(Either.right({ expectedRunners: 3 }))
    expect(blockLeasesOf(true, true, Option.none())).toStrictEqual(Either.right({}))
    expect(blockLeasesOf(false, true, Option.none())).toStrictEqual(Either.right(undefined))
    // --no-window-claims turns block leases off too (they ride on the window claims' renewal)
    expect(blockLeasesOf(true, false, Option.none())).toStrictEqual(Either.right(undefined))
    expect(blockLeasesOf(false, false, Option.none())).toStrictEqual(Either.right(undefined))
  })

  it("--expected-runners with block leases off is refused (exit 2, the flag as the issue's path), naming the opt-out", () => {
    const off = blockLeasesOf(false, true, Option.some(3))
    assert.deepStrictEqual(path(off), ["--expected-runners"])
    assert.include(Either.isLeft(off) ? off.left.message : "", "--no-block-leases")
    const noWindows = blockLeasesOf(true, false, Option.some(3))
    assert.deepStrictEqual(path(noWindows), ["--expected-runners"])
    assert.include(Either.isLeft(noWindows) ? noWindows.left.message : "", "--no-window-claims")
  })
})

describe("assay runner: window claims and block leases on by default (pg17af)", () => {
  const url = "postgres://u@127.0.0.1:1/db"

  it.scopedLive("--expected-runners alone is taken (block leases are on); with --no-block-leases or --no-window-claims it exits 2", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-cli")
      const file = experiment(dir)
      // the flags pass; the runner goes on to the database (unreachable here)
      const alone = yield* assay(["runner", "-c", file, "--database", url, "--expected-runners", "3"], { killAfterMs: 60_000 })
      assert.notInclude(alone.stderr, "--expected-runners", alone.stderr)
      for (const off of ["--no-block-leases", "--no-window-claims"]) {
        const r = yield* assay(["runner", "-c", file, "--database", url, off, "--expected-runners", "3"])
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, "--expected-runners")
        assert.include(r.stderr, off)
      }
      // the earlier opt-in spellings are still accepted
      const old = yield* assay(["runner", "-c", file, "--database", url, "--window-claims", "--block-leases", "--expected-runners", "3"], {
        killAfterMs: 60_000
      })
      assert.notInclude(old.stderr, "--expected-runners", old.stderr)
      assert.notInclude(old.stderr, "--window-claims", old.stderr)
    }), 120_000)

  it.scopedLive("the help gives the opt-outs", () =>
    Effect.gen(function*() {
      const r = yield* assay(["runner", "--help"])
      assert.strictEqual(r.code, 0, r.stderr)
      assert.include(r.stdout, "--no-window-claims")
      assert.include(r.stdout, "--no-block-leases")
    }))
})
