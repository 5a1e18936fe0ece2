/**
 * Statistics benchmark (run: `npx tsx bench/statistics.ts`; prints JSON lines).
 *
 * Times the two bootstraps of `src/domain/Statistics.ts` at the sizes a study report needs,
 * wall and CPU time (`process.cpuUsage`: the machine may be shared), best of BENCH_ROUNDS:
 * - `bootstrapMean` / `pairedBootstrap`: 10,000 resamples over 1,000 cases × 5 repeats, on
 *   continuous values (every case varies across its repeats: the inner stage always resamples)
 *   and on binary values (0/1 per repeat, 80 % of the cases constant across repeats, like an
 *   accuracy metric of a mostly deterministic model);
 * - each with `stages` two-stage (`casesAndRepeats`, the default) and one-stage (`cases`: each
 *   drawn case keeps its repeats);
 * - `variants`: a report's worth, BENCH_VARIANTS variants (default 200) of one metric — one
 *   `bootstrapMean` per variant and one `pairedBootstrap` per variant against the first, for
 *   each of BENCH_VARIANT_STAGES (default `casesAndRepeats,cases`); the line gives the total and
 *   the CPU time per variant;
 * - `pcg_reference`: 10M `Utils.PCGRandom.number()` calls, the machine's speed for the random
 *   draws every bootstrap is built on (about one per two cases per resample, see the module).
 * Keys: `ms` wall, `cpu_ms` CPU, `load` the 1-minute load average before the case.
 *
 * Environment: BENCH_CASES (1000), BENCH_REPEATS (5), BENCH_RESAMPLES (10000), BENCH_VARIANTS
 * (200), BENCH_VARIANT_STAGES (casesAndRepeats,cases), BENCH_ROUNDS (3).
 */
import { Utils } from "effect"
import * as os from "node:os"
import { performance } from "node:perf_hooks"
import * as Statistics from "../src/domain/Statistics.js"

const CASES = Number(process.env.BENCH_CASES ?? 1000)
const REPEATS = Number(process.env.BENCH_REPEATS ?? 5)
const RESAMPLES = Number(process.env.BENCH_RESAMPLES ?? 10_000)
const VARIANTS = Number(process.env.BENCH_VARIANTS ?? 200)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
type Stages = "cases" | "casesAndRepeats"
const VARIANT_STAGES = (process.env.BENCH_VARIANT_STAGES ?? "casesAndRepeats,cases").split(",").filter((x) => x !== "") as Array<Stages>

const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const load = () => Number(os.loadavg()[0]!.toFixed(2))

interface Timing {
  readonly ms: number
  readonly cpuMs: number
  readonly load: number
}

const time = (f: () => void): Timing => {
  const before = load()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  f()
  const c = process.cpuUsage(c0)
  return { ms: performance.now() - t0, cpuMs: (c.user + c.system) / 1000, load: before }
}

const best = (f: () => void): Timing => {
  let out: Timing | undefined
  for (let i = 0; i < ROUNDS; i++) {
    const t = time(f)
    if (out === undefined || t.cpuMs < out.cpuMs) out = t
  }
  return out!
}

const round = (x: number) => Math.round(x * 10) / 10

const rng = new Utils.PCGRandom(2026)
const continuous = (shift: number) =>
  Array.from({ length: CASES }, () => {
    const base = rng.number()
    return Array.from({ length: REPEATS }, () => base + 0.5 * rng.number() + shift)
  })
const binary = (p: number) =>
  Array.from({ length: CASES }, () => {
    if (rng.number() < 0.8) {
      const v = rng.number() < p ? 1 : 0
      return Array.from({ length: REPEATS }, () => v)
    }
    return Array.from({ length: REPEATS }, () => (rng.number() < 0.5 ? 1 : 0))
  })

const size = { cases: CASES, repeats: REPEATS, resamples: RESAMPLES }
const sets = [["continuous", continuous(0), continuous(0.02)], ["binary", binary(0.7), binary(0.75)]] as const

for (const stages of ["casesAndRepeats", "cases"] as const) {
  const options = { seed: 7, resamples: RESAMPLES, stages }
  for (const [data, base, cand] of sets) {
    const m = best(() => void Statistics.bootstrapMean(base, options))
    emit({ case: "bootstrapMean", data, stages, ...size, ms: round(m.ms), cpu_ms: round(m.cpuMs), load: m.load })
    const p = best(() => void Statistics.pairedBootstrap(base, cand, options))
    emit({ case: "pairedBootstrap", data, stages, ...size, ms: round(p.ms), cpu_ms: round(p.cpuMs), load: p.load })
  }
}

const variants = Array.from({ length: VARIANTS }, (_, v) => continuous(v * 0.0001))
for (const stages of VARIANT_STAGES) {
  const options = { seed: 7, resamples: RESAMPLES, stages }
  const t = time(() => {
    for (let v = 0; v < VARIANTS; v++) {
      Statistics.bootstrapMean(variants[v]!, options)
      if (v > 0) Statistics.pairedBootstrap(variants[0]!, variants[v]!, options)
    }
  })
  emit({
    case: "variants",
    data: "continuous",
    stages,
    variants: VARIANTS,
    ...size,
    ms: round(t.ms),
    cpu_ms: round(t.cpuMs),
    cpu_ms_per_variant: round(t.cpuMs / VARIANTS),
    load: t.load
  })
}

{
  const r = new Utils.PCGRandom(1)
  let sink = 0
  const t = best(() => {
    for (let i = 0; i < 10_000_000; i++) sink += r.number()
  })
  emit({ case: "pcg_reference", calls: 10_000_000, ms: round(t.ms), cpu_ms: round(t.cpuMs), load: t.load, sink: sink > 0 })
}
