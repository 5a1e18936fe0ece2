import { FileSystem, HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { NodeFileSystem, NodeHttpServer } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Schema, TestClock } from "effect"
import * as os from "node:os"
import * as NodePath from "node:path"
import { classify } from "../../src/domain/Errors.js"
import { digest } from "../../src/domain/Json.js"
import { decodeProfile, makeApp, MockProfile, presetEndpoints, scoreEmail, serve } from "../../src/services/MockLlm.js"
import { emailSection } from "../../src/services/internal/mockLlm.js"

const messages = (text: string) => [{ role: "user", content: text }]

const profileOf = (input: unknown) => Effect.orDie(decodeProfile(input))

// ---------------------------------------------------------------------------------------------
// helpers for the TestClock tests: the app on NodeHttpServer.layerTest, requests through its client
// ---------------------------------------------------------------------------------------------

const chatVia = (path: string, key: string | undefined, text: string) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    let req = HttpClientRequest.post(path).pipe(
      HttpClientRequest.bodyUnsafeJson({ model: "m", messages: messages(text) })
    )
    if (key !== undefined) req = HttpClientRequest.bearerToken(req, key)
    const res = yield* client.execute(req)
    const body = yield* res.json
    return { status: res.status, retryAfter: res.headers["retry-after"], body: body as any }
  })

const serveApp = (input: unknown) =>
  Effect.gen(function*() {
    const profile = yield* profileOf(input)
    const mock = yield* makeApp({ profile })
    yield* HttpServer.serveEffect(mock.app)
    return mock
  })

// ---------------------------------------------------------------------------------------------
// helpers for the live tests: a real server on port 0 and fetch
// ---------------------------------------------------------------------------------------------

const post = (url: string, key: string | undefined, body: unknown, signal?: AbortSignal) =>
  Effect.promise(async () => {
    const headers: Record<string, string> = { "content-type": "application/json" }
    if (key !== undefined) headers["authorization"] = `Bearer ${key}`
    const res = await fetch(url, { method: "POST", headers, body: JSON.stringify(body), ...(signal ? { signal } : {}) })
    return { status: res.status, headers: res.headers, body: (await res.json()) as any }
  })

const getJson = (url: string) => Effect.promise(async () => (await (await fetch(url)).json()) as any)

describe("MockLlm profile", () => {
  it.effect("decodes defaults", () =>
    Effect.gen(function*() {
      const p = yield* decodeProfile({ endpoints: [{ name: "a" }] })
      assert.strictEqual(p.seed, 0)
      assert.strictEqual(p.endpoints[0].model, "mock-spam-1")
      assert.deepStrictEqual(p.endpoints[0].errorStatuses, [500, 503])
      assert.strictEqual(p.endpoints[0].latency.medianMs, 20)
    }))

  it.effect("reports every problem with its field path", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(decodeProfile({
        endpoints: [{ name: "a", rps: -1, errorRate: 2, colour: "red" }]
      }))
      const paths = e.issues.map((i) => i.path)
      assert.include(paths, "endpoints[0].rps")
      assert.include(paths, "endpoints[0].errorRate")
      assert.include(paths, "endpoints[0].colour")
      assert.strictEqual(classify(e), "fatal")
    }))

  it.effect("rejects duplicate endpoint names and an empty endpoint list", () =>
    Effect.gen(function*() {
      const dup = yield* Effect.flip(decodeProfile({ endpoints: [{ name: "a" }, { name: "a" }] }))
      assert.match(dup.message, /duplicate endpoint name "a"/)
      assert.include(dup.issues.map((i) => i.path), "endpoints[1].name")
      const empty = yield* Effect.flip(decodeProfile({ endpoints: [] }))
      assert.isTrue(empty.issues.some((i) => i.path.startsWith("endpoints")))
    }))

  it("presets cycle with unique names", () => {
    const names = presetEndpoints(5).map((e) => e.name)
    assert.deepStrictEqual(names, ["fast", "steady", "limited", "fast-2", "steady-2"])
    assert.doesNotThrow(() => MockProfile.make({ endpoints: presetEndpoints(5) as any }))
  })
})

describe("MockLlm scorer", () => {
  it("separates obvious spam from obvious ham, deterministically", () => {
    const spam = "Subject: WIN CASH NOW!!!\n\nDear friend, click here for FREE money. 100% guaranteed, act now! http://x.biz"
    const ham = "Subject: Re: kernel patch\n\nOn Monday Bob wrote:\n> the patch breaks the build\nThanks, I think the config script is wrong."
    assert.strictEqual(scoreEmail(spam).label, "spam")
    assert.strictEqual(scoreEmail(ham).label, "ham")
    assert.deepStrictEqual(scoreEmail(spam), scoreEmail(spam))
  })

  it("reads only the email section of a prompt", () => {
    const prompt = "Answer spam or ham. FREE FREE FREE\n--- email ---\nhello\n--- end of email ---\nmore"
    assert.strictEqual(emailSection(prompt), "\nhello\n")
    assert.strictEqual(emailSection("no markers"), "no markers")
  })
})

describe("MockLlm over HTTP (TestClock)", () => {
  it.scoped("token bucket: 429 with Retry-After, recovery after it", () =>
    Effect.gen(function*() {
      yield* serveApp({ endpoints: [{ name: "a", rps: 1, burst: 2, latency: { medianMs: 0 } }] })
      const r1 = yield* chatVia("/e/a/v1/chat/completions", "k", "hello 1")
      const r2 = yield* chatVia("/e/a/v1/chat/completions", "k", "hello 2")
      const r3 = yield* chatVia("/e/a/v1/chat/completions", "k", "hello 3")
      assert.deepStrictEqual([r1.status, r2.status, r3.status], [200, 200, 429])
      assert.strictEqual(r3.retryAfter, "1")
      assert.strictEqual(r3.body.error.type, "rate_limit_exceeded")
      // another key has its own bucket
      assert.strictEqual((yield* chatVia("/e/a/v1/chat/completions", "other", "hello")).status, 200)
      yield* TestClock.adjust(Duration.millis(999))
      assert.strictEqual((yield* chatVia("/e/a/v1/chat/completions", "k", "hello 4")).status, 429)
      yield* TestClock.adjust(Duration.millis(1))
      assert.strictEqual((yield* chatVia("/e/a/v1/chat/completions", "k", "hello 5")).status, 200)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("Retry-After follows the refill rate", () =>
    Effect.gen(function*() {
      yield* serveApp({ endpoints: [{ name: "a", rps: 0.25, burst: 1, latency: { medianMs: 0 } }] })
      assert.strictEqual((yield* chatVia("/v1/chat/completions", "k", "x")).status, 200)
      const limited = yield* chatVia("/v1/chat/completions", "k", "y")
      assert.strictEqual(limited.status, 429)
      assert.strictEqual(limited.retryAfter, "4")
      yield* TestClock.adjust(Duration.seconds(4))
      assert.strictEqual((yield* chatVia("/v1/chat/completions", "k", "z")).status, 200)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("storm window answers its status only inside the window", () =>
    Effect.gen(function*() {
      yield* serveApp({
        endpoints: [{ name: "a", latency: { medianMs: 0 }, storms: [{ fromS: 10, toS: 20, status: 503 }] }]
      })
      assert.strictEqual((yield* chatVia("/v1/chat/completions", "k", "a")).status, 200)
      yield* TestClock.adjust(Duration.seconds(10))
      const storm = yield* chatVia("/v1/chat/completions", "k", "b")
      assert.strictEqual(storm.status, 503)
      assert.strictEqual(classify({ status: storm.status }), "upstream")
      yield* TestClock.adjust(Duration.millis(9_999))
      assert.strictEqual((yield* chatVia("/v1/chat/completions", "k", "c")).status, 503)
      yield* TestClock.adjust(Duration.millis(1))
      assert.strictEqual((yield* chatVia("/v1/chat/completions", "k", "d")).status, 200)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("a 429 storm sends Retry-After up to the end of the window", () =>
    Effect.gen(function*() {
      yield* serveApp({
        endpoints: [{ name: "a", latency: { medianMs: 0 }, storms: [{ fromS: 0, toS: 5, status: 429 }] }]
      })
      yield* TestClock.adjust(Duration.millis(1500))
      const r = yield* chatVia("/v1/chat/completions", "k", "a")
      assert.strictEqual(r.status, 429)
      assert.strictEqual(r.retryAfter, "4")
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("C5: one throttled key answers 429 + Retry-After 2 for the first 10 s, the other is served", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp({
        endpoints: [{ name: "a", latency: { medianMs: 0 }, throttle: { forS: 10, retryAfterS: 2, keys: ["key-A"] } }]
      })
      const a = yield* chatVia("/v1/chat/completions", "key-A", "x")
      const b = yield* chatVia("/v1/chat/completions", "key-B", "x")
      assert.strictEqual(a.status, 429)
      assert.strictEqual(a.retryAfter, "2")
      assert.strictEqual(b.status, 200)
      yield* TestClock.adjust(Duration.seconds(10))
      assert.strictEqual((yield* chatVia("/v1/chat/completions", "key-A", "y")).status, 200)
      const log = yield* mock.log
      assert.deepStrictEqual(log.map((e) => [e.status, e.reason]), [[429, "throttle"], [200, "ok"], [200, "ok"]])
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("max concurrency: a request beyond it is answered 429 while another is in progress", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp({ endpoints: [{ name: "a", maxConcurrency: 1, latency: { medianMs: 100, p95Ms: 100 } }] })
      const first = yield* Effect.fork(chatVia("/v1/chat/completions", "k", "first"))
      // wait (in real time) until the first request sleeps on the TestClock inside the server
      while ((yield* TestClock.sleeps()).length === 0) {
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 5)))
      }
      const second = yield* chatVia("/v1/chat/completions", "k", "second")
      assert.strictEqual(second.status, 429)
      assert.strictEqual(second.retryAfter, "1")
      yield* TestClock.adjust(Duration.millis(100))
      const r1 = yield* Fiber.join(first)
      assert.strictEqual(r1.status, 200)
      assert.deepStrictEqual((yield* mock.log).map((e) => e.reason), ["concurrency", "ok"])
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))
})

describe("MockLlm over HTTP (real server)", () => {
  const quiet = { endpoints: [{ name: "main", model: "mock-x", latency: { medianMs: 0 } }, { name: "other" }] }

  it.scopedLive("chat completion shape, usage and the spam/ham answer", () =>
    Effect.gen(function*() {
      const server = yield* serve({ profile: yield* profileOf(quiet) })
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/)
      assert.deepStrictEqual(server.endpoints.map((e) => e.baseUrl), [`${server.url}/e/main/v1`, `${server.url}/e/other/v1`])
      const prompt = "Classify.\n--- email ---\nSubject: FREE CASH!!!\n\nClick here now, 100% guaranteed money http://a http://b http://c\n--- end of email ---"
      const r = yield* post(`${server.endpoints[0]!.baseUrl}/chat/completions`, "sk-test", { model: "gpt-x", messages: messages(prompt) })
      assert.strictEqual(r.status, 200)
      assert.strictEqual(r.body.object, "chat.completion")
      assert.strictEqual(r.body.model, "gpt-x")
      assert.match(r.body.id, /^chatcmpl-[0-9a-f]{24}$/)
      assert.isNumber(r.body.created)
      assert.strictEqual(r.body.choices[0].message.role, "assistant")
      assert.strictEqual(r.body.choices[0].message.content, "spam")
      assert.strictEqual(r.body.choices[0].finish_reason, "stop")
      const u = r.body.usage
      assert.strictEqual(u.prompt_tokens, Math.ceil(prompt.length / 4))
      assert.strictEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)
      const ham = yield* post(`${server.url}/v1/chat/completions`, "sk-test", {
        model: "m",
        messages: [{ role: "system", content: "You classify." }, { role: "user", content: [{ type: "text", text: "Subject: Re: patch\n\nBob wrote:\n> it fails\nThanks" }] }]
      })
      assert.strictEqual(ham.body.choices[0].message.content, "ham")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scopedLive("models, 401 without a key, 400 on a bad body, 404 on an unknown endpoint", () =>
    Effect.gen(function*() {
      const server = yield* serve({ profile: yield* profileOf(quiet) })
      const models = yield* getJson(`${server.url}/e/main/v1/models`)
      assert.deepStrictEqual(models.data.map((m: any) => m.id), ["mock-x"])
      assert.strictEqual(models.object, "list")
      const noKey = yield* post(`${server.url}/e/main/v1/chat/completions`, undefined, { model: "m", messages: messages("x") })
      assert.strictEqual(noKey.status, 401)
      assert.strictEqual(noKey.body.error.code, "invalid_api_key")
      const bad = yield* post(`${server.url}/e/main/v1/chat/completions`, "k", { messages: "nope" })
      assert.strictEqual(bad.status, 400)
      const unknown = yield* post(`${server.url}/e/nope/v1/chat/completions`, "k", { model: "m", messages: messages("x") })
      assert.strictEqual(unknown.status, 404)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  const noisy = (seed: number) => ({
    seed,
    endpoints: [{
      name: "n",
      latency: { medianMs: 3, p95Ms: 10, slowRate: 0.1, slowMs: 15 },
      errorRate: 0.3,
      answers: { noiseRate: 0.3, invalidRate: 0.1 }
    }]
  })

  const runSequence = (seed: number) =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* serve({ profile: yield* profileOf(noisy(seed)) })
      for (let i = 0; i < 30; i++) {
        yield* post(`${server.url}/v1/chat/completions`, i % 2 === 0 ? "k1" : "k2", { model: "m", messages: messages(`email ${i % 7}`) })
      }
      return (yield* server.log).map((e) => ({ status: e.status, latencyMs: e.latencyMs, answer: e.answer, fingerprint: e.fingerprint, counter: e.counter }))
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.live("deterministic for a seed: same requests give the same statuses, latencies and answers", () =>
    Effect.gen(function*() {
      const a = yield* runSequence(7)
      const b = yield* runSequence(7)
      const c = yield* runSequence(8)
      assert.deepStrictEqual(a, b)
      assert.notDeepEqual(a.map((e) => e.latencyMs), c.map((e) => e.latencyMs))
      // the profile's error rate and answer noise actually show up
      assert.isTrue(a.some((e) => e.status === 500 || e.status === 503))
      assert.isTrue(a.some((e) => e.status === 200))
      assert.isTrue(a.some((e) => e.answer !== undefined && e.answer !== "spam" && e.answer !== "ham"))
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scopedLive("request log: in memory, over HTTP and as JSONL, with the key hashed", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const file = NodePath.join(os.tmpdir(), `assay-mock-log-${process.pid}-${Date.now()}.jsonl`)
      yield* Effect.addFinalizer(() => Effect.orDie(fs.remove(file, { force: true })))
      const server = yield* serve({ profile: yield* profileOf(quiet), logFile: file })
      yield* post(`${server.url}/e/main/v1/chat/completions`, "secret-key-123", { model: "m", messages: messages("same") })
      yield* post(`${server.url}/e/other/v1/chat/completions`, "secret-key-123", { model: "m", messages: messages("same") })
      yield* post(`${server.url}/e/main/v1/chat/completions`, undefined, { model: "m", messages: messages("same") })
      const log = yield* server.log
      assert.strictEqual(log.length, 3)
      assert.deepStrictEqual(log.map((e) => e.seq), [1, 2, 3])
      assert.deepStrictEqual(log.map((e) => e.endpoint), ["main", "other", "main"])
      assert.deepStrictEqual(log.map((e) => e.status), [200, 200, 401])
      assert.strictEqual(log[0]!.fingerprint, log[1]!.fingerprint)
      assert.strictEqual(log[0]!.fingerprint, digest(JSON.stringify([{ content: "same", role: "user" }])))
      assert.strictEqual(log[0]!.keyHash, digest("assay-mock-llm-key:secret-key-123"))
      assert.isNull(log[2]!.keyHash)
      const http = yield* getJson(`${server.url}/_mock/log?endpoint=main`)
      assert.deepStrictEqual(http.entries.map((e: any) => e.seq), [1, 3])
      const since = yield* getJson(`${server.url}/_mock/log?since=2`)
      assert.deepStrictEqual(since.entries.map((e: any) => e.seq), [3])
      const text = yield* fs.readFileString(file)
      assert.notInclude(text, "secret-key-123")
      const lines = text.trim().split("\n").map((l) => JSON.parse(l))
      assert.deepStrictEqual(lines.map((l) => l.seq), [1, 2, 3])
      assert.strictEqual(lines[0].fingerprint, log[0]!.fingerprint)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scopedLive("hang rule: the client times out, the server keeps serving and shuts down", () =>
    Effect.gen(function*() {
      const inner = Effect.gen(function*() {
        const server = yield* serve({
          profile: yield* profileOf({ endpoints: [{ name: "h", latency: { medianMs: 0 }, hang: [{ contains: "item 137" }] }] })
        })
        const hung = yield* post(`${server.url}/v1/chat/completions`, "k", { model: "m", messages: messages("item 137") }, AbortSignal.timeout(300)).pipe(
          Effect.as("answered"),
          Effect.catchAllDefect(() => Effect.succeed("timed out"))
        )
        assert.strictEqual(hung, "timed out")
        const ok = yield* post(`${server.url}/v1/chat/completions`, "k", { model: "m", messages: messages("item 138") })
        assert.strictEqual(ok.status, 200)
        const log = yield* server.log
        assert.deepStrictEqual(log.map((e) => [e.status, e.reason]), [[null, "hang"], [200, "ok"]])
        // a hung request still open at shutdown does not keep the server alive
        yield* Effect.promise(() => fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: "Bearer k" },
          body: JSON.stringify({ model: "m", messages: messages("item 137 again") })
        }).catch(() => undefined)).pipe(Effect.forkDaemon)
        while ((yield* server.log).length < 3) yield* Effect.sleep("5 millis")
      })
      yield* Effect.scoped(inner).pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "shutdown hung" }))
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.live("JSON body schema of the log entries", () =>
    Effect.gen(function*() {
      const entries = yield* Effect.scoped(Effect.gen(function*() {
        const server = yield* serve({ profile: yield* profileOf(quiet) })
        yield* post(`${server.url}/v1/chat/completions`, "k", { model: "m", messages: messages("x") })
        return (yield* getJson(`${server.url}/_mock/log`)).entries
      }))
      const Entry = Schema.Struct({ seq: Schema.Number, keyHash: Schema.String, status: Schema.Number, offsetMs: Schema.Number })
      assert.isTrue(Schema.is(Schema.Array(Entry))(entries))
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})
