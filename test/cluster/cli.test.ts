/**
 * Issue 17 §3: the cluster engine's flags on the command line are checked before anything
 * connects: `--engine cluster` needs `--database`, `--database` needs `--engine cluster`,
 * flags of the embedded engine are refused with it, a malformed URL or `--listen` names its
 * flag, a password in a URL is never printed, and a store only one process can write (an
 * SQLite file) is refused. All exit 2.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
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
      for (const flag of [["--shards", "2"], ["--fresh-restart"]]) {
        const r = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url, ...flag])
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, flag[0]!)
      }
    }))

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
})
