import { NodeContext } from "@effect/platform-node"
import { assert, describe, it, vi } from "@effect/vitest"
import Database from "better-sqlite3"
import { Chunk, Effect, Layer, Logger, LogLevel, Option, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import { JsonCodec } from "../../src/domain/Codec.js"
import { RetryableError, StoreUnavailable } from "../../src/domain/Errors.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import * as CallCache from "../../src/services/CallCache.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as Report from "../../src/services/internal/report.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { chat, chatClientFactory, endpointIdentity } from "../../src/tasks/internal/chat.js"

const KEY = "sk-cache-7c1e9a3b5d2f4e6a8b0c"
const URL_SECRET = "pw-9f8e7d6c5b4a"

const tempDir = () => fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-cache-"))

// ---------------------------------------------------------------------------------------------
// chat against a model answering randomly (the mock with answers.random), a shared cache file
// ---------------------------------------------------------------------------------------------

const randomMock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 7,
    endpoints: [{ name: "rnd", latency: { medianMs: 0 }, answers: { random: true } }]
  })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

const rows = ["alpha", "beta", "gamma", "delta"].map((w) => ({ prompt: `say something about ${w}` }))
const ask = chat({ temperature: 1, retry: { maxAttempts: 1 } })
const template = Pipeline.make("sample", ask)

interface Outcome {
  readonly calls: number
  readonly outputs: ReadonlyMap<string, string>
  readonly outcomes: ReadonlyArray<string>
  readonly leasesTotal: number
  readonly stats: CallCache.CacheStats
}

/**
 * One run in a fresh memory store over the mock: `repeats` per row, the cache in `cacheFile`
 * under `mode`; returns the calls the mock answered during it, the output per pipeline, the
 * attempt outcomes and the pool's lease count.
 */
const runChat = (server: MockLlm.MockLlmServer, cacheFile: string, repeats: number, mode: CallCache.CacheMode) =>
  Effect.gen(function*() {
    const before = (yield* server.log).length
    const resource = Resource.make("llm", {
      id: "rnd",
      capacity: 4,
      options: { baseUrl: server.endpoints[0]!.baseUrl, apiKey: KEY, model: "mock-spam-1" },
      factory: chatClientFactory()
    })
    const env = Layer.provideMerge(
      Runner.layer({ handleSignals: false, concurrency: 4, cache: mode }),
      Layer.mergeAll(
        MemoryStore.layer(),
        Pool.layer([Pool.make("llm", [resource])]),
        SqliteCallCache.layer({ filename: cacheFile, shared: true })
      )
    )
    const result = yield* Effect.gen(function*() {
      const report = yield* Runner.run(template.map(rows, { repeats }))
      const store = yield* Store
      const pools = yield* Pool.Pools
      const leasesTotal = (yield* pools.stats("llm")).leasesTotal
      const outputs = new Map<string, string>()
      for (const p of yield* Stream.runCollect(store.streamPipelines({ runId: report.runId }))) {
        const art = yield* store.getArtifact(p.pipelineId, 0)
        if (art._tag === "Some" && art.value.payload !== undefined) {
          outputs.set(p.pipelineId, JSON.parse(Buffer.from(art.value.payload).toString("utf8")).content)
        }
      }
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      const stats = yield* CallCache.statsOf(store, report.runId)
      assert.strictEqual(report.stats.byState.succeeded, rows.length * repeats)
      return { outputs, outcomes: attempts.map((a) => a.outcome), leasesTotal, stats }
    }).pipe(Effect.provide(env))
    const calls = (yield* server.log).slice(before).filter((e) => e.status === 200).length
    return { ...result, calls } satisfies Outcome
  })

const rowsOf = (file: string): number => {
  const db = new Database(file, { readonly: true })
  try {
    return (db.prepare("SELECT count(*) AS n FROM call_cache").get() as { n: number }).n
  } finally {
    db.close()
  }
}

describe("call cache: chat against a model answering randomly", () => {
  it.scopedLive("4 rows × 5 repeats: 20 calls, 20 distinct answers; unchanged rerun: 0 calls, no lease; 7 repeats: 8 new calls", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const dir = tempDir()
      const cacheFile = NodePath.join(dir, "cache.db")

      const first = yield* runChat(server, cacheFile, 5, "readWrite")
      assert.strictEqual(first.calls, 20)
      assert.strictEqual(new Set(first.outputs.values()).size, 20, "repeats are independent samples")
      assert.deepStrictEqual(first.stats.misses, 20)
      assert.strictEqual(first.stats.hits, 0)
      assert.strictEqual(rowsOf(cacheFile), 20)

      // the same job again, in a new store, sharing the cache file: nothing is asked
      const rerun = yield* runChat(server, cacheFile, 5, "readWrite")
      assert.strictEqual(rerun.calls, 0)
      assert.strictEqual(rerun.leasesTotal, 0, "a cache hit takes no lease")
      assert.deepStrictEqual([...new Set(rerun.outcomes)], ["cache_hit"])
      assert.deepStrictEqual(rerun.outputs, first.outputs, "each pipeline is served its own stored answer")
      assert.strictEqual(rerun.stats.hits, 20)
      assert.isAbove(rerun.stats.tokensSaved.totalTokens, 0)
      assert.strictEqual(
        rerun.stats.tokensSaved.totalTokens,
        rerun.stats.tokensSaved.promptTokens + rerun.stats.tokensSaved.completionTokens
      )

      // two more repeats per row: exactly the 8 new samples are asked for
      const more = yield* runChat(server, cacheFile, 7, "readWrite")
      assert.strictEqual(more.calls, 8)
      assert.strictEqual(more.stats.hits, 20)
      assert.strictEqual(more.stats.misses, 8)
      assert.strictEqual(new Set(more.outputs.values()).size, 28)
      for (const [id, content] of first.outputs) assert.strictEqual(more.outputs.get(id), content)

      // no secret in the cache file (the key, in any of its forms, and the URL's password)
      const bytes = Buffer.concat(fs.readdirSync(dir).map((f) => fs.readFileSync(NodePath.join(dir, f))))
      assert.strictEqual(bytes.indexOf(KEY), -1)
      assert.strictEqual(bytes.indexOf(Buffer.from(KEY).toString("base64")), -1)
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.scopedLive("readOnly serves but never writes; refresh calls again and overwrites", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const dir = tempDir()
      const cacheFile = NodePath.join(dir, "cache.db")

      // readOnly on an empty cache: every call is made, nothing is stored
      const ro = yield* runChat(server, cacheFile, 1, "readOnly")
      assert.strictEqual(ro.calls, 4)
      assert.strictEqual(rowsOf(cacheFile), 0)
      assert.strictEqual(ro.stats.bypassed, 4)
      const ro2 = yield* runChat(server, cacheFile, 1, "readOnly")
      assert.strictEqual(ro2.calls, 4)

      const filled = yield* runChat(server, cacheFile, 1, "readWrite")
      assert.strictEqual(filled.calls, 4)
      // readOnly over a filled cache: served, still nothing written
      const served = yield* runChat(server, cacheFile, 1, "readOnly")
      assert.strictEqual(served.calls, 0)
      assert.deepStrictEqual(served.outputs, filled.outputs)

      // refresh: every call made again, the stored answers replaced by the new ones
      const refreshed = yield* runChat(server, cacheFile, 1, "refresh")
      assert.strictEqual(refreshed.calls, 4)
      assert.strictEqual(refreshed.stats.refreshed, 4)
      assert.strictEqual(rowsOf(cacheFile), 4)
      for (const [id, content] of filled.outputs) assert.notStrictEqual(refreshed.outputs.get(id), content)
      const after = yield* runChat(server, cacheFile, 1, "readWrite")
      assert.strictEqual(after.calls, 0)
      assert.deepStrictEqual(after.outputs, refreshed.outputs)
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it("the endpoint identity in the key has no secret: no key, no header, no URL password or secret query value", () => {
    const id = endpointIdentity({
      baseUrl: `https://user:${URL_SECRET}@api.example.com/v1?api-version=2024-02-01&key=${KEY}`,
      apiKey: KEY,
      headers: { "X-Custom-Auth": KEY },
      model: "gpt-x"
    })
    assert.deepStrictEqual(id, { baseUrl: "https://api.example.com/v1?api-version=2024-02-01", model: "gpt-x" })
    assert.notInclude(JSON.stringify(id), KEY)
    assert.notInclude(JSON.stringify(id), URL_SECRET)
  })
})

// ---------------------------------------------------------------------------------------------
// A general task declared `cache: true`, under TestClock
// ---------------------------------------------------------------------------------------------

/** A "model" whose every call answers something new: the calls are counted. */
const counter = () => {
  let calls = 0
  const task = (options: Task.Options) =>
    Task.make("model", options, (row: { readonly q: string }) => Effect.sync(() => ({ q: row.q, answer: `a${++calls}` })))
  return { task, calls: () => calls }
}

const runWith = <A, E>(
  cache: CallCache.CallCacheService,
  body: Effect.Effect<A, E, Runner.Runner | Store | Pool.Pools>,
  pools: ReadonlyArray<Pool.PoolConfig> = [],
  runCache?: CallCache.CacheMode
) =>
  body.pipe(Effect.provide(
    Layer.provideMerge(
      Runner.layer({ handleSignals: false, ...(runCache === undefined ? {} : { cache: runCache }) }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer(pools), Layer.succeed(CallCache.CallCache, cache))
    )
  ))

describe("call cache: a general task declared cache: true", () => {
  it.effect("served until its TTL runs out (Clock time), then called again and stored anew", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      const m = counter()
      const template = Pipeline.make("ttl", m.task({ cache: { ttl: "1 hour" } }))
      const seeds = [{ q: "a" }, { q: "b" }, { q: "c" }]
      yield* runWith(cache, Runner.run(template.map(seeds)))
      assert.strictEqual(m.calls(), 3)
      yield* TestClock.adjust("59 minutes")
      yield* runWith(cache, Runner.run(template.map(seeds), { retrySucceeded: true }))
      assert.strictEqual(m.calls(), 3, "within the TTL: served")
      yield* TestClock.adjust("2 minutes")
      yield* runWith(cache, Runner.run(template.map(seeds)))
      assert.strictEqual(m.calls(), 6, "past the TTL: called again")
      yield* runWith(cache, Runner.run(template.map(seeds)))
      assert.strictEqual(m.calls(), 6, "and stored anew")
    }))

  it.effect("off by default: without cache on the task or the run nothing is stored; --cache off turns it off", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      const plain = counter()
      const t1 = Pipeline.make("plain", plain.task({}))
      yield* runWith(cache, Runner.run(t1.map([{ q: "a" }])))
      yield* runWith(cache, Runner.run(t1.map([{ q: "a" }])))
      assert.strictEqual(plain.calls(), 2)
      assert.strictEqual(yield* cache.size, 0)
      const declared = counter()
      const t2 = Pipeline.make("declared", declared.task({ cache: true }))
      yield* runWith(cache, Runner.run(t2.map([{ q: "a" }])), [], "off")
      yield* runWith(cache, Runner.run(t2.map([{ q: "a" }])), [], "off")
      assert.strictEqual(declared.calls(), 2)
      yield* runWith(cache, Runner.run(t2.map([{ q: "a" }])))
      yield* runWith(cache, Runner.run(t2.map([{ q: "a" }])))
      assert.strictEqual(declared.calls(), 3)
    }))

  it.effect("an output is encoded once: a miss checkpoints the bytes it stored, a hit the bytes it was served", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      const m = counter()
      const template = Pipeline.make("once", m.task({ cache: true }))
      const seeds = [{ q: "a" }, { q: "b" }, { q: "c" }]
      // the JSON codec's encodings of the task's outputs (`{ q, answer }`), counted
      const encode = vi.spyOn(JsonCodec, "encode")
      const outputsEncoded = () =>
        encode.mock.calls.filter(([u]) => typeof u === "object" && u !== null && "answer" in u).length
      try {
        const artifacts = (retrySucceeded: boolean) =>
          runWith(
            cache,
            Effect.gen(function*() {
              yield* Runner.run(template.map(seeds), { retrySucceeded })
              const store = yield* Store
              return yield* Effect.forEach(seeds, (seed) =>
                Effect.map(store.getArtifact(template.bind(seed).pipelineId, 0), (a) => Option.getOrThrow(a).payload!))
            })
          )
        const first = yield* artifacts(false)
        assert.strictEqual(m.calls(), 3)
        assert.strictEqual(outputsEncoded(), 3, "a miss: encoded once for the cache and the checkpoint")
        encode.mockClear()
        const again = yield* artifacts(true)
        assert.strictEqual(m.calls(), 3, "served")
        assert.strictEqual(outputsEncoded(), 0, "a hit: the stored bytes are checkpointed, not encoded again")
        assert.deepStrictEqual(again.map((b) => new TextDecoder().decode(b)), first.map((b) => new TextDecoder().decode(b)))
        assert.deepStrictEqual(
          again.map((b) => JSON.parse(new TextDecoder().decode(b))),
          [{ q: "a", answer: "a1" }, { q: "b", answer: "a2" }, { q: "c", answer: "a3" }]
        )
      } finally {
        encode.mockRestore()
      }
    }))

  it.effect("a cache hit takes no lease: the pool's lease count does not move", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      let calls = 0
      const leased = Task.make("leased", { cache: true, resource: "gpu" }, (n: number, ctx) =>
        Effect.scoped(Effect.gen(function*() {
          yield* ctx.acquire()
          calls++
          return n * 2
        })))
      const gpu = Pool.make("gpu", [Resource.make("gpu", { id: "g0", capacity: 1 })])
      const count = (runs: number) =>
        runWith(
          cache,
          Effect.gen(function*() {
            for (let i = 0; i < runs; i++) yield* Runner.run(Pipeline.make("lease", leased).map([1, 2, 3]), { retrySucceeded: true })
            const pools = yield* Pool.Pools
            return (yield* pools.stats("gpu")).leasesTotal
          }),
          [gpu]
        )
      assert.strictEqual(yield* count(1), 3)
      assert.strictEqual(yield* count(2), 0, "both runs served from the cache, no lease taken")
      assert.strictEqual(calls, 3)
    }))

  it.effect("a rewound task called again with the same input in a new visit is not served the old visit's answer", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      const m = counter()
      const generate = m.task({ cache: true })
      const seen: Array<string> = []
      const validate = Task.make("validate", (draft: { readonly q: string; readonly answer: string }, ctx) =>
        Effect.sync(() => {
          seen.push(draft.answer)
          return ctx.visit === 0 ? Handoff.rewind("model", { q: draft.q }, { reason: "again" }) : draft
        }))
      const template = Pipeline.make("loop", generate, validate, {
        control: { rewind: { validate: ["model"] }, maxHandoffs: 2 }
      })
      yield* runWith(cache, Runner.run(template.map([{ q: "x" }])))
      assert.strictEqual(m.calls(), 2, "the second visit called the model again")
      assert.strictEqual(seen.length, 2)
      assert.notStrictEqual(seen[0], seen[1])
      // the whole traversal again (new store): each visit is served its own answer
      yield* runWith(cache, Runner.run(template.map([{ q: "x" }])))
      assert.strictEqual(m.calls(), 2)
      assert.deepStrictEqual(seen.slice(2), seen.slice(0, 2))
    }))
})

// ---------------------------------------------------------------------------------------------
// A cache whose store write fails for some entries (issue 18: such an attempt was not counted)
// ---------------------------------------------------------------------------------------------

describe("call cache: a write that fails mid-run", () => {
  /** A memory cache whose `put` fails for the outputs of the rows in `failFor` (by `q`). */
  const failingFor = (failFor: ReadonlySet<string>): CallCache.CallCacheService => {
    const inner = CallCache.makeMemory()
    const fails = (entry: CallCache.CacheEntry) =>
      failFor.has((JSON.parse(Buffer.from(entry.data).toString("utf8")) as { q: string }).q)
    const error = new StoreUnavailable({ message: "disk I/O error (test)" })
    return {
      ...inner,
      put: (entry) => fails(entry) ? Effect.fail(error) : inner.put(entry),
      // what readWrite stores with (it keeps the first answer)
      putFirst: (entry, ttlMs) => fails(entry) ? Effect.fail(error) : CallCache.putFirst(inner, entry, ttlMs)
    }
  }

  it.effect("counted as a miss and a failed write in report, /stats and watch; the task's result is kept; the next run calls it again", () =>
    Effect.gen(function*() {
      const cache = failingFor(new Set(["b", "d"]))
      const m = counter()
      const template = Pipeline.make("w", m.task({ cache: true }))
      const seeds = [{ q: "a" }, { q: "b" }, { q: "c" }, { q: "d" }]
      const first = yield* runWith(
        cache,
        Effect.gen(function*() {
          const run = yield* Runner.run(template.map(seeds))
          const store = yield* Store
          const outputs: Array<unknown> = []
          const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: run.runId })))
          for (const a of attempts) {
            const art = yield* store.getArtifact(a.pipelineId, 0)
            if (Option.isSome(art) && art.value.payload !== undefined) outputs.push(JSON.parse(Buffer.from(art.value.payload).toString("utf8")))
          }
          const report = yield* Report.buildReport([{ source: "mem", store }])
          const snapshot = yield* Monitor.readSnapshot(store)
          return { run, outputs, report, snapshot }
        })
      )
      // the task's own results stand: every pipeline succeeded with its answer stored
      assert.strictEqual(first.run.stats.byState.succeeded, 4)
      assert.deepStrictEqual(
        first.outputs.map((o) => (o as { q: string }).q).sort(),
        ["a", "b", "c", "d"]
      )
      assert.strictEqual(m.calls(), 4)
      // four misses (the calls made), two of whose outputs the cache could not keep
      assert.strictEqual(first.report.cache.misses, 4)
      assert.strictEqual(first.report.cache.writeFailures, 2)
      assert.include(Report.renderText(first.report), "Call cache: hits 0, misses 4; 2 cache writes failed")
      assert.strictEqual(JSON.parse(JSON.stringify(first.report.cache)).writeFailures, 2)
      // what /stats serves and watch draws
      assert.strictEqual(first.snapshot.cache?.misses, 4)
      assert.strictEqual(first.snapshot.cache?.write_failures, 2)
      assert.include(Monitor.renderSnapshot(first.snapshot, { width: 200 }), "call cache: hits 0 · misses 4 · 2 cache writes failed")
      // the next run: the two stored answers are served, the two lost ones are called again
      const again = yield* runWith(
        cache,
        Effect.gen(function*() {
          yield* Runner.run(template.map(seeds))
          return yield* Report.buildReport([{ source: "mem", store: yield* Store }])
        })
      )
      assert.strictEqual(m.calls(), 6)
      assert.strictEqual(again.cache.hits, 2)
      assert.strictEqual(again.cache.misses, 2)
      assert.strictEqual(again.cache.writeFailures, 2)
    }))
})

describe("call cache: a failed call of a cached task (issue 18 N2: misses are the calls made)", () => {
  it.effect("a 429 then a success is two misses, one stored answer: the attempt rows, the run's own figures and report agree", () =>
    Effect.gen(function*() {
      const cache = CallCache.makeMemory()
      let calls = 0
      const flaky = Task.make("model", { cache: true, retry: { maxAttempts: 2, base: "1 second", jitter: "none" } }, (row: { readonly q: string }) =>
        Effect.suspend(() =>
          ++calls === 1
            ? Effect.fail(new RetryableError({ message: "HTTP 429", errorClass: "rate_limit" }))
            : Effect.succeed({ q: row.q, answer: `a${calls}` })
        ))
      const out = yield* runWith(
        cache,
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(Runner.run(Pipeline.make("f", flaky).map([{ q: "a" }])))
          yield* TestClock.adjust("2 seconds")
          const run = yield* Effect.flatMap(fiber.await, (exit) => exit)
          const store = yield* Store
          const finished = yield* store.events({ runId: run.runId, kind: "run.finished", limit: 1 })
          return { run, finished, report: yield* Report.buildReport([{ source: "mem", store }]) }
        })
      )
      assert.strictEqual(calls, 2)
      assert.strictEqual(yield* cache.size, 1)
      assert.strictEqual(out.report.attempts, 2)
      assert.deepStrictEqual([out.report.cache.hits, out.report.cache.misses, out.report.cache.writeFailures], [0, 2, 0])
      // the counters the run itself keeps (its run.finished event) say the same
      assert.strictEqual((out.finished[0]!.data as { readonly cache: { readonly misses: number } }).cache.misses, 2)
    }))
})

// ---------------------------------------------------------------------------------------------
// A shared cache database with damaged pages (issue 18, F7: one warning per lookup and write,
// nothing in the report)
// ---------------------------------------------------------------------------------------------

describe("call cache: a damaged shared cache database", () => {
  it.effect("one warning naming the file and what to do; lookups and writes that failed are counted in report, /stats and watch; the run succeeds", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const file = NodePath.join(dir, "shared.db")
      const m = counter()
      const template = Pipeline.make("d", m.task({ cache: true }))
      const seeds = ["a", "b", "c", "d", "e", "f"].map((q) => ({ q }))
      // a valid cache with six answers, closed
      yield* Effect.scoped(Effect.flatMap(SqliteCallCache.make({ filename: file, shared: true }), (cache) => runWith(cache, Runner.run(template.map(seeds)))))
      assert.strictEqual(m.calls(), 6)
      // its pages after the first overwritten: the header still opens, every read fails
      const size = fs.statSync(file).size
      assert.isAbove(size, 4096)
      const fd = fs.openSync(file, "r+")
      fs.writeSync(fd, Buffer.alloc(size - 4096, 0xa5), 0, size - 4096, 4096)
      fs.closeSync(fd)
      const logged: Array<{ level: string; message: string }> = []
      const logger = Logger.make(({ logLevel, message }) => {
        logged.push({ level: logLevel.label, message: Array.isArray(message) ? message.join(" ") : String(message) })
      })
      const out = yield* Effect.scoped(Effect.flatMap(SqliteCallCache.make({ filename: file, shared: true }), (cache) =>
        runWith(
          cache,
          Effect.gen(function*() {
            const run = yield* Runner.run(template.map(seeds))
            const store = yield* Store
            return {
              run,
              report: yield* Report.buildReport([{ source: "mem", store }]),
              snapshot: yield* Monitor.readSnapshot(store)
            }
          })
        ))).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)), Logger.withMinimumLogLevel(LogLevel.Debug))
      // the run finishes correctly: every pipeline called and succeeded
      assert.strictEqual(out.run.stats.byState.succeeded, 6)
      assert.strictEqual(m.calls(), 12)
      // one warning, naming the file and saying what to do; the other failures at debug level
      const warnings = logged.filter((l) => l.level === "WARN" && l.message.includes("call cache"))
      assert.strictEqual(warnings.length, 1, JSON.stringify(warnings))
      assert.include(warnings[0]!.message, file)
      // the location once (the cache's error already began with it: it was said twice)
      assert.strictEqual(warnings[0]!.message.split(file).length - 1, 1, warnings[0]!.message)
      for (const l of logged.filter((l) => l.message.includes("call cache"))) {
        assert.strictEqual(l.message.split(file).length - 1, 1, l.message)
      }
      assert.include(warnings[0]!.message, "move it aside")
      assert.include(warnings[0]!.message, "PRAGMA integrity_check")
      assert.isAtLeast(logged.filter((l) => l.level === "DEBUG" && l.message.includes("call cache")).length, 6)
      // the report, /stats and watch say how many lookups (and writes) failed
      assert.strictEqual(out.report.cache.lookupFailures, 6)
      assert.strictEqual(out.report.cache.misses, 6)
      assert.include(Report.renderText(out.report), "6 cache lookups failed (the cache could not be read")
      assert.strictEqual(out.snapshot.cache?.lookup_failures, 6)
      assert.include(Monitor.renderSnapshot(out.snapshot, { width: 300 }), "6 cache lookups failed")
      // the run's own summary says it too: where, and what was done (tester18c F5: it was silent)
      assert.deepStrictEqual(out.run.callCache, { location: file, lookupFailures: 6, writeFailures: out.run.callCache?.writeFailures ?? -1 })
      const said = out.run.summary().split("\n").filter((l) => l.startsWith("call cache "))
      assert.strictEqual(said.length, 1, out.run.summary())
      assert.include(said[0]!, `call cache ${file}: unusable (6 lookups`)
      assert.include(said[0]!, "those calls were made without it")
      assert.deepStrictEqual((out.run.toJSON()["callCache"] as { location: string }).location, file)
      fs.rmSync(dir, { recursive: true, force: true })
    }))
})
