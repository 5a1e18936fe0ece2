/**
 * Issue 12 §8: internal helpers are not reachable from the package entry (`src/index.ts`,
 * what `import ... from "assay"` gives). The public surface, read with the compiler
 * (`apiReport.ts`: every name of every namespace the entry exports, types included), must equal
 * the reviewed report `api-report.json`: a name added to or removed from a public module fails
 * here until that file is regenerated (`npx tsx test/architecture/apiReport.ts --write`) and its
 * diff reviewed, as with api-extractor. Helpers live in each module's `internal/` file.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as Assay from "../../src/index.js"
import { type ApiReport, apiReport, reportFile } from "./apiReport.js"

const reviewed: ApiReport = JSON.parse(fs.readFileSync(reportFile, "utf8"))

/** Names that once leaked (string distances, parsers, formatters, constants): never public. */
const INTERNAL = [
  "levenshtein",
  "closest",
  "formatPath",
  "formatOf",
  "parseText",
  "expandEnv",
  "allowedKeysAt",
  "placesOfKey",
  "csvField",
  "SQLITE_HEADER",
  "isLoopback",
  "isLoopbackHost",
  "hostAllowed",
  "checkOutput",
  "writeRows",
  "openReadOnly",
  "flattenRow",
  "substituteArgv",
  "shellQuote",
  "completionsUrl",
  "proxySettings",
  "branchSeed",
  "drawFor",
  "importModule",
  "moduleUrl",
  "emptySourceMessage",
  "noStoreWarning",
  "parseDuration",
  "formatDuration",
  "renderLine",
  "stopSignals",
  "SKIPPED_METRIC",
  "backoffDelayMs",
  "fingerprintOf",
  "remainingQuota",
  "connectionErrorCodes",
  "humanDuration",
  "parseRetryAfter",
  "serverDelayMessage",
  "messageOf",
  "deepEqual",
  "isSecretKey",
  "toJsonSafe",
  "maskSecrets",
  "emailSection",
  "throttled",
  "errorRowOf",
  "PAGE_SIZE"
]

describe("the package entry (src/index.ts)", () => {
  it("exports exactly the reviewed public surface (api-report.json)", { timeout: 60_000 }, () => {
    const actual = apiReport()
    const added: Array<string> = []
    const removed: Array<string> = []
    for (const ns of new Set([...Object.keys(actual), ...Object.keys(reviewed)])) {
      const now = new Set(actual[ns] ?? [])
      const before = new Set(reviewed[ns] ?? [])
      for (const n of now) if (!before.has(n)) added.push(`${ns}.${n}`)
      for (const n of before) if (!now.has(n)) removed.push(`${ns}.${n}`)
    }
    assert.deepStrictEqual(
      { added, removed },
      { added: [], removed: [] },
      "the public surface changed: review it, then run `npx tsx test/architecture/apiReport.ts --write`"
    )
  })

  it("the report's value names are what a JavaScript import sees", () => {
    for (const [ns, value] of Object.entries(Assay)) {
      if (typeof value !== "object" || value === null) continue
      const values = (reviewed[ns] ?? []).filter((n) => !n.startsWith("type ")).sort()
      assert.deepStrictEqual(Object.keys(value).sort(), values, `runtime names of ${ns}`)
    }
  })

  it("exposes none of the helpers that once leaked", () => {
    const found: Array<string> = []
    for (const [ns, names] of Object.entries(reviewed)) {
      for (const name of INTERNAL) {
        // the signal list is public where it belongs: the Signals module
        if (ns === "Signals" && name === "stopSignals") continue
        if (names.includes(name) || names.includes(`type ${name}`)) found.push(`${ns}.${name}`)
      }
    }
    assert.deepStrictEqual(found, [])
  })

  it("keeps the config module's public names under Experiment and Config", () => {
    for (const name of ["load", "read", "fromDefinition", "runSettings", "defineExperiment", "sourceSize"]) {
      assert.property(Assay.Experiment, name)
    }
    for (const name of ["ExperimentFile", "ExperimentDefinition", "RunSection", "defineExperiment", "FANOUT"]) {
      assert.property(Assay.Config, name)
    }
    assert.strictEqual(Assay.Experiment.defineExperiment, Assay.Config.defineExperiment)
    assert.property(Assay.RunConfig, "resolve")
    assert.property(Assay.StoreResolver, "layerOpener")
  })
})
