/**
 * Mistakes in the call cache flags are exit 2 with one line naming the flag (`--cache-mode`,
 * `--cache-ttl`, an unopenable `--cache-db`, an option where its value should be), refused
 * before any pipeline runs; and the mock's
 * random answers are `random-<16 hex>` as documented.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as NodePath from "node:path"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, tempDir, write } from "../support/cli.js"

describe("call cache flags: config mistakes", () => {
  it.scopedLive("--cache-mode, --cache-ttl and --cache-db: exit 2, one message naming the flag, nothing run", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cache-flags")
      const exp = write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 1 } } })
      const run = (args: ReadonlyArray<string>) => assay(["run", "-c", exp, "--quiet", "--store", "s.db", ...args], { cwd: dir })

      const bogus = yield* run(["--cache-mode", "bogus"])
      assert.strictEqual(bogus.code, 2)
      assert.include(bogus.stderr, `--cache-mode: "bogus" is not one of readWrite, readOnly, refresh, off`)
      // a flag at the end of the line without its value: what it needs, not "unknown argument" (tester18f F5)
      for (const [flag, needs] of [
        ["--cache-mode", "--cache-mode needs a value (one of readWrite, readOnly, refresh, off)"],
        ["--cache-ttl", "--cache-ttl needs a value ("],
        ["--cache-db", "--cache-db needs a value ("]
      ] as const) {
        const bare = yield* run([flag])
        assert.strictEqual(bare.code, 2, bare.stderr)
        assert.include(bare.stderr, needs)
        assert.notInclude(bare.stderr, "Received unknown argument")
      }
      // another option where the value should be: refused naming both, no file named `--cache`
      // made (tester18g F2: a cache or store file `--cache`, a label `--cache`)
      for (const [args, says] of [
        [["--cache-db", "--cache"], "--cache-db needs a value (path), got the option --cache"],
        [["--cache-db", "--cache-mode", "readOnly"], "--cache-db needs a value (path), got the option --cache-mode"],
        [["--label", "--cache"], "--label needs a value (label), got the option --cache"]
      ] as const) {
        const slipped = yield* run(args)
        assert.strictEqual(slipped.code, 2, slipped.stderr)
        assert.include(slipped.stderr, says)
        assert.notInclude(slipped.stderr, "Received unknown argument")
        assert.isFalse(fs.existsSync(NodePath.join(dir, "--cache")))
        assert.isFalse(fs.existsSync(NodePath.join(dir, "s.db")), "nothing run")
      }
      const storeSlip = yield* assay(["run", "-c", exp, "--store", "--cache"], { cwd: dir })
      assert.strictEqual(storeSlip.code, 2, storeSlip.stderr)
      assert.include(storeSlip.stderr, "--store needs a value (store), got the option --cache")
      assert.isFalse(fs.existsSync(NodePath.join(dir, "--cache")))
      const slip = yield* run(["--cache-mode", "readwrite"])
      assert.strictEqual(slip.code, 2)
      assert.include(slip.stderr, "did you mean readWrite?")

      const ttl = yield* run(["--cache", "--cache-ttl", "-5 seconds"])
      assert.strictEqual(ttl.code, 2)
      assert.include(ttl.stderr, `--cache-ttl: must be a positive duration such as "7 days", got "-5 seconds"`)
      assert.notInclude(ttl.stderr, "Duration(")

      const text = write(dir, "notes.txt", "not a database\n".repeat(100))
      const before = fs.readdirSync(dir).sort()
      const garbage = yield* run(["--cache-db", text])
      assert.strictEqual(garbage.code, 2, garbage.stderr)
      assert.include(garbage.stderr, `--cache-db: cannot open the call cache database ${text}`)
      const missing = NodePath.join(dir, "no-such-dir", "cache.db")
      const nodir = yield* run(["--cache-db", missing])
      assert.strictEqual(nodir.code, 2, nodir.stderr)
      assert.include(nodir.stderr, missing)
      // the words of validate (one check for both since the issue 18 trial), not SQLite's
      assert.include(nodir.stderr, `the folder ${NodePath.dirname(missing)} does not exist`)
      const folder = NodePath.join(dir, "a-folder")
      fs.mkdirSync(folder)
      const isDir = yield* run(["--cache-db", folder])
      assert.strictEqual(isDir.code, 2, isDir.stderr)
      assert.include(isDir.stderr, `--cache-db: cannot open the call cache database ${folder}: it is a directory`)
      // under a regular file: no folder can be made there, whoever runs it
      const underFile = NodePath.join(text, "cache.db")
      const unwritable = yield* run(["--cache-db", underFile])
      assert.strictEqual(unwritable.code, 2, unwritable.stderr)
      assert.include(unwritable.stderr, `--cache-db: cannot open the call cache database ${underFile}`)
      // issue 18: each refusal left an empty store file (s.db) behind; now nothing is created
      assert.deepStrictEqual(fs.readdirSync(dir).sort(), [...before, "a-folder"].sort())
      assert.deepStrictEqual(fs.readdirSync(folder), [])
      assert.strictEqual(fs.readFileSync(text, "utf8"), "not a database\n".repeat(100), "the file named is left as it was")
    }))

  it.scopedLive("a readOnly cache whose file does not exist (a misspelt path) is refused by validate and run, exit 2, nothing created (tester18e F2)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cache-ro-missing")
      const typo = NodePath.join(dir, "llm-cahce.db")
      const nodir = NodePath.join(dir, "nodir", "x.db")
      for (const [file, words] of [
        [typo, "the file does not exist, and --cache-mode readOnly only reads an existing cache"],
        [nodir, `the file does not exist (nor does the folder ${NodePath.dirname(nodir)})`]
      ] as const) {
        const exp = write(dir, "exp.json", {
          pipeline: { name: "p", tasks: [{ use: "echo" }] },
          source: { range: { n: 1 } },
          run: { cache: { mode: "readOnly", db: file } }
        })
        const before = fs.readdirSync(dir).sort()
        const validate = yield* assay(["validate", "-c", exp], { cwd: dir })
        assert.strictEqual(validate.code, 2, validate.stdout + validate.stderr)
        assert.include(validate.stdout + validate.stderr, `run.cache.db: cannot open the call cache database ${file}: ${words}`)
        const fromFile = yield* assay(["run", "-c", exp, "--quiet", "--store", "s.db"], { cwd: dir })
        assert.strictEqual(fromFile.code, 2, fromFile.stderr)
        assert.include(fromFile.stderr, `run.cache.db: cannot open the call cache database ${file}: ${words}`)
        const plain = write(dir, "plain.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 1 } } })
        const flagged = yield* assay(["run", "-c", plain, "--quiet", "--store", "s.db", "--cache-mode", "readOnly", "--cache-db", file], { cwd: dir })
        assert.strictEqual(flagged.code, 2, flagged.stderr)
        assert.include(flagged.stderr, `--cache-db: cannot open the call cache database ${file}: ${words}`)
        // nothing created: no store, no cache file, no folder
        assert.deepStrictEqual(fs.readdirSync(dir).sort(), [...new Set([...before, "plain.json"])].sort())
      }
    }))

  it.scopedLive("a readOnly cache read from a snapshot: copied and logged once per run (issue 18: the check and the run each copied it)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cache-snapshot")
      const exp = write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 2 } } })
      // a WAL-mode file without its -wal and -shm (as a copy of a closed cache): SQLite would
      // have to create them beside it, so a readOnly run reads a snapshot instead
      const cache = NodePath.join(dir, "cache.db")
      const d = new Database(cache)
      d.pragma("journal_mode = WAL")
      d.exec("CREATE TABLE t (x)")
      d.close()
      const r = yield* assay(["run", "-c", exp, "--quiet", "--store", "s.db", "--cache-db", cache, "--cache-mode", "readOnly"], { cwd: dir })
      assert.strictEqual(r.code, 0, r.stderr)
      const out = `${r.stdout}\n${r.stderr}`
      assert.strictEqual(out.split("read a snapshot of").length - 1, 1, out)
      // naming the file once (it said "call cache PATH: read a snapshot of PATH")
      const line = out.split("\n").find((l) => l.includes("read a snapshot of"))!
      assert.strictEqual(line.split(cache).length - 1, 1, line)
      assert.deepStrictEqual(fs.readdirSync(dir).filter((f) => f.startsWith("cache.db")), ["cache.db"])
    }))

  it.scopedLive("a suite run with a bad --cache-db: exit 2, nothing created (no output folder)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cache-flags-suite")
      const folder = NodePath.join(dir, "a-folder")
      fs.mkdirSync(folder)
      write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 1 } } })
      const suite = write(dir, "suite.json", {
        suite: { id: "s" },
        output: { root: "out", layout: "byExperiment" },
        experiments: { e: { config: "exp.json" } }
      })
      const before = fs.readdirSync(dir).sort()
      const r = yield* assay(["run", "-c", suite, "--quiet", "--cache-db", folder], { cwd: dir })
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "--cache-db: cannot open the call cache database")
      assert.deepStrictEqual(fs.readdirSync(dir).sort(), before)
    }))
})

describe("validate: run.cache.db", () => {
  it.scopedLive("an unopenable run.cache.db is invalid (exit 2, the field and the reason), a good one valid; validate creates nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cache-validate")
      const folder = NodePath.join(dir, "a-folder")
      fs.mkdirSync(folder)
      const text = write(dir, "notes.txt", "not a database\n".repeat(100))
      const exp = (db: string, name: string) =>
        write(dir, name, { run: { cache: { mode: "readWrite", db } }, pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 1 } } })
      const before = fs.readdirSync(dir).sort()
      const cases: Array<[string, string]> = [
        ["a-folder", "it is a directory"],
        ["notes.txt", "notes.txt"],
        ["no-such-dir/cache.db", "does not exist"],
        ["notes.txt/cache.db", "is a file, not a folder"]
      ]
      for (const [db, reason] of cases) {
        const r = yield* assay(["validate", "-c", exp(db, "bad.json")], { cwd: dir })
        assert.strictEqual(r.code, 2, `${db}: ${r.stdout}${r.stderr}`)
        assert.include(r.stderr, "run.cache.db: cannot open the call cache database", db)
        assert.include(r.stderr, reason, db)
      }
      const good = yield* assay(["validate", "-c", exp("new-cache.db", "good.json")], { cwd: dir })
      assert.strictEqual(good.code, 0, good.stderr)
      // nothing created by validate: no cache file, no store
      assert.deepStrictEqual(fs.readdirSync(dir).sort(), [...before, "bad.json", "good.json"].sort())
      assert.strictEqual(fs.readFileSync(text, "utf8"), "not a database\n".repeat(100))
    }))
})

describe("mock-llm random answers", () => {
  it.scopedLive("are random-<16 hex>", () =>
    Effect.gen(function*() {
      const profile = yield* MockLlm.decodeProfile({ seed: 1, endpoints: [{ name: "r", latency: { medianMs: 0 }, answers: { random: true } }] })
      const server = yield* MockLlm.serve({ profile }).pipe(Effect.provide(NodeContext.layer))
      const body = yield* Effect.promise(() =>
        fetch(`${server.endpoints[0]!.baseUrl}/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: "Bearer k" },
          body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] })
        }).then((r) => r.json() as Promise<{ choices: Array<{ message: { content: string } }> }>)
      )
      assert.match(body.choices[0]!.message.content, /^random-[0-9a-f]{16}$/)
    }))
})
