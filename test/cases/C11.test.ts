/**
 * Case C11 (../shared/cases/README.md): behind a proxy. Spawned `bin/assay run` against a
 * spawned `assay mock-llm`, through a loopback forward proxy (CONNECT and absolute-URI) that
 * sends every request to the mock, whatever host it names: the endpoint's host
 * (`llm.invalid`, a name that never resolves, RFC 2606) is reachable only through it.
 *
 * (a) `HTTP_PROXY` (upper case): every request goes through the proxy, 3/3 succeed.
 * (b) `http_proxy` (lower case) and `NO_PROXY=127.0.0.1`: the `llm.invalid` resource goes
 *     through the proxy, the 127.0.0.1 resource goes direct (the proxy never sees it).
 * (c) Without a proxy the DNS failure reads "cannot resolve host llm.invalid".
 * Before the fix, (a) and (b) failed every row with a DNS error (the client ignored the
 * variables), and (c) said "Transport error: ENOTFOUND". (Whether a burst of such failures
 * at the start may mark the endpoint dead is the pool's side of issue 20 §4.)
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, chatExperiment, forwardProxy, query, startMock, tmp, write } from "./support.js"

describe("C11: behind a proxy", () => {
  it.live("(a) HTTP_PROXY: every request through the proxy; (b) http_proxy + NO_PROXY: only the non-excluded host", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const mock = await startMock(dir, { endpoints: [{ name: "p", latency: { medianMs: 1 } }] })
      const proxy = await forwardProxy(mock.port)
      try {
        const viaProxy = `http://llm.invalid/e/p/v1`
        const a = path.join(dir, "a.db")
        const fileA = write(dir, "a.json", chatExperiment({
          store: a,
          n: 3,
          resources: [{ id: "far", options: { baseUrl: viaProxy, model: "m", apiKeyEnv: "K" } }]
        }))
        const ra = await assay(["run", "-c", fileA, "--quiet"], { K: "sk-c11", HTTP_PROXY: proxy.url })
        assert.strictEqual(ra.code, 0, ra.stderr)
        assert.deepStrictEqual(query(a, "SELECT state, count(*) AS n FROM pipelines GROUP BY state"), [{ state: "succeeded", n: 3 }])
        assert.isAbove(proxy.seen.length, 0)
        assert.isTrue(proxy.seen.every((s) => s.includes("llm.invalid")), proxy.seen.join("; "))
        assert.strictEqual((await mock.log()).filter((e) => e["status"] === 200).length, 3)

        proxy.seen.length = 0
        const b = path.join(dir, "b.db")
        const fileB = write(dir, "b.json", chatExperiment({
          store: b,
          n: 8,
          concurrency: 2,
          resources: [
            { id: "far", options: { baseUrl: viaProxy, model: "m", apiKeyEnv: "K" } },
            { id: "near", options: { baseUrl: mock.baseUrl("p"), model: "m", apiKeyEnv: "K" } }
          ],
          pool: { algorithm: "leastBusy" }
        }))
        const rb = await assay(["run", "-c", fileB, "--quiet"], { K: "sk-c11", http_proxy: proxy.url, NO_PROXY: "127.0.0.1" })
        assert.strictEqual(rb.code, 0, rb.stderr)
        const served = query<{ resource: string; n: number }>(
          b,
          "SELECT json_extract(a.payload, '$.resourceId') AS resource, count(*) AS n FROM artifacts a WHERE a.is_final = 1 GROUP BY 1"
        )
        const byResource = Object.fromEntries(served.map((s) => [s.resource, s.n]))
        assert.isAbove(byResource["far"] ?? 0, 0, JSON.stringify(served))
        assert.isAbove(byResource["near"] ?? 0, 0, JSON.stringify(served))
        // keep-alive: one CONNECT tunnel may carry several requests
        assert.isAtLeast(proxy.seen.length, 1)
        assert.isAtMost(proxy.seen.length, byResource["far"]!, proxy.seen.join("; "))
        assert.isTrue(proxy.seen.every((s) => s.includes("llm.invalid")), "127.0.0.1 (NO_PROXY) went direct")
      } finally {
        await proxy.close()
        await mock.stop()
      }
    }), 90_000)

  it.live("(c) without a proxy a DNS failure reads 'cannot resolve host llm.invalid'", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const store = path.join(dir, "dns.db")
      const file = write(dir, "dns.json", chatExperiment({
        store,
        n: 1,
        resources: [{ id: "nowhere", options: { baseUrl: "http://llm.invalid/v1", model: "m", apiKeyEnv: "K" } }],
        retry: { maxAttempts: 2, base: "50 millis" }
      }))
      const r = await assay(["run", "-c", file, "--quiet"], { K: "sk-c11" })
      assert.strictEqual(r.code, 1, r.stderr)
      const rows = query<{ error_class: string; error_message: string }>(store, "SELECT error_class, error_message FROM pipelines")
      assert.strictEqual(rows.length, 1)
      for (const p of rows) {
        assert.strictEqual(p.error_class, "connection")
        assert.include(p.error_message, "cannot resolve host llm.invalid")
      }
    }), 60_000)
})
