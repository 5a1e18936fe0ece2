/**
 * Case C10 (../shared/cases/README.md), through spawned `bin/assay run` against a spawned
 * `assay mock-llm`: a 200 that is not an answer.
 *
 * (a) The first 2 answers are HTTP 200 with `{"error":{"message":"provider error","code":502}}`,
 *     then normal answers: classified by the embedded code (`upstream`, retried), 3/3 succeed.
 *     The same with an embedded 429 is `rate_limit`.
 * (b) A 200 with `finish_reason: "content_filter"` and `content: null` ends with an error that
 *     says "content filter" (stored, in `report` text and JSON and in exports of every
 *     format), never "not a JSON chat completion"; the other rows succeed.
 * Before the fix, (a) failed every row with class `invalid` ("not a JSON chat completion", not
 * retried) and (b) said "not a JSON chat completion".
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, chatExperiment, query, startMock, tmp, write } from "./support.js"

describe("C10: a 200 that is not an answer", () => {
  it.live("(a) an error object inside a 200 is classified by its embedded code and retried: 3/3 succeed", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const mock = await startMock(dir, {
        endpoints: [
          { name: "e502", latency: { medianMs: 1 }, errorIn200: { first: 2, code: 502 } },
          { name: "e429", latency: { medianMs: 1 }, errorIn200: { first: 1, code: 429, message: "slow down, try again in 1s" } }
        ]
      })
      try {
        for (const [name, cls] of [["e502", "upstream"], ["e429", "rate_limit"]] as const) {
          const store = path.join(dir, `${name}.db`)
          const file = write(dir, `${name}.json`, chatExperiment({
            store,
            n: 3,
            concurrency: 1,
            resources: [{ id: name, options: { baseUrl: mock.baseUrl(name), model: "m", apiKeyEnv: "K" } }]
          }))
          const r = await assay(["run", "-c", file, "--quiet"], { K: "sk-c10" })
          assert.strictEqual(r.code, 0, r.stderr)
          assert.deepStrictEqual(query(store, "SELECT state, count(*) AS n FROM pipelines GROUP BY state"), [{ state: "succeeded", n: 3 }])
          const failed = query<{ error_class: string; error_message: string; decision: string }>(
            store,
            "SELECT error_class, error_message, decision FROM attempts WHERE outcome != 'succeeded'"
          )
          assert.strictEqual(failed.length, name === "e502" ? 2 : 1)
          for (const a of failed) {
            assert.strictEqual(a.error_class, cls)
            assert.include(a.error_message, `HTTP 200 with an error in its body (code ${name.slice(1)})`)
            assert.notInclude(a.error_message, "not a JSON chat completion")
            assert.isTrue((JSON.parse(a.decision) as { retry: boolean }).retry)
          }
          if (name === "e429") assert.strictEqual((JSON.parse(failed[0]!.decision) as { retryAfterMs: number }).retryAfterMs, 1000)
        }
      } finally {
        await mock.stop()
      }
    }), 60_000)

  it.live("(b) finish_reason content_filter with content null: an error that says so, in the store, report and exports", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const mock = await startMock(dir, {
        endpoints: [{ name: "cf", latency: { medianMs: 1 }, contentFilter: { contains: "item 1" } }]
      })
      try {
        const store = path.join(dir, "cf.db")
        const file = write(dir, "cf.json", chatExperiment({
          store,
          n: 3,
          resources: [{ id: "cf", options: { baseUrl: mock.baseUrl("cf"), model: "m", apiKeyEnv: "K" } }]
        }))
        const r = await assay(["run", "-c", file, "--quiet"], { K: "sk-c10" })
        assert.strictEqual(r.code, 1, r.stderr)
        const rows = query<{ state: string; error_class: string | null; error_message: string | null }>(
          store,
          "SELECT state, error_class, error_message FROM pipelines ORDER BY state"
        )
        assert.deepStrictEqual(rows.map((p) => p.state), ["failed", "succeeded", "succeeded"])
        assert.strictEqual(rows[0]!.error_class, "invalid")
        assert.include(rows[0]!.error_message, "content filter")
        assert.include(rows[0]!.error_message, "filtered: hate")
        const seen: Array<string> = [r.stdout + r.stderr]
        const report = await assay(["report", store])
        const reportJson = await assay(["report", store, "--json"])
        seen.push(report.stdout, reportJson.stdout)
        assert.include(report.stdout, "content filter")
        assert.include(reportJson.stdout, "content filter")
        for (const [rowsKind, ext] of [["pipelines", "jsonl"], ["tasks", "csv"], ["attempts", "json"], ["results", "csv"]] as const) {
          const out = path.join(dir, `out-${rowsKind}.${ext}`)
          const e = await assay(["export", "--rows", rowsKind, store, out])
          assert.strictEqual(e.code, 0, e.stderr)
          const text = fs.readFileSync(out, "utf8")
          if (rowsKind !== "results") assert.include(text, "content filter", `${rowsKind}.${ext}`)
          seen.push(text)
        }
        for (const t of seen) assert.notInclude(t, "not a JSON chat completion")
      } finally {
        await mock.stop()
      }
    }), 60_000)
})
