/**
 * A vitest reporter that says, before the first test, what the run will do and about how long
 * it will take: the test files of each group (`unit`, `integration`) and an estimate from the
 * durations vitest recorded in its results cache on earlier runs (files never run before count
 * as unknown). The default reporter prints everything else.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import type { Reporter, TestSpecification, Vitest } from "vitest/node"

const minutes = (ms: number) => (ms < 90_000 ? `${Math.round(ms / 1000)} s` : `${(ms / 60_000).toFixed(1)} min`)

/** Durations (ms) of earlier runs by test file (relative path), from every results cache. */
const recorded = (root: string): Map<string, number> => {
  const out = new Map<string, number>()
  const base = path.join(root, "node_modules/.vite/vitest")
  let dirs: Array<string> = []
  try {
    dirs = fs.readdirSync(base)
  } catch {
    return out
  }
  for (const dir of dirs) {
    try {
      const data = JSON.parse(fs.readFileSync(path.join(base, dir, "results.json"), "utf8")) as {
        results: Array<[string, { duration?: number }]>
      }
      for (const [key, result] of data.results) {
        const file = key.slice(key.indexOf(":") + 1)
        if (typeof result.duration === "number" && result.duration > 0) out.set(file, result.duration)
      }
    } catch {
      // no cache (or an unreadable one) in this folder
    }
  }
  return out
}

export default class PlanReporter implements Reporter {
  private vitest: Vitest | undefined

  onInit(vitest: Vitest): void {
    this.vitest = vitest
  }

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    const vitest = this.vitest
    if (vitest === undefined) return
    const root = vitest.config.root
    const durations = recorded(root)
    const groups = new Map<string, { files: number; known: number; ms: number }>()
    for (const spec of specifications) {
      const name = spec.project.name || "default"
      const group = groups.get(name) ?? { files: 0, known: 0, ms: 0 }
      const ms = durations.get(path.relative(root, spec.moduleId))
      group.files += 1
      if (ms !== undefined) {
        group.known += 1
        group.ms += ms
      }
      groups.set(name, group)
    }
    const workers = Math.max(1, Number(vitest.config.maxWorkers) || 1)
    const total = [...groups.values()].reduce((sum, g) => sum + g.ms, 0)
    const lines = [...groups].map(([name, g]) =>
      `  ${name}: ${g.files} files` + (g.known > 0 ? `, ${minutes(g.ms)} of test time last run (${g.known} known)` : "")
    )
    process.stdout.write(
      [
        `assay tests: ${specifications.length} files in ${groups.size} group(s), ${workers} worker(s)`,
        ...lines,
        total > 0
          ? `  expected wall time: about ${minutes(total / workers)} (from the last recorded durations)`
          : "  expected wall time: unknown (no earlier run recorded)",
        ""
      ].join("\n")
    )
  }
}
