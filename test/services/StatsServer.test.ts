import { assert, layer } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Export from "../../src/services/Export.js"
import * as Monitor from "../../src/services/Monitor.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import { Store } from "../../src/services/Store.js"
import { fails, runRows, SCRIPT_MESSAGE, template, writerLayer } from "../fixtures/monitor/liveRun.js"
import type { RunId } from "../../src/domain/Ids.js"

const tmpFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-serve-")), "store.db")

interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly body: string
  readonly json: any
}

const request = (url: string, init?: RequestInit) =>
  Effect.promise(async (): Promise<Answer> => {
    const r = await fetch(url, init)
    const body = await r.text()
    let json: unknown = undefined
    try {
      json = JSON.parse(body)
    } catch {
      // html or text
    }
    return { status: r.status, headers: r.headers, body, json }
  })

/** Serves `file` read-only (as `assay serve` does) for the duration of `f`. */
const withServer = <A, E>(file: string, f: (base: string) => Effect.Effect<A, E, Store>, options: { runId?: string } = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const store = yield* Store
    const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0, runId: options.runId })
    assert.strictEqual(info.host, "127.0.0.1")
    assert.isTrue(info.loopback)
    return yield* f(info.url)
  })).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))

/** The fixture store: two finished runs in one file, A (rows 100..104) then B (rows 0..9; rows 3 and 8 fail). */
class Fixture extends Context.Tag("test/StatsServer/Fixture")<Fixture, {
  readonly file: string
  readonly runA: RunId
  readonly runB: RunId
}>() {}

/** Writes the fixture store once for this file's tests; its folder is removed after them. */
const FixtureLive = Layer.scoped(
  Fixture,
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "assay-serve-"))),
      (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
    )
    const file = path.join(dir, "store.db")
    return yield* Effect.gen(function*() {
      const a = yield* runRows(5, 2, {}, 100)
      yield* Effect.sleep("5 millis")
      const b = yield* runRows(10, 2)
      return { file, runA: a.runId, runB: b.runId }
    }).pipe(Effect.provide(writerLayer(file)))
  })
)

layer(FixtureLive, { excludeTestServices: true, timeout: "30 seconds" })("StatsServer", (it) => {
  /** A test over the fixture store (live clock: real servers and sockets). */
  const test = <A, E>(
    name: string,
    body: (fx: Context.Tag.Service<Fixture>) => Effect.Effect<A, E, Fixture>,
    options?: { readonly timeout?: number }
  ) => it.effect(name, () => Effect.flatMap(Fixture, body), options)

  test("/stats?run_id=latest selects the most recently started run", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const r = yield* request(`${base}/stats?run_id=latest`)
        assert.strictEqual(r.status, 200)
        const s = r.json as Monitor.Snapshot
        assert.strictEqual(s.run_id, fx.runB)
        assert.strictEqual(s.selection, "latest")
        assert.strictEqual(s.run?.status, "completed")
        assert.deepStrictEqual(s.pipelines.by_state, { pending: 0, running: 0, succeeded: 8, failed: 2, interrupted: 0 })
        assert.strictEqual(s.total, 10)
        assert.strictEqual(s.done, 10)
        assert.deepStrictEqual(
          s.metrics.map((m) => [m.name, m.value, m.display]),
          [["accuracy", 0.8, "percent"], ["evaluated", 10, "number"], ["phase", "done", "text"]]
        )
        assert.strictEqual(s.recent_errors.length, 2)
        assert.include(s.recent_errors[0]!.error_message!, SCRIPT_MESSAGE)
        assert.strictEqual(s.throughput.series.reduce((a, [, n]) => a + n, 0), 10, "the histogram counts every finished pipeline")
      })))

  test("run_id selects an explicit run, `all` aggregates without picking any run's metrics", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const a = (yield* request(`${base}/stats?run_id=${fx.runA}`)).json as Monitor.Snapshot
        assert.strictEqual(a.run_id, fx.runA)
        assert.strictEqual(a.selection, "run")
        assert.strictEqual(a.pipelines.total, 5)
        assert.strictEqual(a.pipelines.by_state.failed, 1) // row 103
        assert.strictEqual(a.metrics.find((m) => m.name === "evaluated")?.value, 5)

        const all = (yield* request(`${base}/stats?run_id=all`)).json as Monitor.Snapshot
        assert.strictEqual(all.run_id, "all")
        assert.strictEqual(all.runs_total, 2)
        assert.strictEqual(all.pipelines.total, 15)
        assert.strictEqual(all.pipelines.by_state.failed, 3)
        // the whole store shows the latest run's metrics, and says whose
        assert.strictEqual(all.metrics_run_id, fx.runB)
        assert.deepStrictEqual(new Set(all.metrics.map((m) => m.run_id)), new Set([fx.runB]))
        assert.isNull(all.eta_ms)
        assert.deepStrictEqual(all.recent_runs.map((r) => r.run_id), [fx.runB, fx.runA])
        assert.strictEqual(all.latest_run?.run_id, fx.runB)

        const m = (yield* request(`${base}/metrics?run_id=all`)).json
        assert.strictEqual(m.run_id, "all")
        assert.deepStrictEqual(new Set(m.rows.map((r: Monitor.MetricRow) => r.run_id)), new Set([fx.runA, fx.runB]))

        // the server's own default selection (serve --run-id) applies when a request names none
        yield* withServer(fx.file, (base2) =>
          Effect.map(request(`${base2}/stats`), (r) => assert.strictEqual(r.json.run_id, fx.runA)), { runId: fx.runA })
      })))

  test("/metrics returns run and pipeline rows; ?pipeline_id= one pipeline's values", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const r = yield* request(`${base}/metrics?run_id=latest`)
        assert.strictEqual(r.json.run_id, fx.runB)
        const rows = r.json.rows as Array<Monitor.MetricRow>
        for (const k of ["run_id", "pipeline_id", "name", "value", "label", "display", "updated_at"]) {
          assert.property(rows[0], k)
        }
        assert.strictEqual(rows.filter((m) => m.pipeline_id === null).length, 3)
        assert.strictEqual(rows.filter((m) => m.name === "score").length, 8, "one score per succeeded pipeline")
        const id = template(0).bind(4).pipelineId
        const one = yield* request(`${base}/metrics?pipeline_id=${id}`)
        assert.deepStrictEqual(
          one.json.rows.map((m: Monitor.MetricRow) => [m.pipeline_id, m.name, m.value, m.label]),
          [[id, "score", 0, "Score"]]
        )
      })))

  test("/events filters by kind and limit; /errors and /resources answer for the selection", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const started = yield* request(`${base}/events?kind=run.started&run_id=latest`)
        assert.strictEqual(started.json.rows.length, 1)
        assert.strictEqual(started.json.rows[0].run_id, fx.runB)
        const both = yield* request(`${base}/events?kind=run.started&run_id=all`)
        assert.strictEqual(both.json.rows.length, 2)
        const two = yield* request(`${base}/events?limit=2&run_id=latest`)
        assert.strictEqual(two.json.rows.length, 2)
        assert.isTrue(two.json.rows[0].event_id < two.json.rows[1].event_id, "oldest first")

        const errors = yield* request(`${base}/errors?run_id=latest`)
        assert.strictEqual(errors.json.rows.length, 2)
        assert.deepStrictEqual(
          errors.json.rows.map((e: Monitor.ErrorWire) => e.pipeline_id).sort(),
          [template(0).bind(3).pipelineId, template(0).bind(8).pipelineId].sort()
        )
        assert.strictEqual((yield* request(`${base}/errors?limit=1&run_id=latest`)).json.rows.length, 1)

        const res = yield* request(`${base}/resources?run_id=latest`)
        const rows = res.json.rows as Array<Monitor.ResourceRow>
        assert.deepStrictEqual(rows.map((r) => r.resource_id), ["llm-a", "llm-b"])
        assert.strictEqual(rows[0]!.capacity, 2)
        assert.strictEqual(rows[0]!.state, "ready")
        assert.strictEqual(rows[0]!.run_id, fx.runB)
        assert.notInclude(JSON.stringify(rows), "sk-secret-123", "secrets are masked")
      })))

  test("/pipelines pages by key: following `next` visits every pipeline of the run once", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const seen: Array<Monitor.PipelineRow> = []
        let next: string | null = null
        let pages = 0
        do {
          const r: Answer = yield* request(`${base}/pipelines?run_id=latest&limit=3${next === null ? "" : `&after=${next}`}`)
          assert.strictEqual(r.status, 200)
          assert.isAtMost(r.json.rows.length, 3)
          seen.push(...r.json.rows)
          next = r.json.next
          pages++
        } while (next !== null)
        assert.strictEqual(pages, 4)
        const expected = Array.from({ length: 10 }, (_, n) => template(0).bind(n).pipelineId)
        assert.deepStrictEqual(seen.map((p) => p.pipeline_id).sort(), expected.sort())
        for (const p of seen) {
          assert.strictEqual(p.run_id, fx.runB)
          assert.strictEqual(p.n_tasks_total, 1)
          assert.strictEqual(p.attempts_total, 1)
          if (p.state === "succeeded") {
            assert.strictEqual(p.n_tasks_done, 1)
            assert.deepStrictEqual(p.reported_metrics.map((m) => m.name), ["score"])
          } else {
            assert.strictEqual(p.state, "failed")
            assert.include(p.error_message!, SCRIPT_MESSAGE)
            assert.deepStrictEqual(p.reported_metrics, [])
          }
        }
        const all = yield* request(`${base}/pipelines?run_id=all&limit=1000`)
        assert.strictEqual(all.json.rows.length, 15)
        assert.isNull(all.json.next)
        // `state` filters the rows, and pages by key like the rest
        const failed = yield* request(`${base}/pipelines?run_id=all&state=failed&limit=1`)
        assert.strictEqual(failed.json.rows.length, 1)
        assert.strictEqual(failed.json.rows[0]!.state, "failed")
        const rest = yield* request(`${base}/pipelines?run_id=all&state=failed&limit=1000&after=${failed.json.next}`)
        assert.isTrue(rest.json.rows.every((p: { state: string }) => p.state === "failed"))
        const nFailed = all.json.rows.filter((p: { state: string }) => p.state === "failed").length
        assert.strictEqual(1 + rest.json.rows.length, nFailed)
      })))

  test("by default every view is the whole store (after a resume: the full evaluation); the latest run one link away", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const s = (yield* request(`${base}/stats`)).json as Monitor.Snapshot
        assert.strictEqual(s.run_id, "all")
        assert.strictEqual(s.pipelines.total, 15)
        assert.strictEqual(s.done, 15)
        assert.strictEqual(s.metrics_run_id, fx.runB)
        assert.strictEqual((yield* request(`${base}/pipelines?limit=1000`)).json.rows.length, 15)
        assert.strictEqual((yield* request(`${base}/errors`)).json.rows.length, 3)
        const page = (yield* request(`${base}/`)).body
        assert.include(page, "<h1>assay <span id=\"run-title\">whole store (2 runs)</span></h1>")
        assert.include(page, `<a id="view-latest" class="" href="/?run_id=latest">latest run <span id="latest-id" class="mono">${fx.runB}</span></a>`)
        assert.include(page, `href="/?run_id=${fx.runA}"`, "every recent run one click away")
        // full pipeline ids with copy buttons (the error rows are rendered on the server)
        const failed = template(0).bind(3).pipelineId
        assert.isAbove(failed.length, 12)
        assert.include(page, `<td class="mono id">${failed} <button type="button" class="copy" data-copy="${failed}"`)
        // a resource's options: a variable name shown, a secret masked
        assert.include(page, "apiKey: ***, apiKeyEnv: LLM_KEY_VAR")
        assert.notInclude(page, "sk-secret-123")
        // downloads of the tables for the selection shown
        assert.include(page, `href="/export?rows=results&amp;format=csv&amp;run_id=all&amp;state=failed"`)
        assert.include(page, `href="/export?rows=events&amp;format=jsonl&amp;run_id=all"`)
        const latest = (yield* request(`${base}/?run_id=latest`)).body
        assert.include(latest, `<span id="run-title">run ${fx.runB}</span>`)
        assert.include(latest, `href="/export?rows=results&amp;format=csv&amp;run_id=${fx.runB}"`)
      })))

  test("/export answers the bytes `assay export` writes for the same rows (every kind and format, any selection)", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const store = yield* Store
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-export-cmp-"))
        const leftovers = () => fs.readdirSync(os.tmpdir()).filter((f) => f.startsWith("assay-serve-export-")).length
        const before = leftovers()
        for (const kind of Export.ROW_KINDS) {
          for (const format of Export.FORMATS) {
            for (const sel of ["all", fx.runA, fx.runB] as const) {
              const file = path.join(dir, `${kind}-${sel}.${format}`)
              yield* Export.exportStore(store, file, { kind, format, runId: sel === "all" ? undefined : sel })
              const r = yield* Effect.promise(() => fetch(`${base}/export?rows=${kind}&format=${format}&run_id=${sel}`))
              assert.strictEqual(r.status, 200)
              const body = Buffer.from(yield* Effect.promise(() => r.arrayBuffer()))
              assert.isTrue(body.equals(fs.readFileSync(file)), `${kind} ${format} ${sel}`)
              assert.strictEqual(r.headers.get("content-length"), String(body.length))
              assert.match(r.headers.get("content-disposition") ?? "", new RegExp(`^attachment; filename="assay-${kind}(-[A-Za-z0-9._-]+)?\\.${format}"$`))
            }
          }
        }
        // ?state= keeps the rows in that state: the export's lines of those rows, header included
        const all = fs.readFileSync(path.join(dir, "results-all.csv"), "utf8").split("\n")
        const failedCsv = yield* request(`${base}/export?rows=results&format=csv&state=failed`)
        const failedLines = failedCsv.body.split("\n")
        assert.strictEqual(failedLines[0], all[0])
        assert.deepStrictEqual(failedLines.slice(1), all.slice(1).filter((l) => l.includes(",failed,") || l === ""))
        assert.strictEqual(failedLines.filter((l) => l.includes(",failed,")).length, 3)
        const jsonl = yield* request(`${base}/export?rows=results&format=jsonl&state=failed`)
        const allJsonl = fs.readFileSync(path.join(dir, "results-all.jsonl"), "utf8").split("\n").filter((l) => l !== "")
        assert.strictEqual(jsonl.body, allJsonl.filter((l) => JSON.parse(l).state === "failed").map((l) => `${l}\n`).join(""))
        // HEAD: the headers, no body made
        const head = yield* Effect.promise(() => fetch(`${base}/export?rows=pipelines&format=jsonl`, { method: "HEAD" }))
        assert.strictEqual(head.status, 200)
        assert.strictEqual(head.headers.get("content-type"), "application/x-ndjson; charset=utf-8")
        // nothing is left behind in the temporary directory (each file is removed right after
        // its last byte is sent, which a client may see a moment before)
        for (let i = 0; i < 100 && leftovers() > before; i++) yield* Effect.sleep("20 millis")
        assert.strictEqual(leftovers(), before)
        for (const q of ["rows=nope", "format=xml", "rows=events&state=failed", "rows=results&state=weird", "run_id=nope"]) {
          const r = yield* request(`${base}/export?${q}`)
          assert.strictEqual(r.status, q === "run_id=nope" ? 404 : 400, q)
        }
        fs.rmSync(dir, { recursive: true, force: true })
      })))

  test("bad parameters answer 400, unknown runs and routes 404, writes 405; no artifact route", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        for (const q of ["/pipelines?limit=0", "/pipelines?limit=abc", "/events?limit=1001", "/pipelines?after=garbage", "/stats?run_id=", "/stats?run_id=a&run_id=b", "/errors?limit=-1"]) {
          const r = yield* request(`${base}${q}`)
          assert.strictEqual(r.status, 400, q)
          assert.isString(r.json.error, q)
        }
        // each refusal names the parameter and what it must be (decoded by Schema)
        const expected: ReadonlyArray<readonly [string, string]> = [
          ["/pipelines?limit=0", `"limit": must be between 1 and 1000, got 0`],
          ["/events?limit=abc", `"limit": must be an integer between 1 and 1000, got "abc"`],
          ["/errors?limit=5&limit=6", `"limit": given more than once`],
          ["/stats?run_id=%20", `"run_id": must not be empty`],
          ["/pipelines?after=garbage", `"after": is not a cursor returned by /pipelines`],
          ["/pipelines?state=bogus", `"state": must be one of pending, running, succeeded, failed, interrupted, got "bogus"`],
          ["/export?rows=nope", `"rows": must be one of pipelines, tasks, attempts, events, artifacts, results, handoffs, resources, pools, got "nope"`],
          ["/export?format=xml", `"format": must be one of jsonl, json, csv, got "xml"`],
          ["/export?rows=events&state=failed", `"state": filters results or pipelines rows only`],
          ["/export?state=weird&format=xml", `"format": must be one of jsonl, json, csv, got "xml"; "state": must be one of pending, running, succeeded, failed, interrupted, got "weird"`]
        ]
        for (const [q, message] of expected) {
          const r = yield* request(`${base}${q}`)
          assert.strictEqual(r.status, 400, q)
          assert.strictEqual(r.json.error, message, q)
        }
        for (const q of ["/stats?run_id=nope", "/metrics?run_id=nope", `/artifacts/${template(0).bind(1).pipelineId}/0`, "/artifact", "/nothing"]) {
          assert.strictEqual((yield* request(`${base}${q}`)).status, 404, q)
        }
        for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
          const r = yield* request(`${base}/stats`, { method })
          assert.strictEqual(r.status, 405, method)
          assert.strictEqual(r.headers.get("allow"), "GET, HEAD")
        }
      })))

  test("the dashboard escapes store text: an error message with <script> renders as text", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const r = yield* request(`${base}/`)
        assert.strictEqual(r.status, 200)
        assert.include(r.headers.get("content-type")!, "text/html")
        assert.include(r.headers.get("content-security-policy")!, "script-src 'self' 'sha256-")
        assert.include(r.body, "&lt;script&gt;alert(1)&lt;/script&gt; bad row 3")
        assert.notInclude(r.body, "<script>alert(1)")
        assert.include(r.body, "Accuracy")
        assert.include(r.body, "80.0%")
        const js = yield* request(`${base}/assets/uplot.js`)
        assert.strictEqual(js.status, 200)
        assert.include(js.headers.get("content-type")!, "javascript")
        assert.include(js.body, "uPlot")
      })))

  test("refuses a non-loopback host unless allowed", (fx) =>
    Effect.gen(function*() {
      assert.isTrue(StatsServer.isLoopback("127.0.0.1"))
      assert.isTrue(StatsServer.isLoopback("::1"))
      assert.isTrue(StatsServer.isLoopback("localhost"))
      assert.isFalse(StatsServer.isLoopback("0.0.0.0"))
      assert.isFalse(StatsServer.isLoopback("192.168.1.4"))
      const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        return yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), host: "0.0.0.0", port: 0 })
      })).pipe(Effect.provide(SqliteStore.layerReadOnly(fx.file))))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(JSON.stringify(exit), "refusing to listen on 0.0.0.0")
    }))

  test("answers only requests addressed to a loopback name with its port (DNS rebinding refused with 403)", (fx) =>
    withServer(fx.file, (base) =>
      Effect.gen(function*() {
        const port = Number(new URL(base).port)
        // node:http lets a test set Host as a browser on a rebound name would (fetch forbids it)
        const get = (host: string | undefined, route = "/stats") =>
          Effect.promise(() =>
            new Promise<{ status: number; body: string }>((resolve, reject) => {
              const req = http.request({ host: "127.0.0.1", port, path: route, setHost: host === undefined ? false : true, headers: host === undefined ? {} : { host } }, (res) => {
                let body = ""
                res.setEncoding("utf8")
                res.on("data", (c: string) => (body += c))
                res.on("end", () => resolve({ status: res.statusCode ?? 0, body }))
              })
              req.on("error", reject)
              req.end()
            })
          )
        for (const ok of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`]) {
          assert.strictEqual((yield* get(ok)).status, 200, ok)
        }
        for (const bad of [`evil.example:${port}`, "evil.example", `127.0.0.1:${port + 1}`, `localhost.evil.example:${port}`, "127.0.0.1"]) {
          for (const route of ["/", "/stats", "/events", "/assets/uplot.js"]) {
            const answer = yield* get(bad, route)
            assert.strictEqual(answer.status, 403, `${bad} ${route}`)
            assert.notInclude(answer.body, fx.runB)
          }
        }
        // (Node itself answers 400 to an HTTP/1.1 request without Host)
        assert.oneOf((yield* get(undefined)).status, [400, 403])
        // the pure check, for the shapes a header can take
        assert.isTrue(StatsServer.hostAllowed("localhost", 80))
        assert.isFalse(StatsServer.hostAllowed("localhost", 8787))
        assert.isTrue(StatsServer.hostAllowed("127.0.0.1:9", undefined))
        assert.isFalse(StatsServer.hostAllowed("[::1", 80))
        assert.isFalse(StatsServer.hostAllowed(undefined, 80))
      })))

  test("with allowAnyHost the Host header is not checked (serve --allow-remote, behind the user's proxy)", (fx) =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* Store
      const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0, allowRemote: true })
      const status = yield* Effect.promise(() =>
        new Promise<number>((resolve, reject) => {
          const req = http.request({ host: "127.0.0.1", port: info.port, path: "/stats", headers: { host: "dashboard.internal:443" } }, (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          })
          req.on("error", reject)
          req.end()
        })
      )
      assert.strictEqual(status, 200)
    })).pipe(Effect.provide(SqliteStore.layerReadOnly(fx.file))))

  it.effect("serves a store while a live runner writes it, through its read-only connection", () =>
    Effect.scoped(Effect.gen(function*() {
      const file = tmpFile()
      const writer = yield* Layer.build(writerLayer(file, { concurrency: 2 }))
      const run = yield* Effect.fork(Effect.provide(runRows(40, 70), writer))
      const seen = yield* withServer(file, (base) =>
        Effect.gen(function*() {
          const snaps: Array<Monitor.Snapshot> = []
          let pagesOk = 0
          while (true) {
            const s = (yield* request(`${base}/stats?run_id=latest`)).json as Monitor.Snapshot
            if (s.run_id !== null) snaps.push(s)
            if (s.run !== null && s.running) {
              const p = yield* request(`${base}/pipelines?limit=5&run_id=latest`)
              if (p.status === 200) pagesOk++
            }
            if (s.run !== null && !s.running) break
            yield* Effect.sleep("60 millis")
          }
          return { snaps, pagesOk }
        }))
      const report = yield* Fiber.join(run)
      const { pagesOk, snaps } = seen
      const during = snaps.filter((s) => s.running)
      assert.isTrue(during.some((s) => s.done > 0 && s.done < 40), "saw the run part-way")
      assert.isTrue(pagesOk > 0)
      for (let i = 1; i < snaps.length; i++) assert.isAtLeast(snaps[i]!.done, snaps[i - 1]!.done, "done never goes back")
      const last = snaps[snaps.length - 1]!
      assert.strictEqual(last.run_id, report.runId)
      assert.strictEqual(last.run?.status, "completed")
      assert.strictEqual(last.done, 40)
      assert.strictEqual(last.pipelines.by_state.failed, Array.from({ length: 40 }, (_, n) => n).filter(fails).length)
      assert.isTrue(during.some((s) => s.eta_ms !== null), "an ETA while running (the run recorded its total)")
    })), { timeout: 30_000 })
})
