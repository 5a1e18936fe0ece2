/**
 * TypeScript experiments and plugins outside assay's directory (a user's own project with no
 * `node_modules`): `import ... from "assay"` and `from "effect"` resolve to the CLI's own
 * installation, and the pipeline ids equal those of the same experiment in YAML. A `.ts` file
 * that would load as CommonJS is refused with a hint saying how to fix it.
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

const assay = (args: ReadonlyArray<string>, cwd: string) =>
  Effect.promise(() =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(bin, [...args], { cwd, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
      child.on("close", (code) => resolve({ code, stdout, stderr }))
    })
  )

const ids = (file: string) => {
  const db = new Database(file, { readonly: true })
  try {
    return (db.prepare("SELECT pipeline_id FROM pipelines ORDER BY pipeline_id").all() as Array<{ pipeline_id: string }>)
      .map((r) => r.pipeline_id)
  } finally {
    db.close()
  }
}

const plugin = `import { Effect } from "effect"
import { Task } from "assay"
export const tasks = { shout: Task.make("shout", (s: unknown) => Effect.succeed(String(s).toUpperCase())) }
`

describe("TypeScript experiments outside the checkout", { timeout: 180_000 }, () => {
  it.live("import assay and effect with no node_modules; same ids as the YAML; CommonJS refused with a hint", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-outside-"))
      fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ type: "module" }))
      for (const f of ["delay.ts", "delay.yaml"]) {
        fs.copyFileSync(path.join(root, "examples/experiments", f), path.join(dir, f))
      }
      fs.writeFileSync(path.join(dir, "my-plugin.ts"), plugin)
      fs.writeFileSync(
        path.join(dir, "shout.yaml"),
        "plugins: [./my-plugin.ts]\npipeline:\n  name: shout\n  tasks:\n    - use: shout\nsource:\n  range: { n: 2 }\n"
      )
      const ts = yield* assay(["run", "-c", "delay.ts", "--store", path.join(dir, "ts.db")], dir)
      assert.strictEqual(ts.code, 0, ts.stderr)
      const yaml = yield* assay(["run", "-c", "delay.yaml", "--store", path.join(dir, "yaml.db")], dir)
      assert.strictEqual(yaml.code, 0, yaml.stderr)
      assert.deepStrictEqual(ids(path.join(dir, "ts.db")), ids(path.join(dir, "yaml.db")))
      assert.strictEqual(ids(path.join(dir, "ts.db")).length, 8)
      const shout = yield* assay(["run", "-c", "shout.yaml", "--store", path.join(dir, "shout.db")], dir)
      assert.strictEqual(shout.code, 0, shout.stderr)

      // the same file with no "type": "module" above it
      const cjs = fs.mkdtempSync(path.join(os.tmpdir(), "assay-outside-cjs-"))
      fs.copyFileSync(path.join(root, "examples/experiments/delay.ts"), path.join(cjs, "delay.ts"))
      const refused = yield* assay(["validate", "-c", "delay.ts"], cjs)
      assert.strictEqual(refused.code, 2)
      assert.include(refused.stderr, "loads as CommonJS")
      assert.include(refused.stderr, ".mts")
    }))
})
