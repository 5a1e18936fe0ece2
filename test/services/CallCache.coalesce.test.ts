/**
 * Identical requests in flight at once (tester18g F1): within a process, the misses of one
 * cache key are coalesced (the first calls, the others wait holding no worker slot and are
 * served its answer as hits; a failed or interrupted leader hands the call to a waiter), and
 * the cache keeps the first answer stored under a key (`putFirst`), so a call that lost the
 * race to another process records the stored answer. An unchanged rerun then serves every
 * pipeline exactly what it got.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Layer, Option, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import { CodecRegistry } from "../../src/domain/Codec.js"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import * as CallCache from "../../src/services/CallCache.js"
import { coalesce, type Plan } from "../../src/services/internal/runner/cache.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { chat, chatClientFactory } from "../../src/tasks/internal/chat.js"
import { judge, type JudgeOutput } from "../../src/tasks/Judge.js"

const KEY = "sk-coalesce-4b8d2f6a1c3e"

const tempDir = () => fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-coalesce-"))

/** The mock answering every chat request with a random text, for the scope. */
const randomMock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 11,
    endpoints: [{ name: "rnd", latency: { medianMs: 0 }, answers: { random: true } }]
  })
  return yield* MockLlm.serve({ profile, models: MockLlm.builtinModels })
}).pipe(Effect.provide(NodeContext.layer))

const llmPool = (server: MockLlm.MockLlmServer, model: string) =>
  Pool.make("llm", [Resource.make("llm", {
    id: "rnd",
    capacity: 8,
    options: { baseUrl: server.endpoints[0]!.baseUrl, apiKey: KEY, model },
    factory: chatClientFactory()
  })])

interface Ran<O> {
  readonly calls: number
  readonly outputs: ReadonlyMap<string, O>
  readonly outcomes: ReadonlyArray<string>
  readonly stats: CallCache.CacheStats
}

/** One run (`start`, of `count` pipelines) in a fresh memory store over the mock, the cache in `cacheFile`. */
const runOver = <O>(
  server: MockLlm.MockLlmServer,
  cacheFile: string,
  start: Effect.Effect<Runner.RunReport, unknown, Runner.Runner>,
  count: number,
  model: string,
  concurrency = 8
) =>
  Effect.gen(function*() {
    const before = (yield* server.log).length
    const env = Layer.provideMerge(
      Runner.layer({ handleSignals: false, concurrency, cache: "readWrite" }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer([llmPool(server, model)]), SqliteCallCache.layer({ filename: cacheFile, shared: true }))
    )
    const ran = yield* Effect.gen(function*() {
      const report = yield* start
      const store = yield* Store
      const outputs = new Map<string, O>()
      for (const p of yield* Stream.runCollect(store.streamPipelines({ runId: report.runId }))) {
        const art = yield* store.getArtifact(p.pipelineId, 0)
        if (Option.isSome(art) && art.value.payload !== undefined) {
          outputs.set(p.pipelineId, JSON.parse(Buffer.from(art.value.payload).toString("utf8")))
        }
      }
      const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      assert.strictEqual(report.stats.byState.succeeded, count)
      return { outputs, outcomes: attempts.map((a) => a.outcome), stats: yield* CallCache.statsOf(store, report.runId) }
    }).pipe(Effect.provide(env))
    const calls = (yield* server.log).slice(before).filter((e) => e.status === 200).length
    return { ...ran, calls } satisfies Ran<O>
  })

describe("call cache: identical requests in flight at once (tester18g F1)", () => {
  it.scopedLive("20 identical rows at temperature 1, concurrency 8: 1 call, one answer; the rerun serves each pipeline what it got", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      const ask = chat({ temperature: 1, retry: { maxAttempts: 1 } })
      const rows = Array.from({ length: 20 }, (_, i) => ({ id: `d${String(i).padStart(2, "0")}`, prompt: "say something random" }))
      const pipelines = Pipeline.make("dup", ask).map(rows, { keyOf: (r) => (r as { readonly id: string }).id })
      const first = yield* runOver<{ content: string }>(server, cacheFile, Runner.run(pipelines), 20, "mock-spam-1")
      assert.strictEqual(first.calls, 1, "one distinct request: one call")
      assert.strictEqual(new Set([...first.outputs.values()].map((o) => o.content)).size, 1, "the pipelines share one answer")
      assert.strictEqual(first.stats.misses, 1)
      assert.strictEqual(first.stats.hits, 19, "the waiters are served the leader's answer as hits")
      assert.strictEqual(first.stats.stored, 1)

      const again = yield* runOver<{ content: string }>(server, cacheFile, Runner.run(pipelines), 20, "mock-spam-1")
      assert.strictEqual(again.calls, 0)
      assert.strictEqual(again.stats.hits, 20)
      for (const [id, o] of first.outputs) assert.strictEqual(again.outputs.get(id)?.content, o.content, id)
    }))

  it.scopedLive("5 prompts × 4 duplicates: calls = distinct requests; an unchanged rerun changes no answer", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      const ask = chat({ temperature: 1, retry: { maxAttempts: 1 } })
      const rows = Array.from({ length: 20 }, (_, i) => ({ id: `r${i}`, prompt: `topic ${i % 5}` }))
      const pipelines = Pipeline.make("dup5", ask).map(rows, { keyOf: (r) => (r as { readonly id: string }).id })
      const first = yield* runOver<{ content: string }>(server, cacheFile, Runner.run(pipelines), 20, "mock-spam-1")
      assert.strictEqual(first.calls, 5)
      // (a keyed pipeline's id is its key)
      const byPrompt = new Map<string, Set<string>>()
      for (const r of rows) {
        const set = byPrompt.get(r.prompt) ?? new Set<string>()
        set.add(first.outputs.get(r.id)!.content)
        byPrompt.set(r.prompt, set)
      }
      assert.strictEqual(new Set([...first.outputs.values()].map((o) => o.content)).size, 5)
      for (const [prompt, answers] of byPrompt) assert.strictEqual(answers.size, 1, prompt)
      const again = yield* runOver<{ content: string }>(server, cacheFile, Runner.run(pipelines), 20, "mock-spam-1")
      assert.strictEqual(again.calls, 0)
      for (const [id, o] of first.outputs) assert.strictEqual(again.outputs.get(id)?.content, o.content, id)
    }))

  it.scopedLive("a judge over 6 rows that show 2 distinct requests makes 2 calls; the rerun serves the same verdicts", () =>
    Effect.gen(function*() {
      const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "j", latency: { medianMs: 0 } }] })
      const server = yield* MockLlm.serve({ profile, models: MockLlm.builtinModels }).pipe(Effect.provide(NodeContext.layer))
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      const j = judge<{ id: string; answer: string; gold: string }>({
        rubric: { id: "r", version: 1, criteria: [{ name: "correct", scale: { min: 0, max: 1 } }] },
        candidates: { answer: "answer" },
        context: { reference: "gold" },
        model: "mock-judge",
        retry: { maxAttempts: 1 }
      })
      const rows = Array.from({ length: 6 }, (_, i) => ({ id: `j${i}`, answer: i % 2 === 0 ? "spam" : "ham", gold: "spam" }))
      const pipelines = Pipeline.make("judged", j).map(rows, { keyOf: (r) => (r as { readonly id: string }).id })
      const first = yield* runOver<JudgeOutput>(server, cacheFile, Runner.run(pipelines), 6, "mock-judge", 6)
      assert.strictEqual(first.calls, 2, "2 distinct requests: 2 judge calls")
      assert.strictEqual(first.stats.misses, 2)
      assert.strictEqual(first.stats.hits, 4)
      const again = yield* runOver<JudgeOutput>(server, cacheFile, Runner.run(pipelines), 6, "mock-judge", 6)
      assert.strictEqual(again.calls, 0)
      for (const [id, v] of first.outputs) assert.deepStrictEqual(again.outputs.get(id), v, id)
    }))
})

// ---------------------------------------------------------------------------------------------
// Through the runner with a task whose calls the test releases
// ---------------------------------------------------------------------------------------------

const runTasks = <A, E>(cache: CallCache.CallCacheService, body: Effect.Effect<A, E, Runner.Runner | Store | Pool.Pools>, concurrency: number) =>
  body.pipe(Effect.provide(
    Layer.provideMerge(
      Runner.layer({ handleSignals: false, concurrency }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), Layer.succeed(CallCache.CallCache, cache))
    )
  ))

/** Rows `r0`…: each a pipeline of its own (keyed), whose first task passes `q` on. */
const keyed = (qs: ReadonlyArray<string>) => qs.map((q, i) => ({ id: `r${i}`, q }))
const question = Task.sync("question", (r: { readonly id: string; readonly q: string }) => r.q)

/** Yields until `cond` holds (fibers of the run get to run in between). */
const until = (cond: () => boolean): Effect.Effect<void> =>
  Effect.suspend(() => cond() ? Effect.void : Effect.zipRight(Effect.yieldNow(), until(cond)))

/** The output of task `seq` of each pipeline of `runId` (JSON), by pipeline id. */
const outputsOf = (runId: string, seq = 0) =>
  Effect.gen(function*() {
    const store = yield* Store
    const out = new Map<string, unknown>()
    for (const p of yield* Stream.runCollect(store.streamPipelines({ runId: runId as never }))) {
      const art = yield* store.getArtifact(p.pipelineId, seq)
      if (Option.isSome(art) && art.value.payload !== undefined) out.set(p.pipelineId, JSON.parse(Buffer.from(art.value.payload).toString("utf8")))
    }
    return out
  })

describe("call cache: the leader of a coalesced call", () => {
  it.effect("fails (a typed error): not cached; one waiter makes the call, the others are served its answer", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      const gate = yield* Deferred.make<void>()
      let calls = 0
      const ask = Task.make("ask", { cache: true, retry: { maxAttempts: 1 } }, (q: string) =>
        Effect.gen(function*() {
          const n = ++calls
          yield* Deferred.await(gate)
          if (n === 1) return yield* new FatalError({ message: "the first call fails" })
          return `${q}: answer ${n}`
        }))
      const result = yield* runTasks(
        cache,
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(Runner.run(Pipeline.make("lead", question, ask).map(keyed(["same", "same", "same", "same", "same"]), { keyOf: (r) => r.id })))
          yield* until(() => calls === 1)
          // the others have looked the key up and wait for the first call
          for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
          assert.strictEqual(calls, 1, "the waiters do not call")
          yield* Deferred.succeed(gate, undefined)
          const report = yield* Fiber.join(fiber)
          const store = yield* Store
          const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId }))).filter((a) => a.taskName === "ask")
          return { report, outputs: yield* outputsOf(report.runId, 1), attempts, stats: yield* CallCache.statsOf(store, report.runId) }
        }),
        5
      )
      assert.strictEqual(calls, 2, "one call failed, one waiter made the next")
      assert.strictEqual(result.report.stats.byState.failed, 1)
      assert.strictEqual(result.report.stats.byState.succeeded, 4)
      assert.deepStrictEqual([...new Set(result.outputs.values())], ["same: answer 2"])
      assert.strictEqual(result.stats.misses, 2)
      assert.strictEqual(result.stats.hits, 3)
      assert.strictEqual(yield* cache.size, 1)
      assert.deepStrictEqual(result.attempts.filter((a) => a.outcome === "failed").length, 1)
    }))

  it.effect("a waiter holds no worker slot: another task runs while the call it waits for is made (concurrency 2)", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      const other = yield* Deferred.make<void>()
      let calls = 0
      // the call for "same" ends only once the "other" row has run: with a waiter holding the
      // second slot, "other" could never start
      const ask = Task.make("ask", { cache: true }, (q: string) =>
        Effect.gen(function*() {
          calls++
          if (q === "other") {
            yield* Deferred.succeed(other, undefined)
            return "other done"
          }
          yield* Deferred.await(other)
          return `${q} answered`
        }))
      const report = yield* runTasks(cache, Runner.run(Pipeline.make("slots", question, ask).map(keyed(["same", "same", "other"]), { keyOf: (r) => r.id })), 2)
      assert.strictEqual(report.stats.byState.succeeded, 3)
      assert.strictEqual(calls, 2)
    }))
})

// ---------------------------------------------------------------------------------------------
// The core: interruption of the leader or of a waiter
// ---------------------------------------------------------------------------------------------

describe("call cache: coalesce (the core)", () => {
  const registry = CodecRegistry.default()
  const planFor = (key: string): Plan => ({
    mode: "readWrite",
    ttlMs: null,
    key,
    namespace: { repeat: 0, visit: 0, variant: null },
    pool: null
  })
  const entryFor = (key: string, value: string, createdAt = 0): CallCache.CacheEntry => {
    const e = registry.dump(value)
    if (e._tag === "Left") throw new Error("cannot encode")
    return { key, taskName: "t", namespace: { repeat: 0, visit: 0, variant: null }, ...e.right, usage: null, createdAt }
  }

  it.effect("an interrupted leader wakes its waiters: one leads the next call, the others are served it; an interrupted waiter changes nothing", () =>
    Effect.gen(function*() {
      const cache = { service: CallCache.makeMemory(), run: { mode: "readWrite" as const, ttlMs: null } }
      const key = "k".repeat(32)
      const plan = planFor(key)
      const leads: Array<number> = []
      const released = yield* Deferred.make<void>()
      const events: Array<string> = []
      const one = (i: number) =>
        coalesce<string>(cache, plan, registry, () => 0, {
          serve: (hit) => Effect.succeed(`served ${String(hit.value)}`),
          lead: (publish) =>
            Effect.gen(function*() {
              leads.push(i)
              // the first leader never ends on its own
              if (leads.length === 1) return yield* Effect.never
              yield* Deferred.await(released)
              const entry = entryFor(key, `answer of ${i}`)
              const kept = yield* Effect.orDie(CallCache.putFirst(cache.service, entry, null))
              publish(kept)
              return `called ${i}`
            }),
          waiting: Effect.sync(() => void events.push(`wait ${i}`)),
          leading: Effect.sync(() => void events.push(`lead again ${i}`))
        })
      const f0 = yield* Effect.fork(one(0))
      yield* until(() => leads.length === 1)
      const fs = [] as Array<Fiber.RuntimeFiber<string>>
      for (const i of [1, 2, 3]) fs.push(yield* Effect.fork(one(i)))
      yield* until(() => events.length === 3)
      assert.deepStrictEqual(events, ["wait 1", "wait 2", "wait 3"])
      // a waiter interrupted: nothing else changes
      yield* Fiber.interrupt(fs[2]!)
      // the leader interrupted: one waiter leads
      yield* Fiber.interrupt(f0)
      yield* until(() => leads.length === 2)
      assert.deepStrictEqual(leads, [0, 1])
      assert.include(events, "lead again 1")
      yield* Deferred.succeed(released, undefined)
      assert.strictEqual(yield* Fiber.join(fs[0]!), "called 1")
      assert.strictEqual(yield* Fiber.join(fs[1]!), "served answer of 1")
      assert.isTrue(Exit.isInterrupted(yield* Fiber.await(fs[2]!)))
      assert.deepStrictEqual(leads, [0, 1], "no other call")
      // nothing left in flight: the next attempt is a plain hit
      assert.strictEqual(yield* one(9), "served answer of 1")
    }))
})

// ---------------------------------------------------------------------------------------------
// The store keeps the first answer
// ---------------------------------------------------------------------------------------------

describe("call cache: putFirst keeps the first answer (memory, SQLite, across connections)", () => {
  const registry = CodecRegistry.default()
  const entry = (key: string, value: string, createdAt: number): CallCache.CacheEntry => {
    const e = registry.dump(value)
    if (e._tag === "Left") throw new Error("cannot encode")
    return { key, taskName: "t", namespace: { repeat: 0, visit: 0, variant: null }, ...e.right, usage: null, createdAt }
  }
  const text = (e: CallCache.CacheEntry) => Buffer.from(e.data).toString("utf8")

  const check = (a: CallCache.CallCacheService, b: CallCache.CallCacheService) =>
    Effect.gen(function*() {
      const key = "a".repeat(32)
      const first = entry(key, "first", 1_000)
      assert.strictEqual(yield* CallCache.putFirst(a, first, null), first, "stored: the entry itself")
      // another writer (the other connection) sends the same request later: the first is kept
      const kept = yield* CallCache.putFirst(b, entry(key, "second", 2_000), null)
      assert.strictEqual(text(kept), "\"first\"")
      assert.strictEqual(kept.createdAt, 1_000)
      assert.strictEqual(text(Option.getOrThrow(yield* a.get(key))), "\"first\"")
      // under a TTL: an unexpired answer is kept, an expired one replaced
      assert.strictEqual(text(yield* CallCache.putFirst(b, entry(key, "third", 1_500), 1_000)), "\"first\"")
      const fourth = entry(key, "fourth", 2_000)
      assert.strictEqual(text(yield* CallCache.putFirst(b, fourth, 1_000)), "\"fourth\"")
      assert.strictEqual(text(Option.getOrThrow(yield* a.get(key))), "\"fourth\"")
      // put (refresh) still replaces
      yield* b.put(entry(key, "fifth", 2_500))
      assert.strictEqual(text(Option.getOrThrow(yield* a.get(key))), "\"fifth\"")
    })

  it.effect("memory", () =>
    Effect.suspend(() => {
      const m = CallCache.makeMemory()
      return check(m, m)
    }))

  it.scoped("SQLite: two connections on one file (two processes) agree on the first answer", () =>
    Effect.gen(function*() {
      const file = NodePath.join(tempDir(), "shared.db")
      const a = yield* SqliteCallCache.make({ filename: file, shared: true })
      const b = yield* SqliteCallCache.make({ filename: file, shared: true })
      yield* check(a, b)
    }))

  it.effect("a cache without putFirst: get then put", () =>
    Effect.suspend(() => {
      const { putFirst: _drop, ...m } = CallCache.makeMemory()
      return check(m, m)
    }))
})

describe("call cache: a call that lost the race to another process (tester18g F1)", () => {
  it.effect("records the answer stored first, not its own; the cache keeps it; not counted as stored", () =>
    Effect.gen(function*() {
      const inner = CallCache.makeMemory()
      let answer = "first"
      const ask = Task.make("ask", { cache: true }, (q: string) => Effect.sync(() => `${q}: ${answer}`))
      const template = Pipeline.make("race", ask)
      yield* runTasks(inner, Runner.run(template.map(["q"])), 1)
      // the second run's lookup misses (as if the other process had not stored yet), and its
      // call answers differently
      answer = "second"
      const racing: CallCache.CallCacheService = { ...inner, get: () => Effect.succeed(Option.none()) }
      const second = yield* runTasks(
        racing,
        Effect.gen(function*() {
          const report = yield* Runner.run(template.map(["q"]), { retrySucceeded: true })
          const store = yield* Store
          const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
          return { outputs: yield* outputsOf(report.runId), attempts, stats: yield* CallCache.statsOf(store, report.runId) }
        }),
        1
      )
      assert.deepStrictEqual([...second.outputs.values()], ["q: first"])
      assert.strictEqual((second.attempts[0]!.decision as { cache?: { lostRace?: boolean } }).cache?.lostRace, true)
      assert.strictEqual(second.stats.misses, 1)
      assert.strictEqual(second.stats.stored, 0)
      assert.strictEqual(yield* inner.size, 1)
    }))
})
