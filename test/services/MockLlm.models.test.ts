/**
 * The mock's model profiles (issue 15 §9): selection by the request's `model`, the 404 for an
 * unknown model, accuracy measured over many requests, prompt style, token counts and price,
 * per-profile rate limits, the context window, latency on `TestClock`, and the default
 * behaviour left unchanged.
 */
import { HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { NodeContext, NodeFileSystem, NodeHttpServer } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Duration, Effect, Either, FastCheck, Fiber, TestClock } from "effect"
import * as Resource from "../../src/domain/Resource.js"
import { type ChatClient, chatClientFactory } from "../../src/tasks/internal/chat.js"
import {
  builtinModels,
  decodeModelCatalog,
  decodeProfile,
  makeApp,
  type ModelCatalog,
  ModelPricing,
  ModelProfile,
  PromptGains,
  scoreEmail,
  serve
} from "../../src/services/MockLlm.js"
import {
  answerOf,
  costUsd,
  DETAILED_WORDS,
  effectiveAccuracy,
  makeBucket,
  promptStyleOf,
  takeAll
} from "../../src/services/internal/mockModels.js"

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const terse = (email: string) =>
  `Classify this email as spam or ham. Answer with exactly one word: spam or ham.\n--- email ---\n${email}\n--- end of email ---`

const detailedInstructions = Array.from({ length: DETAILED_WORDS }, (_, i) => `rule${i}`).join(" ")
const detailed = (email: string) =>
  `${detailedInstructions}\nAnswer with exactly one word: spam or ham.\n--- email ---\n${email}\n--- end of email ---`

/** Emails the scorer labels spam (even i) and ham (odd i), all different. */
const emailOf = (i: number) =>
  i % 2 === 0
    ? `Subject: WIN CASH NOW ${i}\n\nClick here now!!! FREE money, 100% guaranteed, $${i} http://a http://b http://c`
    : `Subject: Re: patch ${i}\n\nBob wrote:\n> the build fails on item ${i}\nThanks, I think it compiles now`

const catalogOf = (input: unknown) => Effect.orDie(decodeModelCatalog(input))

const serveApp = (profile: unknown, models?: ModelCatalog) =>
  Effect.gen(function*() {
    const mock = yield* makeApp({ profile: yield* Effect.orDie(decodeProfile(profile)), models })
    yield* HttpServer.serveEffect(mock.app)
    return mock
  })

const quiet = { endpoints: [{ name: "a", model: "mock-spam-1", latency: { medianMs: 0 } }] }

const ask = (
  model: string,
  prompt: string | ReadonlyArray<{ role: string; content: string }>,
  extra: Record<string, unknown> = {},
  key = "k"
) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const messages = typeof prompt === "string" ? [{ role: "user", content: prompt }] : prompt
    const res = yield* client.execute(
      HttpClientRequest.post("/v1/chat/completions").pipe(
        HttpClientRequest.bodyUnsafeJson({ model, messages, ...extra }),
        HttpClientRequest.bearerToken(key)
      )
    )
    return { status: res.status, retryAfter: res.headers["retry-after"], body: (yield* res.json) as any }
  })

const getVia = (path: string) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const res = yield* client.execute(HttpClientRequest.get(path))
    return { status: res.status, body: (yield* res.json) as any }
  })

const labelOf = (content: string) => /\bspam\b/i.test(content) ? "spam" : /\bham\b/i.test(content) ? "ham" : "none"

/** Waits (in real time) until a request sleeps on the TestClock inside the server. */
const untilSleeping = Effect.gen(function*() {
  while ((yield* TestClock.sleeps()).length === 0) {
    yield* Effect.promise(() => new Promise((r) => setTimeout(r, 5)))
  }
})

// ---------------------------------------------------------------------------------------------
// pure rules
// ---------------------------------------------------------------------------------------------

describe("MockLlm model profiles: prompt style", () => {
  it("a short one-word prompt is terse and one-word; the input is the email section", () => {
    const s = promptStyleOf([{ role: "user", text: terse("Subject: hi\n\nhello there") }])
    assert.deepStrictEqual(
      { detailed: s.detailed, examples: s.examples, oneWord: s.oneWord },
      { detailed: false, examples: false, oneWord: true }
    )
    assert.strictEqual(s.input, "\nSubject: hi\n\nhello there\n")
    // the marker lines are not instructions
    assert.strictEqual(s.instructionWords, 15)
  })

  it(`${DETAILED_WORDS} words of instructions make a prompt detailed, ${DETAILED_WORDS - 1} do not`, () => {
    const words = (n: number) => Array.from({ length: n }, () => "word").join(" ")
    const at = (n: number) => promptStyleOf([{ role: "user", text: `${words(n)}\n--- email ---\nx\n--- end of email ---` }])
    assert.isTrue(at(DETAILED_WORDS).detailed)
    assert.isFalse(at(DETAILED_WORDS - 1).detailed)
    // the email's own words never count, however long it is
    const longEmail = promptStyleOf([{ role: "user", text: `Classify.\n--- email ---\n${words(500)}\n--- end of email ---` }])
    assert.isFalse(longEmail.detailed)
  })

  it("examples: an assistant turn before the last user message, or the word example", () => {
    const fewShot = promptStyleOf([
      { role: "system", text: "Classify emails." },
      { role: "user", text: "FREE CASH" },
      { role: "assistant", text: "spam" },
      { role: "user", text: "Bob wrote: ok" }
    ])
    assert.isTrue(fewShot.examples)
    assert.strictEqual(fewShot.input, "Bob wrote: ok")
    assert.isTrue(promptStyleOf([{ role: "system", text: "Example: FREE CASH is spam." }, { role: "user", text: "x" }]).examples)
    // an assistant turn after the last user message is not an example
    assert.isFalse(promptStyleOf([{ role: "user", text: "x" }, { role: "assistant", text: "spam" }]).examples)
    // "example" inside the email is input, not instructions
    assert.isFalse(promptStyleOf([{ role: "user", text: terse("for example") }]).examples)
  })

  it("one word: the instructions ask for a bare label", () => {
    for (const t of ["Answer in one word.", "Reply with a single-word label.", "Give the label only.", "Return only the label."]) {
      assert.isTrue(promptStyleOf([{ role: "system", text: t }, { role: "user", text: "x" }]).oneWord, t)
    }
    assert.isFalse(promptStyleOf([{ role: "system", text: "Is this spam? Explain." }, { role: "user", text: "x" }]).oneWord)
  })

  it("effective accuracy: a detailed prompt and examples each remove their share of the error", () => {
    const gains = { instructions: 0.4, examples: 0.3 }
    const style = (detailed: boolean, examples: boolean) => ({ input: "", instructionWords: 0, detailed, examples, oneWord: true })
    assert.closeTo(effectiveAccuracy(0.8, gains, style(false, false)), 0.8, 1e-12)
    assert.closeTo(effectiveAccuracy(0.8, gains, style(true, false)), 1 - 0.2 * 0.6, 1e-12)
    assert.closeTo(effectiveAccuracy(0.8, gains, style(false, true)), 1 - 0.2 * 0.7, 1e-12)
    assert.closeTo(effectiveAccuracy(0.8, gains, style(true, true)), 1 - 0.2 * 0.6 * 0.7, 1e-12)
  })

  it("property: a better prompt never turns a right answer wrong, and the answer depends on nothing else", () => {
    FastCheck.assert(
      FastCheck.property(
        FastCheck.double({ min: 0, max: 1, noNaN: true }),
        FastCheck.double({ min: 0, max: 1, noNaN: true }),
        FastCheck.double({ min: 0, max: 1, noNaN: true }),
        FastCheck.string(),
        FastCheck.integer(),
        (accuracy, instructions, examples, input, seed) => {
          const model = ModelProfile.make({ name: "p", accuracy, promptGains: PromptGains.make({ instructions, examples }) })
          const style = (detailed: boolean, ex: boolean) => ({ input, instructionWords: 0, detailed, examples: ex, oneWord: true })
          const agrees = (detailed: boolean, ex: boolean) => answerOf(model, style(detailed, ex), "spam", seed, "f", 10).agrees
          const base = agrees(false, false)
          // the same arguments: the same answer
          if (agrees(false, false) !== base) return false
          // a right answer stays right with any better prompt
          return !base || (agrees(true, false) && agrees(false, true) && agrees(true, true))
        }
      ),
      { endOnFailure: true }
    )
  })

  it("cost: tokens / 1000 × price per 1k, rounded to 1e-9 USD", () => {
    const pricing = ModelPricing.make({ promptPer1k: 0.0025, completionPer1k: 0.01 })
    assert.strictEqual(costUsd(pricing, 1000, 10), 0.0026)
    assert.strictEqual(costUsd(pricing, 3, 1), 0.0000175)
    assert.strictEqual(costUsd(ModelPricing.make({}), 1000, 1000), 0)
  })

  it("rate-limit buckets: a token from every bucket or none", () => {
    const perSecond = makeBucket(1, 2, 0)
    const perMinute = makeBucket(3 / 60, 3, 0)
    assert.isUndefined(takeAll([perSecond, perMinute], 0))
    assert.isUndefined(takeAll([perSecond, perMinute], 0))
    assert.strictEqual(takeAll([perSecond, perMinute], 0), 1) // the per-second bucket is empty
    // after 1 s the per-second bucket has a token again; the per-minute one still has 1
    assert.isUndefined(takeAll([perSecond, perMinute], 1000))
    // now the per-minute bucket has 0.05 + 2 s × 0.05 = 0.15: ⌈0.85 / 0.05⌉ = 17 s until it has one
    assert.strictEqual(takeAll([perSecond, perMinute], 3000), 17)
    assert.closeTo(perSecond.tokens, 2, 1e-9) // not taken: all or nothing
  })
})

describe("MockLlm model profiles: the catalog file", () => {
  it.effect("defaults: unknownModel reject, gains 0.3 / 0.2, no price, no latency", () =>
    Effect.gen(function*() {
      const c = yield* decodeModelCatalog({ models: [{ name: "m1", accuracy: 0.5 }, { name: "org/m-7b:free", accuracy: 1 }] })
      assert.strictEqual(c.unknownModel, "reject")
      const m = c.models[0]
      assert.deepStrictEqual([m.promptGains.instructions, m.promptGains.examples], [0.3, 0.2])
      assert.deepStrictEqual([m.pricing.promptPer1k, m.pricing.completionPer1k], [0, 0])
      assert.deepStrictEqual([m.latency.baseMs, m.latency.jitterMs, m.latency.perKTokensMs, m.chattiness], [0, 0, 0, 0])
      assert.isUndefined(m.rateLimit)
      assert.isUndefined(m.maxContext)
    }))

  it.effect("every problem with its field path", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(decodeModelCatalog({
        models: [
          { name: "ok", accuracy: 1.5, colour: "red" },
          { name: "b", accuracy: 0.5, pricing: { promptPer1k: -1 }, rateLimit: { rps: 0 } },
          { name: "bad name", accuracy: 0.5 }
        ],
        unknownModel: "ignore"
      }))
      const paths = e.issues.map((i) => i.path)
      for (const p of ["models[0].accuracy", "models[0].colour", "models[1].pricing.promptPer1k", "models[1].rateLimit.rps", "models[2].name", "unknownModel"]) {
        assert.include(paths, p)
      }
      assert.match(e.message, /^invalid mock-llm model profiles: /)
    }))

  it.effect("duplicate names and an empty list are refused", () =>
    Effect.gen(function*() {
      const dup = yield* Effect.flip(decodeModelCatalog({ models: [{ name: "x", accuracy: 1 }, { name: "x", accuracy: 1 }] }))
      assert.include(dup.issues.map((i) => i.path), "models[1].name")
      assert.match(dup.message, /duplicate model name "x"/)
      const empty = yield* Effect.flip(decodeModelCatalog({ models: [] }))
      // at least one model: the first is missing
      assert.deepStrictEqual(empty.issues, [{ path: "models[0]", message: "is missing" }])
    }))

  it("the built-in profiles: small is cheaper, faster and less accurate than large", () => {
    const [small, medium, large] = builtinModels.models as unknown as [any, any, any]
    assert.deepStrictEqual(builtinModels.models.map((m) => m.name), ["small", "medium", "large"])
    assert.strictEqual(builtinModels.unknownModel, "default")
    assert.isBelow(small.accuracy, medium.accuracy)
    assert.isBelow(medium.accuracy, large.accuracy)
    assert.isBelow(small.pricing.promptPer1k, medium.pricing.promptPer1k)
    assert.isBelow(medium.pricing.promptPer1k, large.pricing.promptPer1k)
    assert.isBelow(small.latency.baseMs, large.latency.baseMs)
  })
})

// ---------------------------------------------------------------------------------------------
// over HTTP, on the TestClock
// ---------------------------------------------------------------------------------------------

const twoModels = {
  models: [
    { name: "lo", accuracy: 0.6, pricing: { promptPer1k: 0.001, completionPer1k: 0.002 } },
    { name: "hi", accuracy: 0.95, pricing: { promptPer1k: 0.01, completionPer1k: 0.03 }, maxContext: 4000 }
  ]
}

describe("MockLlm model profiles over HTTP (TestClock)", () => {
  it.scoped("the request's model selects the profile; the endpoint's model keeps the default behaviour", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp(quiet, yield* catalogOf(twoModels))
      const prompt = terse(emailOf(0))
      const lo = yield* ask("lo", prompt)
      const def = yield* ask("mock-spam-1", prompt)
      assert.strictEqual(lo.status, 200)
      assert.strictEqual(lo.body.model, "lo")
      assert.isNumber(lo.body.usage.cost)
      assert.strictEqual(def.status, 200)
      assert.strictEqual(def.body.choices[0].message.content, "spam")
      assert.notProperty(def.body.usage, "cost")
      const log = yield* mock.log
      assert.deepStrictEqual(log.map((e) => [e.model, e.style]), [["lo", "one-word"], [undefined, undefined]])
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("an unknown model: 404 model_not_found naming the known models, with a did-you-mean", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp(quiet, yield* catalogOf(twoModels))
      const r = yield* ask("hii", terse("x"))
      assert.strictEqual(r.status, 404)
      assert.strictEqual(r.body.error.code, "model_not_found")
      assert.strictEqual(r.body.error.param, "model")
      assert.strictEqual(r.body.error.type, "invalid_request_error")
      assert.include(r.body.error.message, "\"hii\"")
      assert.include(r.body.error.message, "Known models: mock-spam-1, lo, hi.")
      assert.include(r.body.error.message, "Did you mean \"hi\"?")
      assert.deepStrictEqual((yield* mock.log).map((e) => [e.status, e.reason]), [[404, "unknown_model"]])
      const retrieve = yield* getVia("/v1/models/nope")
      assert.strictEqual(retrieve.status, 404)
      assert.strictEqual(retrieve.body.error.code, "model_not_found")
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("unknownModel default: any other name keeps the default behaviour (as without profiles)", () =>
    Effect.gen(function*() {
      yield* serveApp(quiet, yield* catalogOf({ ...twoModels, unknownModel: "default" }))
      const r = yield* ask("gpt-x", terse(emailOf(1)))
      assert.strictEqual(r.status, 200)
      assert.strictEqual(r.body.model, "gpt-x")
      assert.strictEqual(r.body.choices[0].message.content, "ham")
      assert.notProperty(r.body.usage, "cost")
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("accuracy over 200 requests: each profile agrees with the scorer about as often as declared", () =>
    Effect.gen(function*() {
      yield* serveApp(quiet, yield* catalogOf(twoModels))
      const n = 200
      const agreement = (model: string) =>
        Effect.gen(function*() {
          const answers: Array<string> = []
          let agree = 0
          for (let i = 0; i < n; i++) {
            const r = yield* ask(model, terse(emailOf(i)))
            const content = r.body.choices[0].message.content as string
            answers.push(content)
            if (labelOf(content) === scoreEmail(`\n${emailOf(i)}\n`).label) agree++
          }
          return { rate: agree / n, answers }
        })
      const lo = yield* agreement("lo")
      const hi = yield* agreement("hi")
      // binomial: within 4 standard deviations of the declared accuracy
      const within = (rate: number, p: number) => Math.abs(rate - p) <= 4 * Math.sqrt((p * (1 - p)) / n)
      assert.isTrue(within(lo.rate, 0.6), `lo agreed ${lo.rate}`)
      assert.isTrue(within(hi.rate, 0.95), `hi agreed ${hi.rate}`)
      assert.isAbove(hi.rate - lo.rate, 0.2)
      // deterministic: the same requests again (other key, later counters) give the same answers
      const again = yield* agreement("lo")
      assert.deepStrictEqual(again.answers, lo.answers)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("a detailed prompt raises accuracy, only turning wrong answers right, and costs more prompt tokens", () =>
    Effect.gen(function*() {
      yield* serveApp(quiet, yield* catalogOf({ models: [{ name: "lo", accuracy: 0.6, promptGains: { instructions: 0.5 }, pricing: { promptPer1k: 0.001 } }] }))
      const n = 200
      let rightTerse = 0
      let rightDetailed = 0
      let costTerse = 0
      let costDetailed = 0
      for (let i = 0; i < n; i++) {
        const truth = scoreEmail(`\n${emailOf(i)}\n`).label
        const t = yield* ask("lo", terse(emailOf(i)))
        const d = yield* ask("lo", detailed(emailOf(i)))
        const tRight = labelOf(t.body.choices[0].message.content) === truth
        const dRight = labelOf(d.body.choices[0].message.content) === truth
        if (tRight) assert.isTrue(dRight, `email ${i}: right with the terse prompt, wrong with the detailed one`)
        rightTerse += tRight ? 1 : 0
        rightDetailed += dRight ? 1 : 0
        assert.isAbove(d.body.usage.prompt_tokens, t.body.usage.prompt_tokens)
        costTerse += t.body.usage.cost
        costDetailed += d.body.usage.cost
      }
      // expected agreement 0.6 terse, 1 − 0.4 × 0.5 = 0.8 detailed
      assert.isAbove(rightDetailed - rightTerse, 0.1 * n)
      assert.isAbove(costDetailed, costTerse)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("tokens and price: usage from the text (⌈chars / 4⌉) and cost = tokens × price per 1k", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp(quiet, yield* catalogOf({
        models: [{ name: "chatty", accuracy: 1, chattiness: 1, pricing: { promptPer1k: 0.002, completionPer1k: 0.006 } }]
      }))
      const email = emailOf(0)
      const open = `Is this email spam or ham?\n--- email ---\n${email}\n--- end of email ---`
      const r = yield* ask("chatty", open)
      const content = r.body.choices[0].message.content as string
      const u = r.body.usage
      assert.strictEqual(u.prompt_tokens, Math.ceil(open.length / 4))
      assert.strictEqual(u.completion_tokens, Math.ceil(content.length / 4))
      assert.strictEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)
      assert.isAbove(u.completion_tokens, 3) // a sentence: the prompt did not ask for one word
      assert.strictEqual(labelOf(content), "spam")
      assert.closeTo(u.cost, (u.prompt_tokens * 0.002 + u.completion_tokens * 0.006) / 1000, 1e-9)
      // asking for one word: the bare label, one completion token
      const one = yield* ask("chatty", terse(email))
      assert.strictEqual(one.body.choices[0].message.content, "spam")
      assert.strictEqual(one.body.usage.completion_tokens, 1)
      const log = yield* mock.log
      assert.deepStrictEqual(
        log.map((e) => [e.style, e.promptTokens, e.completionTokens, e.costUsd]),
        [
          ["terse", u.prompt_tokens, u.completion_tokens, u.cost],
          ["one-word", one.body.usage.prompt_tokens, 1, one.body.usage.cost]
        ]
      )
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("/v1/models lists the profiles with price, context and rate limit; /v1/models/ID retrieves one", () =>
    Effect.gen(function*() {
      yield* serveApp(quiet, builtinModels)
      const list = yield* getVia("/v1/models")
      assert.deepStrictEqual(list.body.data.map((m: any) => m.id), ["mock-spam-1", "small", "medium", "large"])
      const large = list.body.data[3]
      assert.deepStrictEqual(large.pricing, { prompt_per_1k_usd: 0.0025, completion_per_1k_usd: 0.01 })
      assert.strictEqual(large.context_length, 128000)
      assert.deepStrictEqual(large.rate_limit, { rps: 10, rpm: null })
      assert.notProperty(list.body.data[0], "pricing")
      const one = yield* getVia("/e/a/v1/models/small")
      assert.strictEqual(one.status, 200)
      assert.strictEqual(one.body.id, "small")
      assert.strictEqual(one.body.pricing.prompt_per_1k_usd, 0.00015)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("per-profile rate limit: 429 + Retry-After per (key, model), recovery on the clock", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp(quiet, yield* catalogOf({
        models: [
          { name: "capped", accuracy: 1, rateLimit: { rps: 1, burst: 2 } },
          { name: "per-minute", accuracy: 1, rateLimit: { rpm: 2 } },
          { name: "free", accuracy: 1 }
        ]
      }))
      const statuses = (model: string, count: number, key = "k") =>
        Effect.forEach(Array.from({ length: count }), () => ask(model, terse("x"), {}, key))
      const capped = yield* statuses("capped", 3)
      assert.deepStrictEqual(capped.map((r) => r.status), [200, 200, 429])
      assert.strictEqual(capped[2]!.retryAfter, "1")
      assert.strictEqual(capped[2]!.body.error.code, "rate_limit_exceeded")
      assert.include(capped[2]!.body.error.message, "capped")
      // another model, another key: their own buckets
      assert.deepStrictEqual((yield* statuses("free", 5)).map((r) => r.status), [200, 200, 200, 200, 200])
      assert.strictEqual((yield* ask("capped", terse("x"), {}, "other")).status, 200)
      const perMinute = yield* statuses("per-minute", 3)
      assert.deepStrictEqual(perMinute.map((r) => r.status), [200, 200, 429])
      assert.strictEqual(perMinute[2]!.retryAfter, "30")
      yield* TestClock.adjust(Duration.seconds(1))
      assert.strictEqual((yield* ask("capped", terse("x"))).status, 200)
      assert.strictEqual((yield* ask("per-minute", terse("x"))).status, 429)
      yield* TestClock.adjust(Duration.seconds(29))
      assert.strictEqual((yield* ask("per-minute", terse("x"))).status, 200)
      assert.deepStrictEqual(
        (yield* mock.log).filter((e) => e.status === 429).map((e) => [e.model, e.reason]),
        [["capped", "model_rate_limit"], ["per-minute", "model_rate_limit"], ["per-minute", "model_rate_limit"]]
      )
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("the context window: prompt tokens + max_tokens beyond maxContext is a 400 context_length_exceeded", () =>
    Effect.gen(function*() {
      yield* serveApp(quiet, yield* catalogOf({ models: [{ name: "tiny", accuracy: 1, maxContext: 20 }] }))
      const fits = "x".repeat(60) // 15 tokens
      assert.strictEqual((yield* ask("tiny", fits)).status, 200)
      assert.strictEqual((yield* ask("tiny", fits, { max_tokens: 5 })).status, 200)
      const over = yield* ask("tiny", fits, { max_tokens: 6 })
      assert.strictEqual(over.status, 400)
      assert.strictEqual(over.body.error.code, "context_length_exceeded")
      assert.include(over.body.error.message, "maximum context length is 20 tokens")
      assert.include(over.body.error.message, "21 tokens (15 in the messages, 6 in the completion)")
      assert.strictEqual((yield* ask("tiny", "x".repeat(84))).status, 400)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("latency: base + per-token time, slept on the Clock, added to the endpoint's", () =>
    Effect.gen(function*() {
      // the endpoint: exactly 10 ms (a lognormal with p95 = median)
      const mock = yield* serveApp(
        { endpoints: [{ name: "a", latency: { medianMs: 10, p95Ms: 10 } }] },
        yield* catalogOf({ models: [{ name: "slow", accuracy: 1, latency: { baseMs: 100, perKTokensMs: 1000 } }] })
      )
      // 10 ms + 100 ms + (16 prompt tokens + 1 completion token) × 1 ms
      const prompt = `${"x".repeat(55)} one word`
      assert.strictEqual(prompt.length, 64)
      const fiber = yield* Effect.fork(ask("slow", prompt))
      yield* untilSleeping
      // the server sleeps until exactly 127 ms from now
      const now = yield* TestClock.currentTimeMillis
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* TestClock.sleeps()).map((t) => t - now), [127])
      yield* TestClock.adjust(Duration.millis(127))
      const r = yield* Fiber.join(fiber)
      assert.strictEqual(r.status, 200)
      assert.deepStrictEqual((yield* mock.log).map((e) => e.latencyMs), [127])
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("latency jitter: within [base, base + jitter), from the seeded Random", () =>
    Effect.gen(function*() {
      const mock = yield* serveApp(quiet, yield* catalogOf({
        models: [{ name: "j", accuracy: 1, latency: { baseMs: 50, jitterMs: 40 } }]
      }))
      for (let i = 0; i < 20; i++) {
        const fiber = yield* Effect.fork(ask("j", terse(`email ${i}`)))
        yield* untilSleeping
        yield* TestClock.adjust(Duration.millis(90))
        yield* Fiber.join(fiber)
      }
      const latencies = (yield* mock.log).map((e) => e.latencyMs)
      assert.isTrue(latencies.every((l) => l >= 50 && l < 90), String(latencies))
      assert.isAbove(new Set(latencies).size, 10)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))
})

describe("MockLlm model profiles: the default behaviour is unchanged", () => {
  const noisy = {
    seed: 7,
    endpoints: [{
      name: "n",
      latency: { medianMs: 3, p95Ms: 10, slowRate: 0.1, slowMs: 15 },
      errorRate: 0.3,
      answers: { noiseRate: 0.3, invalidRate: 0.1 }
    }]
  }
  const sequence = (models: ModelCatalog | undefined) =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* serve({ profile: yield* Effect.orDie(decodeProfile(noisy)), models })
      const out: Array<unknown> = []
      for (let i = 0; i < 30; i++) {
        const res = yield* Effect.promise(() =>
          fetch(`${server.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer k${i % 2}`, "content-type": "application/json" },
            body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `email ${i % 7}` }] })
          }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.json() as any }))
        )
        out.push({ ...res, body: { ...res.body, created: undefined } })
      }
      const log = (yield* server.log).map((e) => ({ ...e, atMs: undefined, offsetMs: undefined }))
      return { out, log }
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.live("with the built-in profiles, a request naming another model gets exactly what it got without profiles", () =>
    Effect.gen(function*() {
      const without = yield* sequence(undefined)
      const withBuiltins = yield* sequence(builtinModels)
      assert.deepStrictEqual(withBuiltins, without)
    }))
})

describe("MockLlm model profiles through the chat task's client", () => {
  it.scopedLive("usage as the lease sees it, and the errors classified: 404 fatal, 429 rate_limit with its wait, 400 fatal", () =>
    Effect.gen(function*() {
      const server = yield* serve({
        profile: yield* Effect.orDie(decodeProfile(quiet)),
        models: yield* catalogOf({
          models: [{ name: "priced", accuracy: 1, pricing: { promptPer1k: 0.002 }, rateLimit: { rps: 1, burst: 1 }, maxContext: 80 }]
        })
      }).pipe(Effect.provide(NodeContext.layer))
      const clientFor = (model: string) =>
        chatClientFactory()(Resource.info(Resource.make("llm", {
          id: model,
          options: { baseUrl: server.endpoints[0]!.baseUrl, apiKey: "k", model }
        }))) as Effect.Effect<ChatClient, unknown>
      const prompt = terse(emailOf(0))
      const priced = yield* clientFor("priced")
      const ok = yield* priced.complete({ messages: [{ role: "user", content: prompt }], timeoutMs: 5_000 })
      assert.strictEqual(ok.content, "spam")
      const { costUsd, ...tokens } = ok.usage ?? {}
      assert.deepStrictEqual(tokens, { promptTokens: Math.ceil(prompt.length / 4), completionTokens: 1, totalTokens: Math.ceil(prompt.length / 4) + 1 })
      // the server's own cost (usage.cost): prompt tokens × $0.002 per 1k
      assert.closeTo(costUsd ?? NaN, Math.ceil(prompt.length / 4) * 0.002 / 1000, 1e-12)
      // the context window is checked before the rate limit: a request too long is refused without using a token
      const long = yield* Effect.flip(priced.complete({ messages: [{ role: "user", content: "x".repeat(400) }], timeoutMs: 5_000 }))
      assert.strictEqual(long.errorClass, "fatal")
      assert.strictEqual(long.status, 400)
      const limited = yield* Effect.flip(priced.complete({ messages: [{ role: "user", content: "x" }], timeoutMs: 5_000 }))
      assert.strictEqual(limited.errorClass, "rate_limit")
      assert.strictEqual(limited.retryAfterMs, 1000)
      const unknown = yield* Effect.either((yield* clientFor("nope")).complete({ messages: [{ role: "user", content: "x" }], timeoutMs: 5_000 }))
      assert.isTrue(Either.isLeft(unknown))
      if (Either.isLeft(unknown)) {
        assert.strictEqual(unknown.left.errorClass, "fatal")
        assert.strictEqual(unknown.left.status, 404)
        assert.include(unknown.left.message, "Known models: mock-spam-1, priced")
      }
    }))
})
