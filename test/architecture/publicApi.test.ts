/**
 * Issue 12 §8: internal helpers are not reachable from the package entry (`src/index.ts`,
 * what `import ... from "assay"` gives). Walks every namespace the entry exports and fails on
 * a name from {@link INTERNAL}; the user-facing names of the config module stay reachable.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Assay from "../../src/index.js"

/** Helpers that are implementation details: string distances, parsers, formatters, constants. */
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
  "isLoopbackHost"
]

/**
 * Internal names still exported on this branch, by `Namespace.name`, each with the change that
 * removes it; the test fails when an entry no longer matches, so the list only shrinks.
 */
const ALLOWLIST: ReadonlyArray<string> = [
  // §8 (cli helper): one isLoopback, moved out of the StatsServer module it is exported from
  "StatsServer.isLoopback"
]

describe("the package entry (src/index.ts)", () => {
  it("exposes no internal helper beyond the allowlist", () => {
    const found: Array<string> = []
    for (const [ns, value] of Object.entries(Assay)) {
      if (typeof value !== "object" || value === null) continue
      for (const name of INTERNAL) if (name in value) found.push(`${ns}.${name}`)
    }
    assert.deepStrictEqual(found.filter((f) => !ALLOWLIST.includes(f)), [], "internal helpers reachable from \"assay\"")
    assert.deepStrictEqual(ALLOWLIST.filter((a) => !found.includes(a)), [], "allowlist entries that match nothing: delete them")
  })

  it("keeps the config module's public names under Experiment and Config", () => {
    for (const name of ["load", "read", "fromDefinition", "runSettings", "defineExperiment", "sourceSize", "noStoreWarning"]) {
      assert.property(Assay.Experiment, name)
    }
    for (const name of ["ExperimentFile", "ExperimentDefinition", "RunSection", "defineExperiment", "FANOUT"]) {
      assert.property(Assay.Config, name)
    }
    assert.strictEqual(Assay.Experiment.defineExperiment, Assay.Config.defineExperiment)
    assert.property(Assay.RunConfig, "resolve")
  })
})
