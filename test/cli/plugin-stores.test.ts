/**
 * Plugin stores through the real CLI (spawned `bin/assay`): the example of docs/cli.md
 * "Plugin stores" (its plugin is test/fixtures/plugins/vault.ts, its experiment the JSON block
 * of that section) run with `run.store: vault://qa` and with `--store`, read back by report
 * and export, a plugin artifact backend, `assay plugins --json`, and the refusals: an unknown
 * scheme (exit 2, named), a failing factory (exit 1, clear message), `--shards` on a plugin
 * store (exit 2), and `validate` on an unknown `run.store` scheme.
 *
 * Each spawn costs several seconds of start-up: the tests share spawns where they can.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = path.join(root, "bin/assay")
const fixture = path.join(root, "test/fixtures/plugins/vault.ts")

interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const assay = (args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}) =>
  Effect.promise(() =>
    new Promise<Result>((resolve) => {
      const merged: Record<string, string | undefined> = { ...process.env, ...env }
      for (const [k, v] of Object.entries(env)) if (v === undefined) delete merged[k]
      const child = spawn(bin, [...args], { cwd: root, env: merged as NodeJS.ProcessEnv, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
      child.on("close", (code) => resolve({ code, stdout, stderr }))
    })
  )

const count = (db: string, sql: string): number => {
  const d = new Database(db, { readonly: true, fileMustExist: true })
  try {
    return Number(Object.values(d.prepare(sql).get() as Record<string, unknown>)[0])
  } finally {
    d.close()
  }
}

/** The fenced blocks of one language in the "Plugin stores" section of docs/cli.md. */
const docBlocks = (lang: string): Array<string> => {
  const text = fs.readFileSync(path.join(root, "docs/cli.md"), "utf8")
  const start = text.indexOf("## Plugin stores")
  assert.isAtLeast(start, 0, "docs/cli.md has a Plugin stores section")
  const next = text.indexOf("\n## ", start + 3)
  const section = text.slice(start, next < 0 ? undefined : next)
  return [...section.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1]!)
}

/** A temp dir with the docs' experiment (its `./vault.ts` pointing at the fixture) and a vault root. */
const setup = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-plugin-stores-"))
  const vault = path.join(dir, "vault")
  fs.mkdirSync(vault)
  const json = docBlocks("json").find((b) => b.includes("vault://"))
  assert.isDefined(json, "the section has the JSON experiment")
  const experiment = JSON.parse(json!) as { plugins: Array<string> }
  experiment.plugins = experiment.plugins.map((p) => (p === "./vault.ts" ? fixture : p))
  const file = path.join(dir, "vault.json")
  fs.writeFileSync(file, JSON.stringify(experiment))
  return { dir, vault, file, env: { VAULT_ROOT: vault } }
}

describe("plugin stores (bin/assay)", () => {
  it("the docs' plugin is the fixture the tests run", () => {
    const ts = docBlocks("ts")
    assert.include(ts, fs.readFileSync(fixture, "utf8"))
  })

  it.live("run.store and --store with a plugin URI; report and export read it back; a plugin backend; plugins --json", () =>
    Effect.gen(function*() {
      const { dir, env, file, vault } = setup()
      // run.store: "vault://qa" from the file.
      const r = yield* assay(["run", "-c", file, "--quiet"], env)
      assert.strictEqual(r.code, 0, r.stderr)
      assert.include(r.stdout, "store: vault://qa")
      const qa = path.join(vault, "qa.db")
      assert.strictEqual(count(qa, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 3)
      assert.isFalse(fs.existsSync(path.join(dir, "vault:")), "the URI was not taken for a relative path")

      // --store overrides it with another store of the same plugin.
      const again = yield* assay(["run", "-c", file, "--quiet", "--store", "vault://again", "--summary", "json"], env)
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(JSON.parse(again.stdout.trim().split("\n").pop()!).store, "vault://again")
      assert.strictEqual(count(path.join(vault, "again.db"), "SELECT count(*) FROM pipelines"), 3)

      // A plugin memory store with a plugin artifact backend: the payloads become blob files.
      const blobs = yield* assay(
        ["run", "-c", file, "--quiet", "--store", "scratch://x", "--artifact-backend", "vaultblobs://b"],
        env
      )
      assert.strictEqual(blobs.code, 0, blobs.stderr)
      const blobDir = path.join(vault, "blobs", "b")
      const files = fs.readdirSync(blobDir, { recursive: true }).filter((f) => /[0-9a-f]{128}$/.test(String(f)))
      assert.isAtLeast(files.length, 3, "seeds and outputs were written by the plugin backend")

      // Read commands open the plugin URI read-only (--plugin, or ASSAY_PLUGINS).
      const report = yield* assay(["report", "vault://qa", "--plugin", fixture, "--json"], env)
      assert.strictEqual(report.code, 0, report.stderr)
      const data = JSON.parse(report.stdout)
      assert.deepStrictEqual(data.stores, ["vault://qa"])
      assert.strictEqual(data.byState.succeeded, 3)
      const out = path.join(dir, "out.jsonl")
      const exported = yield* assay(["export", "vault://qa", out], { ...env, ASSAY_PLUGINS: fixture })
      assert.strictEqual(exported.code, 0, exported.stderr)
      assert.strictEqual(fs.readFileSync(out, "utf8").trim().split("\n").length, 3)

      const list = yield* assay(["plugins", "-c", file, "--json"], env)
      assert.strictEqual(list.code, 0, list.stderr)
      const listed = JSON.parse(list.stdout)
      const vaultPlugin = listed.plugins.find((p: { name: string }) => p.name === "vault")
      assert.deepStrictEqual(vaultPlugin.stores, ["vault", "scratch"])
      assert.deepStrictEqual(vaultPlugin.artifactBackends, ["vaultblobs"])
      assert.isNull(vaultPlugin.error)
      assert.include(listed.builtins.stores, "file://")
    }), 300_000)

  it.live("refusals: unknown scheme (exit 2, named), failing factory (exit 1), --shards on a plugin store (exit 2)", () =>
    Effect.gen(function*() {
      const { env, file, vault } = setup()
      const unknown = yield* assay(["run", "-c", file, "--store", "nope://x"], env)
      assert.strictEqual(unknown.code, 2)
      assert.include(unknown.stderr, "no plugin provides the store scheme \"nope://\"")
      assert.include(unknown.stderr, "vault://")
      assert.deepStrictEqual(fs.readdirSync(vault), [], "nothing was opened")

      const failing = yield* assay(["run", "-c", file], { VAULT_ROOT: undefined })
      assert.strictEqual(failing.code, 1)
      assert.include(failing.stderr, `store factory of plugin ${fixture} for vault:// failed: VAULT_ROOT is not set`)
      assert.notInclude(failing.stderr, "    at ", "a message, not a stack trace")

      const shards = yield* assay(["run", "-c", file, "--shards", "2"], env)
      assert.strictEqual(shards.code, 2)
      assert.include(shards.stderr, "plugin store (vault://)")

      const report = yield* assay(["report", "nope://x"], env)
      assert.strictEqual(report.code, 2)
      assert.include(report.stderr, "\"nope://\"")
    }), 300_000)

  // `validate` checks run.store once the experiment loader calls StoreResolver.checkStoreSpec
  // (the config loader, src/config/internal/check.ts, belongs to another change; this test turns itself on with it).
  const loaderChecksStores = fs.readFileSync(path.join(root, "src/config/internal/check.ts"), "utf8").includes("checkStoreSpec")
  it.live.skipIf(!loaderChecksStores)("validate refuses an unknown run.store scheme with its field path, as run does", () =>
    Effect.gen(function*() {
      const { dir, env } = setup()
      const file = path.join(dir, "nope.json")
      fs.writeFileSync(file, JSON.stringify({
        run: { store: "nope://x" },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      }))
      const v = yield* assay(["validate", "-c", file], env)
      assert.strictEqual(v.code, 2)
      assert.include(v.stderr, "run.store")
      assert.include(v.stderr, "\"nope://\"")
      const r = yield* assay(["run", "-c", file], env)
      assert.strictEqual(r.code, 2)
      assert.include(r.stderr, "\"nope://\"")
    }), 120_000)
})
