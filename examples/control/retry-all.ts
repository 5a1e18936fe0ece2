/**
 * Starting over from the seed: `fetchContext → answer → check`, where `check` finds that the
 * answer was built on stale context and returns `Handoff.retryAll()`. The pipeline runs again
 * from seq 0 on the seed bytes captured at binding, every station as a new visit (`ctx.visit`
 * 1), within a budget of one transition. The visit counters, the budget spent and the ledger
 * are read back from the store.
 *
 *   npx tsx examples/control/retry-all.ts [store.db]
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Effect, Layer, Option } from "effect"
import { Handoff, NodeMain, Pipeline, Pool, Runner, SqliteStore, Store, Task } from "assay"

interface Question {
  readonly id: number
}

// A stand-in for a cache that serves a stale entry the first time for every third question.
const fetchContext = Task.sync("fetchContext", (q: Question, ctx) => ({
  id: q.id,
  context: ctx.visit === 0 && q.id % 3 === 0 ? "stale" : "fresh",
  visit: ctx.visit
}))

const answer = Task.sync("answer", (c: { readonly id: number; readonly context: string; readonly visit: number }) => ({
  ...c,
  answer: `${c.id * c.id} (from ${c.context} context)`
}))

const check = Task.sync("check", (a: { readonly id: number; readonly context: string; readonly answer: string; readonly visit: number }) =>
  a.context === "stale"
    ? Handoff.retryAll({ reason: "answer built on stale context" })
    : { id: a.id, answer: a.answer, visit: a.visit })

const template = Pipeline.make("retry-all-example", fetchContext, answer, check, {
  control: { retryAll: ["check"], maxHandoffs: 1 }
})

const program = Effect.gen(function*() {
  const specs = [1, 2, 3, 4, 5, 6].map((id) => template.bind({ id }))
  const results: Array<unknown> = []
  const run = yield* Runner.run(specs, {
    onPipelineFinished: (_record, output) => Effect.sync(() => results.push(Option.getOrNull(output)))
  })
  const store = yield* Store.Store
  for (const spec of specs) {
    const state = Option.getOrThrow(yield* store.traversal!.visitState(spec.pipelineId))
    const ledger = yield* store.traversal!.handoffs({ pipelineId: spec.pipelineId })
    console.log(
      `pipeline ${spec.pipelineId}: counters ${JSON.stringify(state.counters)}, handoffs ${state.handoffs}, ledger ${
        ledger.map((h) => `${h.fromTask} -${h.operation}-> ${h.toTask} (${h.reason})`).join("; ") || "-"
      }`
    )
  }
  for (const r of results.sort((a: any, b: any) => a.id - b.id)) console.log(`result ${JSON.stringify(r)}`)
  console.log(run.summary())
  return run
})

const file = process.argv[2] ?? "runs/retry-all.db"
const MainLive = Runner.layer({}).pipe(
  Layer.provideMerge(Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]), NodeContext.layer))
)

// exit codes 0 / 1 / 2, and 130 on Ctrl-C (the run is recorded interrupted: run again to resume)
NodeMain.runMain(program.pipe(Effect.provide(MainLive)))
