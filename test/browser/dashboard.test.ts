/**
 * The dashboard in a real browser (Debian's Chromium through playwright-core): a real run of
 * mock tasks writes a store while `serve`'s read-only view is open in the page; the counters
 * and the chart must advance while the run proceeds, an error message containing
 * `<script>alert(1)</script>` must render as text (no dialog), and a screenshot is saved
 * under test-output/.
 *
 * Skipped, with the reason printed, when Chromium is not installed (`.ci/run` installs it).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { chromium } from "playwright-core"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Monitor from "../../src/services/Monitor.js"
import * as StatsServer from "../../src/services/StatsServer.js"
import { Store } from "../../src/services/Store.js"
import { fails, runRows, SCRIPT_MESSAGE, writerLayer } from "../fixtures/monitor/liveRun.js"

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
const available = fs.existsSync(CHROMIUM)
if (!available) console.warn(`dashboard browser test skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium)`)

const OUT = path.resolve(import.meta.dirname, "../../test-output")
const ROWS = 80

interface Seen {
  readonly succeeded: number
  readonly done: number
  readonly chartDone: number
  readonly points: number
  readonly status: string
}

describe.skipIf(!available)("dashboard in Chromium", () => {
  it.live("counters and chart advance during a real run; markup in errors renders as text", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-browser-"))
      const file = path.join(dir, "store.db")
      const writer = yield* Layer.build(writerLayer(file, { concurrency: 4 }))
      const run = yield* Effect.fork(Effect.provide(runRows(ROWS, 150), writer))

      const store = yield* Effect.provide(Store, yield* Layer.build(SqliteStore.layerReadOnly(file)))
      const reads = Monitor.storeReads(store)
      const info = yield* StatsServer.serve({ store, reads, port: 0, refreshMs: 250 })

      const context = yield* Effect.acquireRelease(
        Effect.promise(() =>
          chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), "assay-chromium-")), {
            executablePath: CHROMIUM,
            headless: true,
            args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
            viewport: { width: 1280, height: 1300 }
          })
        ),
        (c) => Effect.promise(() => c.close())
      )
      const page = yield* Effect.promise(() => context.newPage())
      const dialogs: Array<string> = []
      page.on("dialog", (d) => {
        dialogs.push(d.message())
        void d.dismiss()
      })
      const pageErrors: Array<string> = []
      page.on("pageerror", (e) => pageErrors.push(e.message))
      yield* Effect.promise(() => page.goto(`${info.url}/`))

      const read = Effect.promise((): Promise<Seen> =>
        page.evaluate(() => {
          // runs in the page (the test's tsconfig has no DOM lib)
          const { document, window } = globalThis as any
          const num = (id: string) => Number(document.getElementById(id)?.textContent ?? "NaN")
          const chart = window.__assay?.chart
          const cumulative: Array<number> = chart ? chart.data[2] : []
          return {
            succeeded: num("count-succeeded"),
            done: num("done"),
            chartDone: cumulative.length > 0 ? cumulative[cumulative.length - 1]! : 0,
            points: cumulative.length,
            status: document.getElementById("run-status")?.textContent ?? ""
          }
        })
      )
      // sample the page while the run proceeds
      const samples: Array<Seen> = []
      while (true) {
        const s = yield* read
        samples.push(s)
        if (s.status !== "running" && s.status !== "") break
        yield* Effect.sleep("300 millis")
      }
      const report = yield* Fiber.join(run)
      assert.strictEqual(report.status, "completed")

      const during = samples.filter((s) => s.status === "running")
      const distinctDone = new Set(during.map((s) => s.done))
      assert.isAtLeast(distinctDone.size, 3, `the done counter advanced while running: ${JSON.stringify(during.map((s) => s.done))}`)
      const chartValues = new Set(during.map((s) => s.chartDone))
      assert.isAtLeast(chartValues.size, 2, "the chart's cumulative series advanced while running")
      for (let i = 1; i < samples.length; i++) assert.isAtLeast(samples[i]!.done, samples[i - 1]!.done)

      // wait for the page's next refresh after the end
      yield* Effect.promise(() =>
        page.waitForFunction((n) => (globalThis as any).document.getElementById("done")?.textContent === String(n), ROWS, { timeout: 10_000 })
      )
      const final = yield* read
      assert.strictEqual(final.status, "completed")
      assert.strictEqual(final.chartDone, ROWS)
      const failed = Array.from({ length: ROWS }, (_, n) => n).filter(fails).length
      assert.strictEqual(final.succeeded, ROWS - failed)

      // the error message is shown as text, and no script ran from it
      const errorTexts = yield* Effect.promise(() =>
        page.$$eval("#errors td.msg", (tds) => tds.map((td) => td.textContent ?? ""))
      )
      assert.isTrue(errorTexts.length > 0)
      assert.isTrue(errorTexts.every((t) => t.includes(SCRIPT_MESSAGE)), JSON.stringify(errorTexts))
      const injected = yield* Effect.promise(() => page.$$eval("#errors script, #pipelines script", (s) => s.length))
      assert.strictEqual(injected, 0)
      assert.deepStrictEqual(dialogs, [], "no alert fired")
      assert.deepStrictEqual(pageErrors, [], "the page script ran without errors")
      const cards = yield* Effect.promise(() => page.$$eval("#metrics .metric .label", (els) => els.map((e) => e.textContent)))
      assert.deepStrictEqual(cards, ["Accuracy", "Evaluated", "Phase"])

      fs.mkdirSync(OUT, { recursive: true })
      yield* Effect.promise(() => page.screenshot({ path: path.join(OUT, "dashboard.png") }))
      assert.isTrue(fs.statSync(path.join(OUT, "dashboard.png")).size > 10_000)
    })), { timeout: 60_000 })
})
