import { assert, describe, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { spec, make } from "../../src/domain/Resource.js"
import { maskSecrets } from "../../src/domain/internal/resource.js"
import {
  formsOf,
  hasWhitespaceOrControl,
  isSecretName,
  maskText,
  maskThenTruncate,
  maskUrl,
  secretsOfUrl
} from "../../src/domain/Secrets.js"

const KEY = "sk-live-Zq81Xv0pLm4T"

/** Every 6-character fragment of a secret. */
const fragments = (s: string): ReadonlyArray<string> => Array.from({ length: s.length - 5 }, (_, i) => s.slice(i, i + 6))
const leaks = (text: string, secret: string) => fragments(secret).filter((f) => text.includes(f))

describe("isSecretName", () => {
  it("secret names, variable names, counters", () => {
    for (const n of ["apiKey", "api_key", "x-api-key", "Authorization", "accessToken", "client_secret", "PASSWORD", "Cookie", "X-Custom-Auth", "sig", "credentials", "passphrase"]) {
      assert.isTrue(isSecretName(n), n)
    }
    for (const n of ["apiKeyEnv", "api_key_env", "API_KEY_ENV", "tokenEnv", "quota.tokens", "keyId", "tokenizer", "author", "model", "baseUrl"]) {
      assert.isFalse(isSecretName(n), n)
    }
  })
})

describe("URLs", () => {
  const url = "https://bob:pa%24%24w0rd@llm.example/openai/deployments/d1?api-version=2024-02-01&api-key=sk-q-SECRET1&x=tok%2Fen#frag"
  it("secretsOfUrl: userinfo and non-public query values, raw and decoded", () => {
    assert.sameMembers([...secretsOfUrl(url)], ["bob", "pa%24%24w0rd", "pa$$w0rd", "sk-q-SECRET1", "tok%2Fen", "tok/en"])
    assert.deepStrictEqual(secretsOfUrl("not a url ?a=b"), [])
  })
  it("maskUrl keeps host, path and public values", () => {
    assert.strictEqual(
      maskUrl(url),
      "https://***:***@llm.example/openai/deployments/d1?api-version=2024-02-01&api-key=***&x=***#frag"
    )
    assert.strictEqual(maskUrl("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080/v1")
    assert.strictEqual(maskUrl("plain text"), "plain text")
    // a raw '@' inside the password: masked up to the authority's last '@'
    assert.strictEqual(maskUrl("postgres://bob:top@Secret99@127.0.0.1:5432/a"), "postgres://***:***@127.0.0.1:5432/a")
  })
})

describe("maskText: every form, before truncating", () => {
  it("raw, URL-encoded, HTML- and JSON-escaped, base64 at every alignment", () => {
    const secret = `${KEY}/&"<'+=`
    const texts = [
      secret,
      encodeURIComponent(secret),
      encodeURIComponent(secret).replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase()),
      JSON.stringify({ k: secret }),
      secret.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/'/g, "&#39;"),
      Buffer.from(secret).toString("base64"),
      Buffer.from(`x${secret}`).toString("base64"),
      Buffer.from(`xy${secret}`).toString("base64"),
      Buffer.from(`user:${secret}`).toString("base64url")
    ]
    for (const t of texts) {
      const masked = maskText(`before ${t} after`, [secret])
      assert.include(masked, "***", t)
      assert.deepStrictEqual(leaks(masked, KEY), [], `${t} → ${masked}`)
    }
  })

  it("a secret cut at any position by the truncation leaves no 6-character fragment (property)", () => {
    FastCheck.assert(
      FastCheck.property(FastCheck.nat(400), FastCheck.integer({ min: 20, max: 300 }), (pad, max) => {
        const text = `${"x".repeat(pad)}${KEY} tail`
        const out = maskThenTruncate(text, [KEY], max)
        return leaks(out, KEY).length === 0 && out.length <= max + 1
      })
    )
  })

  it("the longest secret first; short strings are never masked", () => {
    assert.strictEqual(maskText("abcdefgh", ["abcd", "abcdefgh"]), "***")
    assert.strictEqual(maskText("a b c", ["b"]), "a b c")
    assert.deepStrictEqual(formsOf("abc"), [])
  })
})

describe("maskSecrets (domain/internal/resource.ts, used by Resource.spec)", () => {
  it("headers (all but the allow-list), URLs, secret names; variable names shown", () => {
    const masked = maskSecrets({
      baseUrl: "https://u:p4ss@h/v1?api-version=1&api-key=sk-q-SECRET",
      apiKeyEnv: "MY_KEY",
      api_key_env: "OTHER_KEY",
      apiKey: KEY,
      headers: { "Content-Type": "application/json", Cookie: "session=abc123", "X-Custom-Auth": "tok-999", "OpenAI-Organization": "org-1", "X-Weird": "v" },
      nested: { list: [{ token: "t" }, "http://a:b@c/"] }
    })
    assert.deepStrictEqual(masked, {
      baseUrl: "https://***:***@h/v1?api-version=1&api-key=***",
      apiKeyEnv: "MY_KEY",
      api_key_env: "OTHER_KEY",
      apiKey: "***",
      headers: { "Content-Type": "application/json", Cookie: "***", "X-Custom-Auth": "***", "OpenAI-Organization": "org-1", "X-Weird": "***" },
      nested: { list: [{ token: "***" }, "http://***:***@c/"] }
    })
    const s = spec(make("llm", { options: { baseUrl: "http://h/v1?key=zzzzzz" } }))
    assert.deepStrictEqual(s["options"], { baseUrl: "http://h/v1?key=***" })
  })
})

describe("hasWhitespaceOrControl", () => {
  it("trailing newline, spaces, tabs, NUL, DEL", () => {
    for (const v of ["sk-test-123\n", " sk", "a\tb", "a\u0000", "a\u007f", "a\r"]) assert.isTrue(hasWhitespaceOrControl(v), JSON.stringify(v))
    assert.isFalse(hasWhitespaceOrControl("sk-test-123_ABC.def~"))
  })
})
