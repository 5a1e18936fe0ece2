/**
 * `assay serve` on a study's output root: `/study` is the comparison `assay study report
 * --format json` prints (computed once and cached until the study's rows change),
 * `/study/evidence` the evidence of one number, `/study/page` the Study page with every value
 * escaped (a question and variable values written as `<script>` / `"><img onerror>` markup),
 * the dashboard links the page; a store where no study ran has none of it.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as path from "node:path"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import * as Monitor from "../../src/services/Monitor.js"
import * as StatsServer from "../../src/services/StatsServer.js"
import { Store } from "../../src/services/Store.js"
import type { StudyCatalogService } from "../../src/services/StudyCatalog.js"
import type * as StudyCompare from "../../src/services/StudyCompare.js"
import { LABELS, QUESTION, writeHostileStudy } from "../fixtures/study/hostile.js"
import { assay, start, tempDir } from "../support/cli.js"

const get = (url: string) =>
  Effect.promise(async () => {
    const r = await fetch(url)
    return { status: r.status, type: r.headers.get("content-type") ?? "", csp: r.headers.get("content-security-policy") ?? "", body: await r.text() }
  })

describe("assay serve on a study's output root", () => {
  it.live("/study is the report's JSON, cached; /study/evidence; the page escapes every value; the dashboard links it", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("serve-study")
      const file = writeHostileStudy(dir)
      const out = path.join(dir, "out")
      const ran = yield* assay(["study", "run", file, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)
      const report = yield* assay(["study", "report", file, "--format", "json"])
      assert.strictEqual(report.code, 0, report.stderr)

      const h = yield* SuiteStore.makeRead(out).pipe(Effect.provide(NodeContext.layer))
      // count the comparisons: each one reads the protocol versions
      let computed = 0
      const study: StudyCatalogService = { ...h.study, versions: (id) => Effect.tap(h.study.versions(id), () => Effect.sync(() => computed++)) }
      const info = yield* StatsServer.serve({
        store: h.store,
        reads: Monitor.storeReads(h.store),
        port: 0,
        suite: h.catalog,
        study: { study, catalog: h.catalog, studyId: h.catalog.suiteId }
      })

      const json = yield* get(`${info.url}/study`)
      assert.strictEqual(json.status, 200)
      assert.strictEqual(json.body, report.stdout.trim(), "the same comparison as assay study report --format json")
      const c = JSON.parse(json.body) as StudyCompare.StudyComparison
      const afterFirst = computed
      assert.isAbove(afterFirst, 0)
      assert.strictEqual(c.question, QUESTION)
      assert.deepStrictEqual(c.variants.map((v) => v.assignment["label"]), [LABELS[0], LABELS[1], LABELS[0], LABELS[1]])
      for (const v of c.variants) assert.isNotNull(v.values["accuracy"]!.interval, `${v.variantId} has an interval`)
      assert.isAbove(c.conclusion.candidates.length, 0)

      const ev = yield* get(`${info.url}/study/evidence?metric=accuracy&variant=v02`)
      assert.strictEqual(ev.status, 200, ev.body)
      const e = JSON.parse(ev.body) as StudyCompare.Evidence
      assert.deepStrictEqual(e.trials.map((t) => [t.trialId, t.pipelines.length]), [["p1-v02-r1", 40]])
      assert.strictEqual(e.value.mean, c.variants[1]!.values["accuracy"]!.mean)
      const unknown = yield* get(`${info.url}/study/evidence?metric=acuracy&variant=v02`)
      assert.strictEqual(unknown.status, 400)
      assert.include(unknown.body, "did you mean \\\"accuracy\\\"")
      const missing = yield* get(`${info.url}/study/evidence?metric=accuracy`)
      assert.strictEqual(missing.status, 400)
      assert.include(missing.body, "variant")

      // the page: every value escaped, nothing of the markup left active
      const page = yield* get(`${info.url}/study/page`)
      assert.strictEqual(page.status, 200)
      assert.include(page.type, "text/html")
      assert.include(page.csp, "script-src 'self' 'sha256-")
      assert.notInclude(page.body, "<script>alert")
      assert.notInclude(page.body, "<img src=x")
      assert.notInclude(page.body, "\"><img")
      assert.include(page.body, "&lt;script&gt;alert(1)&lt;/script&gt;")
      assert.include(page.body, "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;")
      assert.include(page.body, "Is &lt;script&gt;alert(&#39;q&#39;)&lt;/script&gt; shown as text?")
      for (const tab of ["Design", "Run", "Compare", "Evidence", "Conclusion"]) assert.include(page.body, `>${tab}</button>`)
      // evidence links open the trial's pipelines in the dashboard
      // (v01 answers every case alike: a tie, said in words, with no case links of its own)
      assert.match(page.body, /class="mono pid evidence-link" href="\/\?experiment=p1-v0[2-9]-r1"/)
      assert.match(page.body, /<p class="tie">all 40 cases have the value 1: a tie, no worst or best cases<\/p>/)

      // one comparison for all of these requests (nothing changed in the store)
      yield* get(`${info.url}/study`)
      assert.strictEqual(computed, afterFirst, "the comparison is computed once while the study's rows do not change")

      // the dashboard links the Study page
      const dashboard = yield* get(`${info.url}/`)
      assert.include(dashboard.body, `id="study-tab" class="study-tab" href="/study/page"`)

      // bin/assay serve ROOT serves the same page
      const served = start(["serve", out, "--port", "0"])
      yield* Effect.addFinalizer(() => Effect.promise(async () => {
        served.child.kill("SIGTERM")
        await served.done
      }))
      const url = yield* Effect.promise(async () => {
        const t0 = Date.now()
        while (!/at (http:\/\/\S+)\//.test(served.stdout())) {
          if (Date.now() - t0 > 30_000) throw new Error(`serve did not start: ${served.stderr()}`)
          await new Promise((r) => setTimeout(r, 50))
        }
        return /at (http:\/\/\S+)\//.exec(served.stdout())![1]!
      })
      const viaCli = yield* get(`${url}/study`)
      assert.strictEqual(viaCli.body, json.body)
    })), { timeout: 180_000 })

  it.live("a store where no study ran: no Study link, /study answers 404", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("serve-nostudy")
      const file = path.join(dir, "store.db")
      const store = yield* Effect.provide(Store, yield* Layer.build(SqliteStore.layer({ filename: file })))
      const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0 })
      const dashboard = yield* get(`${info.url}/`)
      assert.strictEqual(dashboard.status, 200)
      assert.notInclude(dashboard.body, "study-tab")
      for (const route of ["/study", "/study/page", "/study/evidence?metric=a&variant=b"]) {
        const r = yield* get(`${info.url}${route}`)
        assert.strictEqual(r.status, 404, route)
      }
    })), { timeout: 60_000 })
})
