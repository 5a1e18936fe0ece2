/**
 * Quickstart: 200 rows through a three-step pipeline whose middle step calls a (simulated)
 * LLM through a pool of two endpoints, checkpointed in SQLite. Run it twice: the second run
 * skips everything that already succeeded.
 *
 *   npx tsx examples/runner/quickstart.ts [store.db]
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Effect, Layer } from "effect"
import { Mock, Pipeline, Pool, Resource, Runner, SqliteStore, Task } from "assay"

// 1. Tasks: plain functions, Effects, or the built-ins.
const prepare = Task.sync("prepare", (row: { readonly id: number }) => ({ id: row.id, prompt: `Is ${row.id} prime?` }))
const ask = Mock.simulateLlm<{ readonly id: number; readonly prompt: string }>({
  resource: "llm",
  latency: "20 millis",
  failRate: 0.1,
  errorClass: "rate_limit"
}).pipe(Task.withRetry({ maxAttempts: 4, base: "50 millis" }))
const judge = Task.sync("judge", (out: { readonly input: { readonly id: number }; readonly resourceId: string }) => ({
  id: out.input.id,
  servedBy: out.resourceId
}))

// 2. The pipeline: the compiler checks that each step accepts the previous one's output.
const template = Pipeline.make("quickstart", prepare, ask, judge)

// 3. The run: rows from any iterable, async iterable or Stream.
const program = Effect.gen(function*() {
  const rows = Array.from({ length: 200 }, (_, id) => ({ id }))
  const report = yield* Runner.run(template.map(rows))
  yield* Effect.sync(() => console.log(report.summary()))
  return report
})

// 4. Layers choose the store and the pools; a test swaps them without touching the program.
const store = process.argv[2] ?? "runs/quickstart.db"
const pools = Pool.layer([
  Pool.make("llm", [
    Resource.make("llm", { id: "endpoint-a", capacity: 4 }),
    Resource.make("llm", { id: "endpoint-b", capacity: 2 })
  ])
])
const MainLive = Runner.layer({ concurrency: 8 }).pipe(
  Layer.provideMerge(Layer.mergeAll(SqliteStore.layer({ filename: store }), pools, NodeContext.layer))
)

Effect.runPromise(program.pipe(Effect.provide(MainLive))).then(
  (report) => process.exit(report.stats.byState.failed > 0 ? 1 : 0),
  (error) => {
    console.error(String(error))
    process.exit(2)
  }
)
