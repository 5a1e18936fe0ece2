/**
 * Where a process's CPU goes, from a V8 `.cpuprofile` (`node --cpu-prof`; bench/cluster.ts
 * `BENCH_CLUSTER_PROFILE=DIR`), by module and by the nearest frame of assay's own code.
 *
 * Samples are **counted**, not weighed by their `timeDeltas`: a delta is the wall time since the
 * previous sample, so on a machine where the process waits for a core (the cluster bench's five
 * processes on two cores), the wait is charged to whatever ran just before it was preempted:
 * most often the socket write that woke another process (`writev` looked like 7 % of a runner by
 * deltas, 4 % by counts; the deltas summed to 25 s for a process that used 13.5 s of CPU,
 * BENCHMARKS.md lead35). A count is one tick of the sampling interval spent running.
 *
 * - by module: the self samples of each package (Effect's and @effect's by file), of each of
 *   assay's files (`assay:<path>`), of the garbage collector (`(gc)`) and of native code;
 * - by nearest assay frame: each sample is charged to the closest frame on its stack that is
 *   assay's own code (src/ or dist/, not node_modules), so library code called synchronously by
 *   assay counts for its caller; a sample with none (Effect's fiber runtime running a
 *   continuation, node-postgres's socket reads) is grouped by its outermost library frame.
 *
 * Run: `npx tsx bench/lib/profileModules.ts FILE.cpuprofile [top]`: one JSON line per view
 * (`{ view, samples, entries: [[name, %, ticks], …] }`).
 */
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"

interface Node {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly children?: ReadonlyArray<number>
}

/** The summary: sampled ticks in all, and the top entries of each view, as shares (%) and ticks. */
export interface ModuleSummary {
  readonly samples: number
  readonly byModule: ReadonlyArray<readonly [string, number, number]>
  readonly byNearestAssayFrame: ReadonlyArray<readonly [string, number, number]>
}

const moduleOf = (url: string): string => {
  if (url === "") return "(native)"
  const dep = url.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\/(.*)$/)
  if (dep !== null) {
    const [, pkg, rest] = dep
    return pkg!.startsWith("effect") || pkg!.startsWith("@effect/") ? `${pkg}/${rest!.split("/").pop()}` : pkg!
  }
  const own = url.match(/\/(?:src|dist)\/(.*)$/)
  if (own !== null) return `assay:${own[1]}`
  return url.split("/").slice(-2).join("/")
}

const isAssay = (url: string): boolean => /\/(src|dist)\//.test(url) && !url.includes("node_modules")

/**
 * Summarizes `file` (see the module docs); `top` entries per view.
 */
export const summarizeModules = (file: string, top = 30): ModuleSummary => {
  const p = JSON.parse(fs.readFileSync(file, "utf8")) as { nodes: ReadonlyArray<Node>; samples: ReadonlyArray<number> }
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const ticks = new Map<number, number>()
  for (const s of p.samples) ticks.set(s, (ticks.get(s) ?? 0) + 1)
  const modules = new Map<string, number>()
  const nearest = new Map<string, number>()
  const add = (m: Map<string, number>, k: string, n: number) => m.set(k, (m.get(k) ?? 0) + n)
  let total = 0
  for (const [id, n] of ticks) {
    const frame = byId.get(id)!.callFrame
    if (frame.functionName === "(idle)" || frame.functionName === "(program)") continue
    total += n
    if (frame.functionName === "(garbage collector)") {
      add(modules, "(gc)", n)
      add(nearest, "(gc)", n)
      continue
    }
    add(modules, moduleOf(frame.url), n)
    let key: string | undefined
    let outermostLibrary: string | undefined
    for (let c: number | undefined = id; c !== undefined && key === undefined; c = parent.get(c)) {
      const f = byId.get(c)!.callFrame
      if (isAssay(f.url)) key = `${f.functionName || "(anonymous)"} ${moduleOf(f.url)}:${f.lineNumber + 1}`
      else if (f.url.includes("node_modules")) outermostLibrary = `${moduleOf(f.url)} ${f.functionName || "(anonymous)"}`
    }
    add(nearest, key ?? `(no assay frame) ${outermostLibrary ?? "node internals"}`, n)
  }
  const list = (m: Map<string, number>) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, n]) => [k, +(100 * n / total).toFixed(1), n] as const)
  return { samples: total, byModule: list(modules), byNearestAssayFrame: list(nearest) }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const s = summarizeModules(process.argv[2]!, Number(process.argv[3] ?? 30))
  console.log(JSON.stringify({ view: "module", samples: s.samples, entries: s.byModule }))
  console.log(JSON.stringify({ view: "nearest-assay-frame", samples: s.samples, entries: s.byNearestAssayFrame }))
}
