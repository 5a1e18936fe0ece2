/**
 * A validator that sends a draft back to the generator: `generate → validate → report`, where
 * `validate` refuses a draft that is not JSON and rewinds `generate` with an earlier state of
 * the work (a `HistoryArtifact` snapshot, restored and given feedback and a warmer
 * temperature). The generator runs again as visit 1; the store keeps both drafts, the ledger
 * row of the rewind, and the budget spent.
 *
 *   npx tsx examples/control/rewind.ts [store.db]
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Effect, Layer, Option } from "effect"
import { Codec, Handoff, HistoryArtifact, NodeMain, Pipeline, Pool, Runner, SqliteStore, Store, Task } from "assay"

// The payload the generator and the validator pass around: the current state of the work and
// the named snapshots taken along the way.
class Draft extends HistoryArtifact.Class<Draft>("examples/Draft") {}

interface Work {
  readonly id: number
  readonly prompt: string
  readonly temperature: number
  readonly feedback?: string
}

/** A stand-in for a model call: too cold a temperature gives prose instead of JSON for odd ids. */
const complete = (work: Work): string =>
  work.temperature < 0.5 && work.id % 2 === 1 ? `Sure! Here is ${work.id}` : JSON.stringify({ id: work.id, prime: isPrime(work.id) })

const isPrime = (n: number) => n > 1 && Array.from({ length: n - 2 }, (_, i) => i + 2).every((d) => n % d !== 0)

// visit 0 receives the row; a revisit receives the Draft the validator sent back
const generate = Task.sync("generate", (input: { readonly id: number } | Draft, ctx): Draft => {
  const start = input instanceof Draft
    ? input
    : new Draft({ state: { id: input.id, prompt: `Is ${input.id} prime? Answer in JSON.`, temperature: 0.2 } })
  const before = start.checkpoint(`before-${ctx.visit}`)
  const answer = complete(before.stateObject() as unknown as Work)
  return before.withState({ ...before.stateObject(), answer, visit: ctx.visit }).checkpoint(`after-${ctx.visit}`)
})

const validate = Task.sync("validate", (draft: Draft) => {
  const state = draft.stateObject()
  try {
    JSON.parse(String(state.answer))
    return draft
  } catch {
    // send back the state as it was before this generation, with feedback
    const earlier = draft.restore(`before-${String(state.visit)}`)
    return Handoff.rewind(
      "generate",
      earlier.withState({ ...earlier.stateObject(), temperature: 0.8, feedback: "answer in JSON only" }),
      { reason: "answer is not JSON" }
    )
  }
})

const report = Task.sync("report", (draft: Draft) => ({
  id: draft.stateObject().id,
  answer: JSON.parse(String(draft.stateObject().answer)) as unknown,
  generations: draft.history.filter((s) => s.label.startsWith("after-")).length
}))

const template = Pipeline.make("rewind-example", generate, validate, report, {
  control: { rewind: { validate: ["generate"] }, maxHandoffs: 2 }
})

const program = Effect.gen(function*() {
  const specs = template.map([1, 2, 3, 4, 5, 6].map((id) => ({ id })))
  const results: Array<unknown> = []
  const run = yield* Runner.run(specs, {
    onPipelineFinished: (_record, output) => Effect.sync(() => results.push(Option.getOrNull(output)))
  })
  const store = yield* Store.Store
  for (const h of yield* store.traversal!.handoffs()) {
    console.log(`handoff ${h.pipelineId}: ${h.fromTask} -${h.operation}-> ${h.toTask} (${h.reason}), entry ${h.entryArtifactId}`)
  }
  for (const r of results.sort((a: any, b: any) => a.id - b.id)) console.log(`result ${JSON.stringify(r)}`)
  console.log(run.summary())
  return run
})

const file = process.argv[2] ?? "runs/rewind.db"
// the Draft class gets its versioned codec in the registry the runner checkpoints with
const registry = HistoryArtifact.register(Codec.CodecRegistry.default(), Draft)
const MainLive = Runner.layer({ registry }).pipe(
  Layer.provideMerge(Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]), NodeContext.layer))
)

// exit codes 0 / 1 / 2, and 130 on Ctrl-C (the run is recorded interrupted: run again to resume)
NodeMain.runMain(program.pipe(Effect.provide(MainLive)))
