/**
 * Study benchmark (run: `npx tsx bench/study.ts`; prints JSON lines).
 *
 * In one process, BENCH_ROUNDS interleaved rounds (default 2), best round of each, wall and
 * CPU time (`process.cpuUsage`, since the machine may be shared):
 * - `plain`: the study's 20,000 pipelines (3 trivial tasks) as one experiment (`Runner.run` on
 *   an SqliteStore file), concurrency 64;
 * - `study`: a study of 20 variants × 5 repeats = 100 trials × 200 cases = the same 20,000
 *   pipelines (`Study.run` on a `SuiteStore` combined root: protocol freeze, 100 trial rows,
 *   the trials' suite under the study's control — trial window of 3, usage meters, ledger
 *   writes — then the settlement of every trial and of the study), same concurrency.
 * Keys: `ratio` = pipelines/s of the study / of `plain` (target ≥ 0.8), `cpu_ratio` the same
 * with CPU time, `settle_ms` the part of the study's wall time after its suite ended (reading
 * every trial's pipelines and metrics, writing 100 settlements), `load` the 1-minute load
 * average before each case.
 *
 * Environment: BENCH_VARIANTS (20), BENCH_REPEATS (5), BENCH_CASES (200), BENCH_ROUNDS (2),
 * BENCH_TRIAL_CONCURRENCY (the study's trials at once; default the study default, 3),
 * BENCH_ONLY=study (only the study case, one line per round: a diagnostic), BENCH_CONTROL=none
 * (the study without its control: no window, meters or ledger; a diagnostic).
 */
import { NodeContext, NodeFileSystem } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import type { Json } from "../src/domain/Json.js"
import * as Pipeline from "../src/domain/Pipeline.js"
import * as Task from "../src/domain/Task.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as SuiteStore from "../src/layers/SuiteStore.js"
import * as Pool from "../src/services/Pool.js"
import * as Runner from "../src/services/Runner.js"
import type { Store } from "../src/services/Store.js"
import * as Study from "../src/services/Study.js"
import * as Suite from "../src/services/Suite.js"

const VARIANTS = Number(process.env.BENCH_VARIANTS ?? 20)
const REPEATS = Number(process.env.BENCH_REPEATS ?? 5)
const CASES = Number(process.env.BENCH_CASES ?? 200)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2)
const TRIAL_CONCURRENCY = process.env.BENCH_TRIAL_CONCURRENCY === undefined ? undefined : Number(process.env.BENCH_TRIAL_CONCURRENCY)
const N = VARIANTS * REPEATS * CASES
const CONCURRENCY = 64
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-study-"))
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const load = () => Number(os.loadavg()[0]!.toFixed(2))

// The same three trivial steps as bench/runner.ts and bench/suite.ts.
const f1 = (row: { readonly i: number }) => ({ i: row.i, text: "lorem ipsum dolor sit amet" })
const f2 = (r: { readonly i: number; readonly text: string }) => ({ ...r, n: r.text.length * r.i })
const f3 = (r: { readonly i: number; readonly n: number }) => ({ i: r.i, score: r.n % 97 })
const plain = Pipeline.make("bench", Task.sync("t0", f1), Task.sync("t1", f2), Task.sync("t2", f3))

function* seeds(from: number, n: number) {
  for (let i = from; i < from + n; i++) yield { i }
}

interface Timing {
  readonly ms: number
  readonly cpuMs: number
  readonly settleMs?: number
  readonly load: number
}

const timed = <E>(self: Effect.Effect<number | undefined, E>): Effect.Effect<Timing, E> =>
  Effect.suspend(() => {
    const before = load()
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    return Effect.map(self, (settleStart) => {
      const c = process.cpuUsage(c0)
      const end = performance.now()
      return {
        ms: end - t0,
        cpuMs: (c.user + c.system) / 1000,
        load: before,
        ...(settleStart === undefined ? {} : { settleMs: end - settleStart })
      }
    })
  })

const best = (xs: ReadonlyArray<Timing>) => {
  const i = xs.reduce((b, x, k) => (x.ms < xs[b]!.ms ? k : b), 0)
  return { ...xs[i]!, cpuMs: Math.min(...xs.map((x) => x.cpuMs)), loads: xs.map((x) => x.load) }
}

const runnerOver = <E>(store: Layer.Layer<Store, E>) =>
  Runner.layer({ concurrency: CONCURRENCY, handleSignals: false }).pipe(
    Layer.provideMerge(Layer.mergeAll(store, Pool.layer([]), NodeContext.layer))
  )

/** The 20,000 pipelines as one experiment. */
const single = (round: number) =>
  Effect.gen(function*() {
    const report = yield* Runner.run(plain.map(seeds(0, N)))
    if (report.stats.byState.succeeded !== N) throw new Error(`plain: ${report.summary()}`)
    return undefined
  }).pipe(Effect.provide(runnerOver(SqliteStore.layer({ filename: nodePath.join(dir, `plain-${round}.db`) }))))

/** The same pipelines as a study: VARIANTS × REPEATS trials of CASES cases each. */
const study = (round: number) => {
  const root = nodePath.join(dir, `study-${round}`)
  const id = "bench-study"
  const variants: ReadonlyArray<Study.StudyVariant> = Array.from({ length: VARIANTS }, (_, v) => ({
    id: `v${String(v + 1).padStart(2, "0")}`,
    assignment: { k: v },
    key: JSON.stringify({ k: v }),
    digest: `d${v}`,
    isBaseline: v === 0
  }))
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> =>
    variants.flatMap((variant) =>
      Array.from({ length: REPEATS }, (_, r) => ({ trialId: `p${version}-${variant.id}-r${r + 1}`, variant, repeat: r + 1 }))
    )
  const input: Study.StudyInput = {
    id,
    question: "bench",
    type: "compare",
    objectives: [],
    stop: [{ when: "allTrialsTerminal" }],
    protocolDigest: "bench-v1",
    protocolParts: { experiment: "bench" },
    describe: (): Json => ({ bench: true }),
    ...(TRIAL_CONCURRENCY === undefined ? {} : { trialConcurrency: TRIAL_CONCURRENCY }),
    trialsFor,
    suiteFor: (version) => ({
      _tag: "Suite",
      id,
      outputRoot: root,
      layout: "combined",
      pools: [],
      experiments: trialsFor(version).map((t, k) =>
        Suite.member(t.trialId, () => plain.map(seeds(k * CASES, CASES)), { definitionDigest: "bench-v1" })
      )
    })
  }
  const store = SuiteStore.layer({ root, suiteId: id, layout: "combined", members: [] }).pipe(Layer.provide(NodeFileSystem.layer))
  return Effect.gen(function*() {
    const report = yield* Study.run(input, process.env.BENCH_CONTROL === "none" ? { control: Study.noControl } : {})
    if (report.status !== "completed" || report.eligible.length !== VARIANTS * REPEATS) {
      throw new Error(`study: ${report.summary().slice(0, 2000)}`)
    }
    // the settlement started when the trials' run ended (epoch ms, both on the real clock)
    const runEnd = report.run!.startedAt + report.run!.durationMs
    return performance.now() - (Date.now() - runEnd)
  }).pipe(Effect.provide(
    Runner.layer({ concurrency: CONCURRENCY, handleSignals: false }).pipe(
      Layer.provideMerge(Layer.mergeAll(store, Pool.layer([]), NodeContext.layer))
    )
  ))
}

const main = Effect.gen(function*() {
  const plainT: Array<Timing> = []
  const studyT: Array<Timing> = []
  if (process.env.BENCH_ONLY === "study") {
    for (let round = 0; round < ROUNDS; round++) {
      const t = yield* timed(study(round))
      emit({ bench: "study.study_only", round, ms: Math.round(t.ms), cpu_ms: Math.round(t.cpuMs), settle_ms: Math.round(t.settleMs ?? 0), load: t.load })
    }
    return
  }
  for (let round = 0; round < ROUNDS; round++) {
    // alternate which case goes first
    if (round % 2 === 0) {
      plainT.push(yield* timed(single(round)))
      studyT.push(yield* timed(study(round)))
    } else {
      studyT.push(yield* timed(study(round)))
      plainT.push(yield* timed(single(round)))
    }
  }
  const p = best(plainT)
  const s = best(studyT)
  emit({ bench: "study.plain", pipelines: N, ms: Math.round(p.ms), cpu_ms: Math.round(p.cpuMs), pipelines_per_s: Math.round(N / (p.ms / 1000)), load: p.loads })
  emit({
    bench: "study.study",
    pipelines: N,
    trials: VARIANTS * REPEATS,
    ms: Math.round(s.ms),
    cpu_ms: Math.round(s.cpuMs),
    settle_ms: s.settleMs === undefined ? null : Math.round(s.settleMs),
    pipelines_per_s: Math.round(N / (s.ms / 1000)),
    ratio: Number((p.ms / s.ms).toFixed(3)),
    cpu_ratio: Number((p.cpuMs / s.cpuMs).toFixed(3)),
    target: 0.8,
    load: s.loads
  })
})

Effect.runPromise(main).finally(() => fs.rmSync(dir, { recursive: true, force: true }))
