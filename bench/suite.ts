/**
 * Suite benchmark (run: `npx tsx bench/suite.ts`; prints JSON lines).
 *
 * 1. Throughput, in one process, BENCH_ROUNDS interleaved rounds (default 2), best round of
 *    each, wall and CPU time (`process.cpuUsage`, since the machine may be shared):
 *    - `single`: 20,000 pipelines of 3 trivial tasks as one experiment (`Runner.run` on an
 *      SqliteStore file), concurrency 64;
 *    - `combined`, `byExperiment`: the same 20,000 pipelines as a suite of 4 members × 5,000
 *      (`Suite.run` on a `SuiteStore` root of that layout), same concurrency.
 *    Keys: `ratio` = pipelines/s of the suite / of `single` (targets: ≥ 0.8 combined, ≥ 0.6
 *    byExperiment), `cpu_ratio` the same with CPU time.
 * 2. Queries: the latest 100 events across the 8 member databases of a `byExperiment` root
 *    (100,000 events each, read through `SuiteStore.makeRead`) against one SqliteStore file of
 *    100,000 events (read-only), warm, BENCH_QUERY_REPEATS times each (default 200). Key:
 *    `latest100_ratio` = CPU time per query of the suite / of the one database (target ≤ 3).
 *
 * Environment: BENCH_PIPELINES (20000, split over 4 members), BENCH_ROUNDS (2),
 * BENCH_EVENTS (100000 per database), BENCH_QUERY_REPEATS (200), BENCH_CASES (a comma-separated
 * subset of throughput, queries; default both), BENCH_MEMBERS (4), BENCH_LAYOUTS (a comma-separated
 * subset of combined, byExperiment; default both; `single` always runs, as the reference).
 */
import { NodeContext, NodeFileSystem } from "@effect/platform-node"
import Database from "better-sqlite3"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import type { RunId } from "../src/domain/Ids.js"
import * as Pipeline from "../src/domain/Pipeline.js"
import type { SuiteLayout } from "../src/domain/Suite.js"
import * as Task from "../src/domain/Task.js"
import * as ArtifactBackends from "../src/layers/ArtifactBackends.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as SuiteStore from "../src/layers/SuiteStore.js"
import * as Pool from "../src/services/Pool.js"
import * as Runner from "../src/services/Runner.js"
import { Store } from "../src/services/Store.js"
import * as Suite from "../src/services/Suite.js"

const N = Number(process.env.BENCH_PIPELINES ?? 20_000)
const MEMBERS = Number(process.env.BENCH_MEMBERS ?? 4)
const PER_MEMBER = Math.floor(N / MEMBERS)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2)
const EVENTS = Number(process.env.BENCH_EVENTS ?? 100_000)
const REPEATS = Number(process.env.BENCH_QUERY_REPEATS ?? 200)
const QUERY_DBS = 8
const CONCURRENCY = 64
const CASES = process.env.BENCH_CASES === undefined || process.env.BENCH_CASES.trim() === ""
  ? undefined
  : new Set(process.env.BENCH_CASES.split(",").map((c) => c.trim()))
const runs = (name: string) => CASES === undefined || CASES.has(name)
const LAYOUTS: ReadonlyArray<SuiteLayout> = process.env.BENCH_LAYOUTS === undefined || process.env.BENCH_LAYOUTS.trim() === ""
  ? ["combined", "byExperiment"]
  : process.env.BENCH_LAYOUTS.split(",").map((c) => c.trim() as SuiteLayout)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-suite-"))
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))

// The same three trivial steps as bench/runner.ts.
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
}

/** Wall and CPU time of `self`. */
const timed = <A, E>(self: Effect.Effect<A, E>): Effect.Effect<Timing, E> =>
  Effect.suspend(() => {
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    return Effect.map(self, () => {
      const c = process.cpuUsage(c0)
      return { ms: performance.now() - t0, cpuMs: (c.user + c.system) / 1000 }
    })
  })

const best = (xs: ReadonlyArray<Timing>): Timing => ({
  ms: Math.min(...xs.map((x) => x.ms)),
  cpuMs: Math.min(...xs.map((x) => x.cpuMs))
})

const runnerOver = <E>(store: Layer.Layer<Store, E>) =>
  Runner.layer({ concurrency: CONCURRENCY, handleSignals: false }).pipe(
    Layer.provideMerge(Layer.mergeAll(store, Pool.layer([]), NodeContext.layer))
  )

/** 20,000 pipelines as one experiment. */
const single = (round: number) =>
  Effect.gen(function*() {
    const report = yield* Runner.run(plain.map(seeds(0, MEMBERS * PER_MEMBER)))
    if (report.stats.byState.succeeded !== MEMBERS * PER_MEMBER) throw new Error(`single: ${report.summary()}`)
  }).pipe(Effect.provide(runnerOver(SqliteStore.layer({ filename: nodePath.join(dir, `single-${round}.db`) }))))

/** The same pipelines as 4 members of a suite. */
const suiteRun = (layout: SuiteLayout, round: number) => {
  const root = nodePath.join(dir, `${layout}-${round}`)
  const ids = Array.from({ length: MEMBERS }, (_, k) => `m${k}`)
  const store = SuiteStore.layer({ root, suiteId: "bench", layout, members: ids }).pipe(Layer.provide(NodeFileSystem.layer))
  return Effect.gen(function*() {
    const suite = yield* Suite.make({
      id: "bench",
      outputRoot: root,
      layout,
      experiments: ids.map((id, k) =>
        Suite.member(id, () => plain.map(seeds(k * PER_MEMBER, PER_MEMBER)), { definitionDigest: "bench-v1" })
      )
    })
    const report = yield* Suite.run(suite)
    if (report.run.stats.byState.succeeded !== MEMBERS * PER_MEMBER) throw new Error(`${layout}: ${report.summary()}`)
  }).pipe(Effect.provide(
    Runner.layer({ concurrency: CONCURRENCY, handleSignals: false }).pipe(
      Layer.provideMerge(Layer.mergeAll(store, Pool.layer([]), NodeContext.layer))
    )
  ))
}

const throughput = Effect.gen(function*() {
  const results: Record<string, Array<Timing>> = { single: [], combined: [], byExperiment: [] }
  for (let round = 0; round < ROUNDS; round++) {
    results.single!.push(yield* timed(single(round)))
    for (const layout of LAYOUTS) results[layout]!.push(yield* timed(suiteRun(layout, round)))
  }
  const n = MEMBERS * PER_MEMBER
  const s = best(results.single!)
  emit({ bench: "suite.single", pipelines: n, ms: Math.round(s.ms), cpu_ms: Math.round(s.cpuMs), pipelines_per_s: Math.round(n / (s.ms / 1000)) })
  for (const layout of LAYOUTS) {
    const x = best(results[layout]!)
    emit({
      bench: `suite.${layout}`,
      pipelines: n,
      members: MEMBERS,
      ms: Math.round(x.ms),
      cpu_ms: Math.round(x.cpuMs),
      pipelines_per_s: Math.round(n / (x.ms / 1000)),
      ratio: Number((s.ms / x.ms).toFixed(3)),
      cpu_ratio: Number((s.cpuMs / x.cpuMs).toFixed(3)),
      target: layout === "combined" ? 0.8 : 0.6
    })
  }
})

/** Appends `n` events with increasing, slightly shuffled timestamps to a store file. */
const fillEvents = (file: string, n: number, salt: number) => {
  const db = new Database(file)
  try {
    const ins = db.prepare("INSERT INTO events (kind, pno, pipeline_id, run_id, data, ts) VALUES (?, NULL, NULL, ?, ?, ?)")
    db.transaction(() => {
      for (let i = 0; i < n; i++) {
        ins.run(i % 3 === 0 ? "task.end" : "attempt", "r1", JSON.stringify({ i, salt }), 1_000_000 + i * 10 + ((i * 7 + salt) % 13))
      }
    })()
  } finally {
    db.close()
  }
}

/** The query comparison (see the module docs). */
const queryBench = Effect.gen(function*() {
  const one = nodePath.join(dir, "events-one.db")
  yield* Effect.scoped(Effect.gen(function*() {
    const s = yield* Store
    yield* s.openRun({ runId: "r1" as RunId, startedAt: 1 })
  })).pipe(Effect.provide(SqliteStore.layer({ filename: one })))
  fillEvents(one, EVENTS, 0)

  const root = nodePath.join(dir, "events-suite")
  const ids = Array.from({ length: QUERY_DBS }, (_, k) => `m${k}`)
  yield* Effect.scoped(Effect.gen(function*() {
    const h = yield* SuiteStore.make({ root, suiteId: "events", layout: "byExperiment", members: ids })
    yield* h.store.openRun({ runId: "r1" as RunId, startedAt: 1 })
    yield* h.store.finishRun("r1" as RunId, { status: "completed", endedAt: 2 })
  })).pipe(Effect.provide(NodeFileSystem.layer))
  ids.forEach((id, k) => fillEvents(nodePath.join(root, "experiments", id, "state.db"), EVENTS, k + 1))

  const oneTiming = yield* Effect.scoped(Effect.gen(function*() {
    const s = yield* SqliteStore.make({ filename: one, readonly: true }).pipe(Effect.provide(ArtifactBackends.layerInline))
    yield* s.events({ limit: 100 })
    return yield* timed(Effect.repeatN(Effect.flatMap(s.events({ limit: 100 }), (es) =>
      es.length === 100 ? Effect.void : Effect.die(`got ${es.length}`)), REPEATS - 1))
  }))
  const suiteTiming = yield* Effect.scoped(Effect.gen(function*() {
    const h = yield* SuiteStore.makeRead(root)
    yield* h.store.events({ limit: 100 })
    return yield* timed(Effect.repeatN(Effect.flatMap(h.store.events({ limit: 100 }), (es) =>
      es.length === 100 ? Effect.void : Effect.die(`got ${es.length}`)), REPEATS - 1))
  })).pipe(Effect.provide(NodeFileSystem.layer))
  const perQuery = (t: Timing) => ({ ms: t.ms / REPEATS, cpuMs: t.cpuMs / REPEATS })
  const a = perQuery(oneTiming), b = perQuery(suiteTiming)
  emit({ bench: "suite.latest100.one_db", events: EVENTS, us_per_query: Math.round(a.ms * 1000), cpu_us_per_query: Math.round(a.cpuMs * 1000) })
  emit({
    bench: "suite.latest100.merged",
    databases: QUERY_DBS,
    events_per_db: EVENTS,
    us_per_query: Math.round(b.ms * 1000),
    cpu_us_per_query: Math.round(b.cpuMs * 1000),
    latest100_ratio: Number((b.cpuMs / a.cpuMs).toFixed(3)),
    latest100_wall_ratio: Number((b.ms / a.ms).toFixed(3)),
    target: 3
  })
})

const main = Effect.gen(function*() {
  if (runs("throughput")) yield* throughput
  if (runs("queries")) yield* queryBench
})

Effect.runPromise(main).then(
  () => fs.rmSync(dir, { recursive: true, force: true }),
  (e) => {
    console.error(e)
    process.exitCode = 1
  }
)
