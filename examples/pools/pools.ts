/**
 * Pools without a runner: two simulated LLM endpoints of unequal capacity, a flaky one that
 * gets degraded and comes back after its cooldown, scoped leases, the escape hatch and
 * its reclaim, the least-busy algorithm, events and stats.
 *
 *   npx tsx examples/pools/pools.ts
 *
 * Prints one JSON line per step and a final `summary` line.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Chunk, Console, Data, Effect, Queue } from "effect"
import { Pool, Resource } from "assay"

/** What the fake provider fails with. */
class ProviderOverloaded extends Data.TaggedError("ProviderOverloaded")<{ readonly message: string }> {}

/** A fake client: what a factory would build from `options` (base URL, key, model). */
interface Client {
  readonly name: string
  readonly chat: (prompt: string) => Effect.Effect<string, ProviderOverloaded>
}

let flakyCalls = 0
const makeClient = (info: { readonly id: string; readonly options: Readonly<Record<string, unknown>> }) =>
  Effect.succeed<Client>({
    name: info.id,
    chat: (prompt) =>
      info.id === "flaky" && ++flakyCalls <= 3
        ? Effect.fail(new ProviderOverloaded({ message: "503 overloaded" }))
        : Effect.as(Effect.sleep("5 millis"), `${info.options["model"]} says: ${prompt.length}`)
  })

const endpoints = [
  Resource.make("llm", {
    id: "big",
    capacity: 4,
    factory: makeClient,
    options: { model: "m-large", apiKey: "sk-secret-1", quota: { tokens: 10_000 } },
    tags: { tier: "prod" }
  }),
  Resource.make("llm", {
    id: "flaky",
    capacity: 2,
    factory: makeClient,
    options: { model: "m-small", apiKey: "sk-secret-2" },
    cooldown: "1 second"
  })
]

/** One call through a scoped lease; the report is the only source of the endpoint's health. */
const ask = (pools: Pool.PoolsService, prompt: string, selector: { readonly id?: string } = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const lease = yield* pools.acquire<Client>({ pool: "llm", ...selector })
    const started = Date.now()
    return yield* lease.client.chat(prompt).pipe(
      Effect.tap(() => lease.report({ ok: true, latencyMs: Date.now() - started, usage: { tokens: prompt.length } })),
      Effect.tapError((error) => lease.report({ ok: false, error })),
      Effect.map((answer) => ({ answer, servedBy: lease.resource.id }))
    )
  }))

const program = Effect.gen(function*() {
  const pools = yield* Pool.makePools([Pool.make("llm", endpoints, { algorithm: "leastBusy" })])
  const events = yield* pools.events({ pool: "llm" })

  // 1. secrets never leave a resource's spec
  yield* Console.log(JSON.stringify({ step: "spec", spec: Resource.spec(endpoints[0]!) }))

  // 2. three failures degrade the flaky endpoint; the pool keeps serving from the other one
  for (let i = 0; i < 3; i++) yield* Effect.either(ask(pools, "hello", { id: "flaky" }))
  const degraded = (yield* pools.snapshot("llm")).find((s) => s.id === "flaky")!
  yield* Console.log(JSON.stringify({ step: "degraded", state: degraded.state, failures: degraded.consecutiveFailures }))

  // 3. 12 concurrent questions on capacity 4 (flaky is out of rotation): all answered
  const answers = yield* Effect.forEach(
    Array.from({ length: 12 }, (_, i) => `question ${i}`),
    (q) => ask(pools, q),
    { concurrency: 12 }
  )
  yield* Console.log(JSON.stringify({ step: "burst", answered: answers.length, servedBy: [...new Set(answers.map((a) => a.servedBy))] }))

  // 4. after the cooldown the flaky endpoint is back in rotation and a success revives it fully
  yield* Effect.sleep("1100 millis")
  const again = yield* ask(pools, "are you back?", { id: "flaky" })
  const revived = (yield* pools.snapshot("llm")).find((s) => s.id === "flaky")!
  yield* Console.log(JSON.stringify({ step: "revived", servedBy: again.servedBy, state: revived.state, failures: revived.consecutiveFailures }))

  // 5. the escape hatch: a raw lease forgotten by its owner is reclaimed and counted as leaked
  const owner = "attempt-42"
  yield* pools.acquireRaw({ pool: "llm" }, { taskName: "leaky", pipelineId: "p1", owner })
  const leaked = yield* pools.reclaim(owner)
  yield* Console.log(JSON.stringify({ step: "reclaim", leaked: leaked.map((l) => l.taskName) }))

  // 6. what the pool saw
  const stats = yield* pools.stats("llm")
  const kinds = Chunk.toReadonlyArray(yield* Queue.takeAll(events)).map((e) => `${e.kind}:${e.resourceId}`)
  yield* Console.log(JSON.stringify({
    step: "summary",
    leasesTotal: stats.leasesTotal,
    okTotal: stats.okTotal,
    failedTotal: stats.failedTotal,
    leakedTotal: stats.leakedTotal,
    active: stats.active,
    usage: stats.usage,
    events: kinds
  }))
})

NodeRuntime.runMain(Effect.scoped(program))
