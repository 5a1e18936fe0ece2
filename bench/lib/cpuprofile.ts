/**
 * Reading a V8 `.cpuprofile` (what `node --cpu-prof` writes) for the benches: the self time of
 * each function and the time spent inside named "phases".
 *
 * A sample is charged to the phase of the nearest frame on its stack (itself first, then its
 * callers) whose function name is one of the phase's markers; a sample with no marker on its
 * stack goes to `other`, and the garbage collector's samples to `gc`. Markers are plain
 * function names as the bundle keeps them (`bootstrapReduced`, `sectionsOf`, …), so a phase is
 * only as precise as its names: Effect code driven by the fiber runtime (a generator's body) has
 * the runtime, not its caller, above it.
 *
 * Run alone: `npx tsx bench/lib/cpuprofile.ts FILE.cpuprofile [top]` prints the summary with the
 * study report's phases as JSON.
 */
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"

interface Node {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly children?: ReadonlyArray<number>
}

interface Profile {
  readonly nodes: ReadonlyArray<Node>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
  readonly startTime: number
  readonly endTime: number
}

/** The summary of a profile: total sampled ms, ms per phase, and the top functions by self time. */
export interface ProfileSummary {
  readonly totalMs: number
  readonly phases: Readonly<Record<string, number>>
  readonly top: ReadonlyArray<{ readonly fn: string; readonly selfMs: number }>
}

/**
 * The phases of `assay study report` by the functions that do their work (see the module docs).
 * Order matters only for a sample with markers of two phases on its stack: the nearest wins.
 */
export const STUDY_REPORT_PHASES: Readonly<Record<string, ReadonlyArray<string>>> = {
  "bootstrap.reduced": ["bootstrapReduced", "statOf", "weightedQuantile"],
  "bootstrap.shared": ["sharedBootstrap", "multisetMean"],
  "bootstrap.single": ["bootstrapMean", "pairedBootstrap"],
  "matrices": ["caseMatrix", "pack", "pairedCaseDiffs"],
  "pareto": ["pairSample", "paretoFront", "paretoFrontUncertain", "front", "weightedRanking", "dominatesGood", "separated"],
  "render": ["sectionsOf", "renderText", "renderMarkdown", "stringify", "versusText"],
  "read.outputs": ["readOutputs", "loadBundles", "outputValue", "decodePayload"],
  "read.values": ["valuesOf", "casesOf", "quantile7", "reduce"],
  "read.stream": ["push", "positionOf", "caseKeyOf", "memberDigestOf", "streamPipelines", "streamAttempts"]
}

/**
 * Summarizes a profile (see the module docs).
 *
 * @param file a `.cpuprofile`
 * @param phases phase name → marker function names
 * @param top how many functions to list by self time
 */
export const summarize = (file: string, phases: Readonly<Record<string, ReadonlyArray<string>>> = STUDY_REPORT_PHASES, top = 20): ProfileSummary => {
  const p = JSON.parse(fs.readFileSync(file, "utf8")) as Profile
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const marker = new Map<string, string>()
  for (const [phase, fns] of Object.entries(phases)) for (const f of fns) if (!marker.has(f)) marker.set(f, phase)
  const phaseOf = new Map<number, string>()
  const phaseOfNode = (id: number): string => {
    const known = phaseOf.get(id)
    if (known !== undefined) return known
    const n = byId.get(id)!
    const name = n.callFrame.functionName
    const own = name === "(garbage collector)" ? "gc" : marker.get(name)
    const up = parent.get(id)
    const phase = own ?? (up === undefined ? "other" : phaseOfNode(up))
    phaseOf.set(id, phase)
    return phase
  }
  const self = new Map<number, number>()
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i]!
    self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0))
  }
  const out: Record<string, number> = {}
  const fnSelf = new Map<string, number>()
  let total = 0
  for (const [id, us] of self) {
    total += us
    const ph = phaseOfNode(id)
    out[ph] = (out[ph] ?? 0) + us
    const n = byId.get(id)!
    const key = `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.split("/").slice(-2).join("/")}:${n.callFrame.lineNumber + 1}`
    fnSelf.set(key, (fnSelf.get(key) ?? 0) + us)
  }
  const ms = (us: number) => Math.round(us / 1000)
  return {
    totalMs: ms(total),
    phases: Object.fromEntries(Object.entries(out).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, ms(v)])),
    top: [...fnSelf].sort((a, b) => b[1] - a[1]).slice(0, top).map(([fn, us]) => ({ fn, selfMs: ms(us) }))
  }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  console.log(JSON.stringify(summarize(process.argv[2]!, STUDY_REPORT_PHASES, Number(process.argv[3] ?? 20)), null, 1))
}
