/**
 * Requirements flow through types: a task that needs a `Scorer` service makes the run need it
 * too, so the program provides a real layer and a test drops in a fake, without touching the
 * experiment. `test/examples/runner.test.ts` runs `program` with a scripted fake.
 *
 *   npx tsx examples/runner/requirements.ts
 */
import { Context, Effect, Layer } from "effect"
import { MemoryStore, Pipeline, Pool, Runner, Task } from "assay"

/** A service the experiment depends on: here, something that scores an answer. */
export class Scorer extends Context.Tag("example/Scorer")<Scorer, {
  readonly score: (answer: string) => Effect.Effect<number>
}>() {}

/** The live implementation (in real life: an HTTP client, a model, a judge). */
export const ScorerLive = Layer.succeed(Scorer, {
  score: (answer) => Effect.succeed(answer.length % 10 / 10)
})

const answer = Task.sync("answer", (q: string) => `the answer to ${q}`)
const score = Task.make("score", (a: string) => Effect.flatMap(Scorer, (s) => s.score(a)))

/** The experiment. Its type says it needs `Scorer` (and the runner). */
export const program = Runner.run(Pipeline.make("scored", answer, score).map(["life", "the universe", "everything"]))

/** The runner's own services: an in-memory store and no pools. */
export const RunnerLive = Runner.layer({ handleSignals: false }).pipe(
  Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))
)

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(program.pipe(Effect.provide([RunnerLive, ScorerLive]))).then((report) =>
    console.log(report.summary())
  )
}
