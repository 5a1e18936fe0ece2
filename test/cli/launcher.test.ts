/**
 * The launcher's choice of runtime from the config files a command names
 * (`configsNameUserCode`): a config that names a module file, directly or through the config
 * files it names (a study's experiment), starts on the unbundled runtime at once; a config
 * without one (or naming only a JSON Schema that mentions `.ts` files) stays on the bundle.
 * Cluster commands (`runner`, `migrate`, `--engine cluster`) start from the cluster bundle
 * (`bundleOf`), unless they name user code.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { bundleOf, configsNameUserCode, namesUserCode, startsUnbundled } from "../../src/cli/launcher.js"

const dir = (files: Record<string, string>): string => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "assay-launcher-"))
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(d, name)), { recursive: true })
    fs.writeFileSync(path.join(d, name), text)
  }
  return d
}

const argv = (...words: Array<string>) => ["node", "assay", ...words]

describe("launcher: configs that name user code", () => {
  it("a study whose experiment uses ./tasks.ts starts on the unbundled runtime; its export stays on the bundle", () => {
    const d = dir({
      "study.json": JSON.stringify({ protocol: { experiment: "./exp/experiment.json" } }),
      "exp/experiment.json": JSON.stringify({ pipeline: { tasks: [{ use: "./tasks.ts#first" }] } })
    })
    assert.isFalse(namesUserCode(argv("study", "run", "study.json")))
    assert.isTrue(configsNameUserCode(argv("study", "run", "study.json"), d))
    assert.isTrue(configsNameUserCode(argv("study", "status", path.join(d, "study.json")), "/"))
    assert.isTrue(configsNameUserCode(argv("validate", "--config=study.json"), d))
    assert.isFalse(configsNameUserCode(argv("study", "export", "study.json"), d))
  })

  it("YAML and TOML: an unquoted use, a plugins list; a config naming only built-in tasks and data files does not", () => {
    const d = dir({
      "a.yaml": "pipeline:\n  tasks:\n    - use: ./t.mts#go\n",
      "b.toml": "plugins = [\"./plugin.js\"]\n",
      "c.yaml": "$schema: ../docs/experiment.schema.json\nsource:\n  jsonl: emails.jsonl\npipeline:\n  tasks:\n    - use: delay\n",
      "docs/experiment.schema.json": JSON.stringify({ description: "use: ./tasks.ts#name" })
    })
    assert.isTrue(configsNameUserCode(argv("run", "-c", "a.yaml"), d))
    assert.isTrue(configsNameUserCode(argv("run", "-c", "b.toml"), d))
    assert.isFalse(configsNameUserCode(argv("run", "-c", "c.yaml"), d))
    assert.isFalse(configsNameUserCode(argv("run", "-c", "missing.yaml"), d))
    assert.isFalse(configsNameUserCode(argv("report", "store.db"), d))
  })

  it("config files naming each other in a loop end the look", () => {
    const d = dir({ "a.json": "{\"next\": \"b.json\"}", "b.json": "{\"next\": \"a.json\"}" })
    assert.isFalse(configsNameUserCode(argv("validate", "-c", "a.json"), d))
  })
})

describe("launcher: cluster commands", () => {
  it("runner, migrate and --engine cluster start from the cluster bundle; their help and the embedded engine from the fast start; user code unbundled", () => {
    const d = dir({
      "exp.json": JSON.stringify({ pipeline: { tasks: [{ use: "simulateLlm" }] } }),
      "user.json": JSON.stringify({ pipeline: { tasks: [{ use: "./tasks.ts#first" }] } })
    })
    const url = "postgres://u@127.0.0.1:5432/db"
    const cluster = [
      argv("runner", "-c", "exp.json", "--database", url),
      argv("migrate", "--database", url),
      argv("run", "-c", "exp.json", "--engine", "cluster", "--database", url, "--quiet"),
      argv("run", "-c", "exp.json", "--resume", "--engine=cluster", "--database", url),
      argv("study", "run", "study.json", "--engine", "cluster")
    ]
    for (const a of cluster) {
      assert.isFalse(startsUnbundled(a, d), a.join(" "))
      assert.strictEqual(bundleOf(a), "cluster", a.join(" "))
    }
    for (const a of [argv("run", "-c", "exp.json", "--store", "s.db"), argv("run", "-c", "exp.json", "--engine", "local"), argv("runner", "--help"), argv("run", "--engine", "cluster", "-h")]) {
      assert.isFalse(startsUnbundled(a, d), a.join(" "))
      assert.strictEqual(bundleOf(a), "assay", a.join(" "))
    }
    assert.isTrue(startsUnbundled(argv("runner", "-c", "user.json", "--database", url), d))
    assert.isTrue(startsUnbundled(argv("run", "-c", "tasks.ts", "--engine", "cluster", "--database", url), d))
  })
})
