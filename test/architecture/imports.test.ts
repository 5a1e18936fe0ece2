/**
 * Issue 12 ("Dependencies point one way"): reads the imports of every file of `src/` and fails
 * on an import against the direction cli → layers/config → tasks → services → domain (a
 * domain → services import, a services → layers import, ...) and on a process-wide listener
 * (`process.on(`, `process.once(`, ...) outside `src/services/Signals.ts`.
 *
 * The violations that existed when the test was written are listed in {@link ALLOWLIST}, each
 * with the change that removes it; the test also fails when an entry matches nothing any more,
 * so the list only shrinks. The checker itself is tested on synthetic files below: a new
 * violation fails it.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { against, areaOf, check, keyOf, specifiersOf } from "./importRules.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

/**
 * The exceptions to the rules, each with its reason. The test also fails on an entry that no
 * longer matches anything, so the list cannot silently grow stale.
 */
const ALLOWLIST: ReadonlyArray<string> = [
  // Allowed for good: the launcher writes the V8 code cache on the process's `exit` event, before
  // any Effect runtime exists and for no stop signal (signals are Signals' alone).
  "src/cli/launcher.ts: process.once"
]

/** Every `.ts`/`.mts`/`.mjs` file under `src/`, keyed by its checkout-relative path. */
const sources = (): ReadonlyMap<string, string> => {
  const out = new Map<string, string>()
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (/\.(m?ts|mjs)$/.test(entry.name)) {
        out.set(path.relative(root, full).split(path.sep).join("/"), fs.readFileSync(full, "utf8"))
      }
    }
  }
  walk(path.join(root, "src"))
  return out
}

describe("import directions of src/", () => {
  it("no import points the wrong way and no process listener lives outside Signals (beyond the allowlist)", () => {
    const files = sources()
    assert.isAbove(files.size, 50, "src/ was read")
    for (const file of files.keys()) {
      if (file.split("/").length > 2 || file === "src/index.ts") {
        assert.isDefined(areaOf(file), `${file}: a folder the rules do not know; add it to importRules.allowed`)
      }
    }
    const { fresh, stale } = against(check(files), ALLOWLIST)
    assert.deepStrictEqual(fresh.map(keyOf), [], "imports against the direction (or listeners outside Signals)")
    assert.deepStrictEqual(stale, [], "allowlist entries that match nothing any more: delete them")
  })
})

describe("examples/", () => {
  it("import assay as users do (\"assay\"), never a path into src/ or outside their folder", () => {
    const outside: Array<string> = []
    const walk = (dir: string): void => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const full = path.join(dir, entry.name)
        if (entry.isDirectory()) walk(full)
        else if (/\.(m?ts|m?js)$/.test(entry.name)) {
          for (const spec of specifiersOf(full, fs.readFileSync(full, "utf8"))) {
            const resolved = path.resolve(path.dirname(full), spec)
            if (spec.startsWith(".") && !resolved.startsWith(path.join(root, "examples") + path.sep)) {
              outside.push(`${path.relative(root, full)} -> ${spec}`)
            }
          }
        }
      }
    }
    walk(path.join(root, "examples"))
    assert.deepStrictEqual(outside, [])
  })
})

describe("the checker (synthetic files)", () => {
  const files = (entries: Record<string, string>) => new Map(Object.entries(entries))

  it("flags domain → services, services → layers, layers → cli, in static, type, re-export and dynamic forms", () => {
    const found = check(files({
      "src/domain/A.ts": `import type { X } from "../services/Store.js"\nexport * from "../layers/L.js"`,
      "src/services/B.ts": `const m = () => import("../layers/SqliteStore.js")\ntype T = import("../cli/main.js").T`,
      "src/layers/internal/sqlite/C.ts": `import { y } from "../../../cli/Flags.js"`,
      "src/domain/D.ts": `import { z } from "../config/Config.js"`
    }))
    assert.deepStrictEqual(found.map(keyOf), [
      "src/domain/A.ts -> src/services/Store.ts",
      "src/domain/A.ts -> src/layers/L.ts",
      "src/services/B.ts -> src/layers/SqliteStore.ts",
      "src/services/B.ts -> src/cli/main.ts",
      "src/layers/internal/sqlite/C.ts -> src/cli/Flags.ts",
      "src/domain/D.ts -> src/config/Config.ts"
    ])
  })

  it("accepts imports that point down, packages, and look-alikes in comments and strings", () => {
    const found = check(files({
      "src/cli/A.ts": `import * as R from "../services/Runner.js"\nimport * as E from "../config/Config.js"`,
      "src/layers/B.ts": `import { Effect } from "effect"\nimport * as D from "../domain/Json.js"\nimport * as C from "../config/internal/build.js"`,
      "src/config/internal/C.ts": `import * as P from "../../layers/Plugins.js"`,
      "src/services/D.ts": `// import * as L from "../layers/SqliteStore.js"\nconst s = 'import("../cli/main.js")'\nimport * as I from "./internal/x.js"`,
      "src/index.ts": `export * as Main from "./cli/main.js"`
    }))
    assert.deepStrictEqual(found, [])
  })

  it("flags process listeners outside src/services/Signals.ts, not inside it, and not look-alikes", () => {
    const found = check(files({
      "src/services/Signals.ts": `process.on("SIGINT", f)`,
      "src/services/Runner.ts": `const x = 1\nprocess.on("SIGTERM", f)\nprocess.prependListener("SIGINT", g)`,
      "src/cli/main.ts": `process.once("SIGINT", f)\nemitter.on("SIGINT", f)\nprocess.off("SIGINT", f)`
    }))
    assert.deepStrictEqual(found, [
      { kind: "listener", file: "src/services/Runner.ts", method: "on", line: 2 },
      { kind: "listener", file: "src/services/Runner.ts", method: "prependListener", line: 3 },
      { kind: "listener", file: "src/cli/main.ts", method: "once", line: 1 }
    ])
  })

  it("an allowlist hides only its own entries and reports the ones that no longer match", () => {
    const violations = check(files({
      "src/domain/A.ts": `import type { X } from "../services/Store.js"`,
      "src/domain/B.ts": `import type { Y } from "../services/Bus.js"`
    }))
    const { fresh, stale } = against(violations, [
      "src/domain/A.ts -> src/services/Store.ts",
      "src/services/Export.ts -> src/layers/SqliteStore.ts"
    ])
    assert.deepStrictEqual(fresh.map(keyOf), ["src/domain/B.ts -> src/services/Bus.ts"])
    assert.deepStrictEqual(stale, ["src/services/Export.ts -> src/layers/SqliteStore.ts"])
  })
})
