import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Option, Stream } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as NodePath from "node:path"
import { classify, retryAfterOf } from "../../src/domain/Errors.js"
import type { ResourceInfo } from "../../src/domain/Lease.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { chat, ChatError, chatClientFactory, type ChatClient, maskText, renderTemplate } from "../../src/tasks/internal/chat.js"

const KEY = "sk-test-3f9a1c7e5b2d4e6f8a0b"

const info = (id: string, options: Record<string, unknown>): ResourceInfo =>
  Resource.info(Resource.make("llm", { id, options }))

/** Starts the mock with the given endpoints for the enclosing scope. */
const mock = (endpoints: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({ seed: 1, endpoints })
    return yield* MockLlm.serve({ profile })
  }).pipe(Effect.provide(NodeContext.layer))

const baseOf = (server: MockLlm.MockLlmServer, name: string) => server.endpoints.find((e) => e.name === name)!.baseUrl

const clientFor = (id: string, options: Record<string, unknown>) =>
  chatClientFactory()(info(id, options)) as Effect.Effect<ChatClient, unknown>

const ask = (client: ChatClient, content = "--- email ---\nhello, see you at lunch\n--- end of email ---") =>
  Effect.either(client.complete({ messages: [{ role: "user", content }], timeoutMs: 5_000 }))

const leftOf = <A>(e: Either.Either<A, ChatError>): ChatError => {
  if (Either.isRight(e)) throw new Error(`expected a failure, got ${JSON.stringify(e.right)}`)
  return e.left
}

/** A loopback HTTP server answering every request with `status` and `body`, for the scope. */
const rawServer = (status: number, body: string) =>
  Effect.acquireRelease(
    Effect.async<{ server: http.Server; url: string }>((resume) => {
      const server = http.createServer((_req, res) => {
        res.writeHead(status, { "content-type": "application/json" })
        res.end(body)
      })
      server.listen(0, "127.0.0.1", () => {
        const port = (server.address() as net.AddressInfo).port
        resume(Effect.succeed({ server, url: `http://127.0.0.1:${port}/v1` }))
      })
    }),
    ({ server }) => Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )

/** A port nothing listens on (bound, then released). */
const freePort = Effect.async<number>((resume) => {
  const s = net.createServer()
  s.listen(0, "127.0.0.1", () => {
    const port = (s.address() as net.AddressInfo).port
    s.close(() => resume(Effect.succeed(port)))
  })
})

describe("chat client", () => {
  it.scopedLive("success: the first choice's text, the model and the token usage", () =>
    Effect.gen(function*() {
      const server = yield* mock([{ name: "ok", latency: { medianMs: 0 } }])
      const client = yield* clientFor("ok", { baseUrl: baseOf(server, "ok"), apiKey: KEY, model: "mock-spam-1" })
      const r = yield* ask(client)
      assert.isTrue(Either.isRight(r))
      const c = Either.getOrThrow(r)
      assert.strictEqual(c.content, "ham")
      assert.strictEqual(c.model, "mock-spam-1")
      assert.isAbove(c.usage.promptTokens, 0)
      assert.isAbove(c.usage.completionTokens, 0)
      assert.strictEqual(c.usage.totalTokens, c.usage.promptTokens + c.usage.completionTokens)
      const log = yield* server.log
      assert.strictEqual(log.length, 1)
      assert.strictEqual(log[0]!.status, 200)
      assert.isNotNull(log[0]!.keyHash) // the key was sent
    }))

  it.scopedLive("an answer that echoes the key or a secret header (in any encoding) is masked before anyone sees it", () =>
    Effect.gen(function*() {
      const cookie = "session=c00kie-s3cret-v4lue"
      const echoed = `key ${KEY}, url-encoded ${encodeURIComponent(KEY)}, base64 ${Buffer.from(KEY).toString("base64")}, cookie ${cookie}`
      const server = yield* rawServer(200, JSON.stringify({ choices: [{ message: { content: echoed }, finish_reason: "stop" }] }))
      const client = yield* clientFor("echo", { baseUrl: server.url, apiKey: KEY, model: "m", headers: { Cookie: cookie } })
      const c = Either.getOrThrow(yield* ask(client))
      assert.notInclude(c.content, KEY)
      assert.notInclude(c.content, Buffer.from(KEY).toString("base64"))
      assert.notInclude(c.content, "c00kie-s3cret")
      assert.include(c.content, "***")
      // a baseUrl that already ends with the endpoint path is not doubled
      const direct = yield* clientFor("direct", { baseUrl: `${server.url}/chat/completions`, apiKey: KEY, model: "m" })
      assert.isTrue(Either.isRight(yield* ask(direct)))
    }))

  it.scopedLive("HTTP 429 is rate_limit and carries the server's Retry-After in milliseconds", () =>
    Effect.gen(function*() {
      const server = yield* mock([{ name: "t", latency: { medianMs: 0 }, throttle: { forS: 60, retryAfterS: 3 } }])
      const client = yield* clientFor("t", { baseUrl: baseOf(server, "t"), apiKey: KEY, model: "m" })
      const e = leftOf(yield* ask(client))
      assert.strictEqual(e.errorClass, "rate_limit")
      assert.strictEqual(e.status, 429)
      assert.strictEqual(e.retryAfterMs, 3000)
      assert.strictEqual(classify(e), "rate_limit")
      assert.strictEqual(retryAfterOf(e, 0), 3000)
      assert.notInclude(e.message, KEY)
    }))

  it.scopedLive("HTTP 500 and 503 are upstream", () =>
    Effect.gen(function*() {
      const server = yield* mock([
        { name: "e500", latency: { medianMs: 0 }, errorRate: 1, errorStatuses: [500] },
        { name: "e503", latency: { medianMs: 0 }, errorRate: 1, errorStatuses: [503] }
      ])
      for (const name of ["e500", "e503"]) {
        const client = yield* clientFor(name, { baseUrl: baseOf(server, name), apiKey: KEY, model: "m" })
        const e = leftOf(yield* ask(client))
        assert.strictEqual(e.errorClass, "upstream")
        assert.strictEqual(e.status, Number(name.slice(1)))
        assert.strictEqual(classify(e), "upstream")
      }
    }))

  it.scopedLive("a refused connection is class connection", () =>
    Effect.gen(function*() {
      const port = yield* freePort
      const client = yield* clientFor("gone", { baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: KEY, model: "m" })
      const e = leftOf(yield* ask(client))
      assert.strictEqual(e.errorClass, "connection")
      assert.isUndefined(e.status)
      assert.notInclude(e.message, KEY)
    }))

  it.scopedLive("a request that is never answered fails with class timeout at the request deadline", () =>
    Effect.gen(function*() {
      const server = yield* mock([{ name: "h", hang: [{ rate: 1 }] }])
      const client = yield* clientFor("h", { baseUrl: baseOf(server, "h"), apiKey: KEY, model: "m" })
      const e = leftOf(yield* Effect.either(client.complete({ messages: [{ role: "user", content: "x" }], timeoutMs: 200 })))
      assert.strictEqual(e.errorClass, "timeout")
      assert.strictEqual(classify(e), "timeout")
    }))

  it.scopedLive("a 2xx body that is not a chat completion is class invalid", () =>
    Effect.gen(function*() {
      for (const body of ["{\"choices\":[]}", "not json at all", "{\"choices\":[{\"message\":{\"content\":null}}]}"]) {
        const { url } = yield* rawServer(200, body)
        const client = yield* clientFor("raw", { baseUrl: url, apiKey: KEY, model: "m" })
        const e = leftOf(yield* ask(client))
        assert.strictEqual(e.errorClass, "invalid", body)
        assert.strictEqual(classify(e), "invalid")
      }
    }))

  it.scopedLive("the key is masked even when a server echoes it in an error body", () =>
    Effect.gen(function*() {
      const { url } = yield* rawServer(401, JSON.stringify({ error: { message: `invalid key ${KEY}` } }))
      const client = yield* clientFor("echo", { baseUrl: url, apiKey: KEY, model: "m" })
      const e = leftOf(yield* ask(client))
      assert.strictEqual(e.errorClass, "fatal")
      assert.notInclude(e.message, KEY)
      assert.include(e.message, "invalid key ***")
      assert.notInclude(JSON.stringify(e), KEY)
    }))

  it.live("the key can come from an environment variable; a missing one is a ConfigError naming it", () =>
    Effect.gen(function*() {
      process.env["ASSAY_CHAT_TEST_KEY"] = KEY
      const ok = yield* Effect.either(clientFor("env", { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "ASSAY_CHAT_TEST_KEY" }))
      assert.isTrue(Either.isRight(ok))
      const missing = yield* Effect.either(clientFor("env2", { baseUrl: "http://x/v1", apiKeyEnv: "ASSAY_NO_SUCH_VAR_42" }))
      assert.isTrue(Either.isLeft(missing))
      assert.include(String((Either.getLeft(missing) as Option.Some<{ message: string }>).value.message), "ASSAY_NO_SUCH_VAR_42")
      delete process.env["ASSAY_CHAT_TEST_KEY"]
    }))
})

describe("chat task", () => {
  it("records its behaviour parameters, never a key, and refuses bad options", () => {
    const t = chat({ model: "gpt-x", temperature: 0, maxTokens: 5, system: "be brief" })
    assert.strictEqual(t.options.resource, "llm")
    assert.deepStrictEqual(t.parameters["model"], "gpt-x")
    assert.deepStrictEqual(t.parameters["temperature"], 0)
    assert.deepStrictEqual(t.parameters["maxTokens"], 5)
    assert.notStrictEqual(
      Pipeline.make("a", chat({ temperature: 0 })).specDigest,
      Pipeline.make("a", chat({ temperature: 1 })).specDigest
    )
    assert.throws(() => chat({ temperature: 7 }), /temperature/)
    assert.throws(() => chat({ maxTokens: 0 }), /maxTokens/)
    assert.throws(() => chat({ modle: "x" } as never), /unknown option "modle"/)
  })

  it("renders templates from the input's fields", () => {
    assert.strictEqual(renderTemplate("Q: {{q}} / {{meta.n}} / {{missing}}", { q: "why", meta: { n: 3 } }), "Q: why / 3 / ")
    assert.strictEqual(maskText(`a ${KEY} b ${KEY}`, [KEY]), "a *** b ***")
  })

  it.scopedLive("through the runner: usage reported to the lease, endpoint faults retried, key in no store byte", () =>
    Effect.gen(function*() {
      const server = yield* mock([
        // its 429s (an empty bucket) say the exact wait (`retry-after-ms`: tens of ms), not
        // `Retry-After: 1` (whole seconds, at least 1: the run waited ~13 s of real time)
        { name: "ok", latency: { medianMs: 2 }, errorRate: 0.3, errorStatuses: [500, 503], rps: 50, burst: 3, rateLimitSignal: "retry-after-ms" }
      ])
      const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-chat-"))
      const file = NodePath.join(dir, "state.db")
      // One endpoint answering 5xx 30% of the time: health must not take it out of rotation
      // (the default cooldown is 30 s), this test is about usage, retries and the key.
      const resource = Resource.make("llm", {
        id: "ok",
        capacity: 4,
        degradeAfter: 1000,
        deadAfter: 1000,
        options: { baseUrl: baseOf(server, "ok"), apiKey: KEY, model: "mock-spam-1" },
        factory: chatClientFactory()
      })
      // 30 attempts: with 429s answered in ms (ci39), eight tasks retrying into one 50 rps bucket
      // may meet an empty bucket again and again; eight attempts ran out once under CI load
      // (23 of 24 succeeded). The test is about usage, retries and the key, not exhaustion
      const ask = chat({ retry: { maxAttempts: 30, base: "20 millis", cap: "200 millis" }, temperature: 0 })
      const template = Pipeline.make("chat-store", ask)
      const prompts = Array.from({ length: 24 }, (_, i) => ({ prompt: `--- email ---\nitem ${i}: meeting notes\n--- end of email ---` }))
      const env = Layer.provideMerge(
        Runner.layer({ handleSignals: false, concurrency: 8 }),
        Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([Pool.make("llm", [resource])]))
      )
      const { report, snapshot, errors } = yield* Effect.gen(function*() {
        const report = yield* Runner.run(template.map(prompts))
        const pools = yield* Pool.Pools
        const snapshot = yield* pools.snapshot("llm")
        const store = yield* Store
        const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
        return { report, snapshot, errors: attempts.filter((a) => a.outcome !== "succeeded") }
      }).pipe(Effect.provide(env))
      assert.strictEqual(report.stats.byState.succeeded, 24)
      // the mock's errors were retried, recorded with their class, and never carry the key
      assert.isAbove(errors.length, 0)
      for (const a of errors) {
        assert.include(["upstream", "rate_limit"], a.errorClass)
        assert.notInclude(a.errorMessage ?? "", KEY)
      }
      // usage reached the pool: one report per success with the server's token counts
      const log = (yield* server.log).filter((e) => e.status === 200)
      assert.strictEqual(log.length, 24)
      assert.isAbove(snapshot[0]!.usage["tokens"] ?? 0, 24)
      assert.isDefined(snapshot[0]!.latencyEmaMs)
      // the SQLite file (and its WAL) never contain the key
      for (const f of fs.readdirSync(dir)) {
        const bytes = fs.readFileSync(NodePath.join(dir, f))
        assert.strictEqual(bytes.indexOf(KEY), -1, `${f} contains the key`)
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }), 60_000)

  it.scopedLive("through the runner: a hung request and a task timeout end as class timeout", () =>
    Effect.gen(function*() {
      const server = yield* mock([{ name: "h", hang: [{ rate: 1 }] }])
      const resource = Resource.make("llm", {
        id: "h",
        options: { baseUrl: baseOf(server, "h"), apiKey: KEY, model: "m" },
        factory: chatClientFactory()
      })
      const template = Pipeline.make("chat-hang", chat({ timeout: "300 millis", retry: { maxAttempts: 1 } }))
      const env = Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", [resource])]))
      )
      const errors = yield* Effect.gen(function*() {
        const report = yield* Runner.run(template.map([{ prompt: "x" }]))
        assert.strictEqual(report.stats.byState.failed, 1)
        const store = yield* Store
        return yield* store.errors({ runId: report.runId })
      }).pipe(Effect.provide(env))
      assert.strictEqual(errors[0]!.errorClass, "timeout")
    }), 20_000)
})

// ---------------------------------------------------------------------------------------------
// C5: a 429 storm is absorbed, and a throttled key is left alone
// ---------------------------------------------------------------------------------------------

/** One request as the client saw it: resource, when it was sent, when its answer came, status. */
interface Sent {
  readonly resourceId: string
  readonly sentAt: number
  readonly doneAt: number
  readonly retryAfterMs: number | undefined
}

/**
 * A chat client factory that records, client side, when each request was sent and when its
 * answer (or 429) arrived, so that "a request sent while a 429 of the same key still
 * advertised its Retry-After" can be checked exactly (requests already in flight when the 429
 * arrived are not violations: they were sent before anyone knew).
 */
const recordingFactory = (sent: Array<Sent>) => (resource: ResourceInfo) =>
  Effect.map(chatClientFactory()(resource), (client): ChatClient => ({
    ...client,
    complete: (request) =>
      Effect.gen(function*() {
        const sentAt = Date.now()
        const r = yield* Effect.either(client.complete(request))
        sent.push({
          resourceId: client.resourceId,
          sentAt,
          doneAt: Date.now(),
          retryAfterMs: Either.isLeft(r) ? r.left.retryAfterMs : undefined
        })
        return yield* r
      })
  }))

/** Requests sent to a resource while one of its 429s (already received) still advertised Retry-After. */
const insideRetryAfter = (sent: ReadonlyArray<Sent>) => {
  const violations: Array<string> = []
  for (const e of sent) {
    if (e.retryAfterMs === undefined) continue
    for (const later of sent) {
      if (later.resourceId === e.resourceId && later.sentAt > e.doneAt && later.sentAt < e.doneAt + e.retryAfterMs) {
        violations.push(`${later.resourceId}: sent ${later.sentAt - e.doneAt} ms after a 429 advertising ${e.retryAfterMs} ms`)
      }
    }
  }
  return violations
}

/**
 * C5: 60 chat pipelines, 20 at a time, over `keys`; the mock throttles key A for `throttleS`
 * seconds (real time), each 429 with `Retry-After: 2`.
 */
const c5 = (keys: ReadonlyArray<{ id: string; key: string }>, throttleS = 10) =>
  Effect.gen(function*() {
    const server = yield* mock([
      { name: "c5", latency: { medianMs: 5 }, throttle: { forS: throttleS, retryAfterS: 2, keys: ["key-A"] } }
    ])
    const sent: Array<Sent> = []
    const resources = keys.map(({ id, key }) =>
      Resource.make("llm", {
        id,
        capacity: 20,
        // a short cooldown: the pool must follow the server's Retry-After, not its own timer
        cooldown: "1 second",
        options: { baseUrl: baseOf(server, "c5"), apiKey: key, model: "mock-spam-1" },
        factory: recordingFactory(sent)
      })
    )
    const template = Pipeline.make("c5", chat({ retry: { maxAttempts: 10, base: "100 millis", cap: "2 seconds" } }))
    const items = Array.from({ length: 60 }, (_, i) => ({ prompt: `--- email ---\nC5 item ${i}\n--- end of email ---` }))
    const env = Layer.provideMerge(
      Runner.layer({ handleSignals: false, concurrency: 20 }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", resources)]))
    )
    const startedAt = Date.now()
    const { attempts, outputs, report } = yield* Effect.gen(function*() {
      const outputs: Array<{ resourceId: string; at: number }> = []
      const report = yield* Runner.run(template.map(items), {
        onPipelineFinished: (_record, output) =>
          Effect.sync(() => {
            if (Option.isSome(output)) {
              outputs.push({ resourceId: (output.value as { resourceId: string }).resourceId, at: Date.now() })
            }
          })
      })
      const store = yield* Store
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      return { attempts, outputs, report }
    }).pipe(Effect.provide(env))
    const log = yield* server.log
    return { attempts, outputs, report, log, sent, startedAt }
  })

describe("C5 against the mock server", () => {
  it.scopedLive("one throttled key: 0 failed, < 100 attempts, every 429 rate_limit, no request inside Retry-After", () =>
    Effect.gen(function*() {
      // throttled for 5 s: the run waits out two or three Retry-After windows (with 10 s, five:
      // the same assertions, 5 s more of real time)
      const { attempts, log, report, sent } = yield* c5([{ id: "A", key: "key-A" }], 5)
      assert.strictEqual(report.stats.byState.failed, 0)
      assert.strictEqual(report.stats.byState.succeeded, 60)
      assert.isBelow(attempts.length, 100, `${attempts.length} attempts`)
      const failed = attempts.filter((a) => a.outcome !== "succeeded")
      assert.isAbove(failed.length, 0)
      for (const a of failed) assert.strictEqual(a.errorClass, "rate_limit")
      assert.strictEqual(failed.length, log.filter((e) => e.status === 429).length)
      assert.strictEqual(sent.length, log.length) // every request the mock saw, the client sent once
      assert.deepStrictEqual(insideRetryAfter(sent), [])
    }), 45_000)

  it.scopedLive("keys A (throttled) and B: at least 90% of the first 10 s successes are served by B", () =>
    Effect.gen(function*() {
      const { attempts, outputs, report, sent, startedAt } = yield* c5([
        { id: "A", key: "key-A" },
        { id: "B", key: "key-B" }
      ])
      assert.strictEqual(report.stats.byState.failed, 0)
      assert.isBelow(attempts.length, 100)
      for (const a of attempts.filter((a) => a.outcome !== "succeeded")) assert.strictEqual(a.errorClass, "rate_limit")
      const early = outputs.filter((o) => o.at - startedAt < 10_000)
      assert.isAbove(early.length, 0)
      const byB = early.filter((o) => o.resourceId === "B").length
      assert.isAtLeast(byB / early.length, 0.9, `${byB}/${early.length} served by B`)
      assert.isTrue(sent.some((e) => e.resourceId === "A" && e.retryAfterMs === 2000))
      assert.isFalse(sent.some((e) => e.resourceId === "B" && e.retryAfterMs !== undefined))
      assert.deepStrictEqual(insideRetryAfter(sent), [])
    }), 45_000)
})
