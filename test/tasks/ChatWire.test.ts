import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer } from "effect"
import { hintOf } from "../../src/domain/RateLimit.js"
import { RateLimitSignal } from "../../src/services/MockLlm.js"
import { throttled } from "../../src/services/internal/mockLlm.js"
import { classOfEmbeddedError, completionsUrl, credentialIssues, proxySettings } from "../../src/tasks/internal/chat.js"

describe("completionsUrl (C12)", () => {
  it("joins /chat/completions with and without a trailing slash, keeps the query, takes the userinfo out", () => {
    const table: ReadonlyArray<readonly [string, string]> = [
      ["http://h/v1", "http://h/v1/chat/completions"],
      ["http://h/v1/", "http://h/v1/chat/completions"],
      ["http://h/v1//", "http://h/v1/chat/completions"],
      ["http://h", "http://h/chat/completions"],
      ["http://h/", "http://h/chat/completions"],
      ["https://h:8443/openai/deployments/d1?api-version=2024-02-01", "https://h:8443/openai/deployments/d1/chat/completions?api-version=2024-02-01"],
      ["https://h/openai/deployments/d1/?api-version=2024-02-01&api-key=k", "https://h/openai/deployments/d1/chat/completions?api-version=2024-02-01&api-key=k"],
      ["http://h/v1#frag", "http://h/v1/chat/completions"],
      ["  http://h/v1  ", "http://h/v1/chat/completions"],
      ["http://h/v1/chat/completions", "http://h/v1/chat/completions"],
      ["http://h/v1/chat/completions/?api-version=1", "http://h/v1/chat/completions?api-version=1"]
    ]
    for (const [base, url] of table) {
      const r = completionsUrl(base)
      assert.isTrue(Either.isRight(r), base)
      assert.strictEqual(Either.getOrThrow(r).url, url, base)
    }
    const withUser = Either.getOrThrow(completionsUrl("http://al%40ice:p%3Ass@h/v1"))
    assert.deepStrictEqual(withUser, { url: "http://h/v1/chat/completions", user: "al@ice", password: "p:ss" })
    assert.isTrue(Either.isLeft(completionsUrl("h/v1")))
    assert.isTrue(Either.isLeft(completionsUrl("ftp://h/v1")))
  })
})

describe("classOfEmbeddedError (C10)", () => {
  it("embedded status, gRPC status, type names; upstream otherwise", () => {
    const table: ReadonlyArray<readonly [Record<string, unknown>, string, number | undefined]> = [
      [{ message: "provider error", code: 502 }, "upstream", 502],
      [{ code: "429" }, "rate_limit", 429],
      [{ code: 400, message: "bad" }, "fatal", 400],
      [{ status: "RESOURCE_EXHAUSTED", code: 8 }, "rate_limit", undefined],
      [{ type: "overloaded_error" }, "upstream", undefined],
      [{ type: "rate_limit_error" }, "rate_limit", undefined],
      [{ code: "rate_limit_exceeded" }, "rate_limit", undefined],
      [{ type: "invalid_request_error" }, "fatal", undefined],
      [{ message: "something" }, "upstream", undefined]
    ]
    for (const [e, cls, status] of table) assert.deepStrictEqual(classOfEmbeddedError(e), { errorClass: cls as any, status }, JSON.stringify(e))
  })
})

describe("credentialIssues (C13)", () => {
  it("names the variable, never the value", () => {
    const issues = credentialIssues({ apiKeyEnv: "MY_KEY", baseUrl: "http://h/v1" }, "pools.llm.resources[0].options", { MY_KEY: "sk-x\n" }, false)
    assert.strictEqual(issues.length, 1)
    assert.strictEqual(issues[0]!.path, "pools.llm.resources[0].options.apiKeyEnv")
    assert.notInclude(JSON.stringify(issues), "sk-x")
    assert.deepStrictEqual(credentialIssues({ apiKeyEnv: "MY_KEY" }, "p", {}, false), [])
    assert.strictEqual(credentialIssues({ apiKeyEnv: "MY_KEY" }, "p", {}, true).length, 1)
    assert.strictEqual(credentialIssues({ headers: { "X-A": "a\r\nInjected: 1" } }, "p", {}, false)[0]!.path, "p.headers.X-A")
    assert.strictEqual(credentialIssues({ baseUrl: "not a url" }, "p", {}, false)[0]!.path, "p.baseUrl")
  })

  it("apiKeyEnv written as ${KEY} (the key itself once expanded) is refused, and the key is never in the message", () => {
    const secret = "sk-SECRET-0123456789"
    for (const strictEnv of [false, true]) {
      const issues = credentialIssues({ apiKeyEnv: secret }, "pools.llm.resources[0].options", {}, strictEnv)
      assert.strictEqual(issues.length, 1)
      assert.strictEqual(issues[0]!.path, "pools.llm.resources[0].options.apiKeyEnv")
      assert.notInclude(JSON.stringify(issues), secret)
    }
    // a key given as a list or a table: refused, not shown
    for (const apiKey of [[secret], { k: secret }]) {
      const issues = credentialIssues({ apiKey }, "p", {}, false)
      assert.strictEqual(issues[0]!.path, "p.apiKey")
      assert.notInclude(JSON.stringify(issues), secret)
    }
    assert.deepStrictEqual(credentialIssues({ apiKeyEnv: "_MY_KEY2" }, "p", {}, false), [])
  })
})

describe("proxySettings", () => {
  it.effect("any case; lower case first; https falls back to http", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        proxySettings.pipe(Effect.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))
      assert.deepStrictEqual(yield* read({}), { httpProxy: undefined, httpsProxy: undefined, noProxy: undefined })
      assert.deepStrictEqual(yield* read({ HTTP_PROXY: "http://p:1" }), { httpProxy: "http://p:1", httpsProxy: "http://p:1", noProxy: undefined })
      assert.deepStrictEqual(
        yield* read({ https_proxy: "http://lower:1", HTTPS_PROXY: "http://upper:1", no_proxy: "localhost" }),
        { httpProxy: undefined, httpsProxy: "http://lower:1", noProxy: "localhost" }
      )
    }))
})

describe("the mock speaks every signal, and the client reads each back", () => {
  it("each RateLimitSignal names a 3 s wait (none: no hint)", () => {
    const now = Date.parse("2025-01-01T00:00:00Z")
    for (const signal of RateLimitSignal.literals) {
      const { body, headers } = throttled(signal, 3, now)
      const hint = hintOf((n) => headers[n], body, now)
      if (signal === "none") assert.isUndefined(hint)
      else assert.strictEqual(hint?.delayMs, 3000, signal)
    }
    assert.strictEqual(hintOf((n) => throttled("retry-after", 86_400, now).headers[n], undefined, now)?.delayMs, 86_400_000)
  })
})
