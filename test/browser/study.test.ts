/**
 * The Study page in a real browser (Debian's Chromium through playwright-core), on a small
 * study run through `bin/assay` whose question and variable values are `<script>` and
 * `"><img onerror>` markup (test/fixtures/study/hostile.ts): the dashboard links the page, the
 * tabs switch, the Compare table shows every variant with its intervals, the Pareto plot has
 * one point per variant and marks the candidates, its labels (a long metric name and unit
 * included) and points lie inside the plot and a target objective's target is drawn with its
 * value (tester16d F6), an Evidence link opens the trial's pipelines in the dashboard, and no
 * markup from the study runs. With 12 variants (plot data swapped in), two variants at one
 * point share a marker (a ring per kind) and a label naming both, and every variant's id is
 * under its interval on the interval plot (tester16f F7). A point's colour and hover say its
 * front membership (strict front only, both fronts, …), and an axis of values none of which is
 * negative starts at 0 (tester16g F8). Skipped, with the reason printed, when
 * Chromium is not installed (`.ci/run` installs it). Screenshot: test-output/study.png.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { chromium, type BrowserContext } from "playwright-core"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import * as Monitor from "../../src/services/Monitor.js"
import * as StatsServer from "../../src/services/StatsServer.js"
import type * as StudyCompare from "../../src/services/StudyCompare.js"
import { LABELS, QUESTION, TARGET_METRIC, writeHostileStudy } from "../fixtures/study/hostile.js"
import { assay, tempDir } from "../support/cli.js"

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
const available = fs.existsSync(CHROMIUM)
if (!available) console.warn(`study page browser test skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium)`)

const OUT = path.resolve(import.meta.dirname, "../../test-output")

/** A headless Chromium for the current scope. */
const browser = Effect.acquireRelease(
  Effect.promise(() =>
    chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), "assay-chromium-")), {
      executablePath: CHROMIUM,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
      viewport: { width: 1280, height: 1300 }
    })
  ),
  (c: BrowserContext) => Effect.promise(() => c.close())
)

describe.skipIf(!available)("Study page in Chromium", () => {
  it.live("tabs, the Compare table with intervals, the Pareto plot, evidence links, inert markup", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("browser-study")
      // with a noise level whose trials all break the hard constraint (tester16b N6), and a
      // target objective on a metric with a long name (tester16d F6)
      const file = writeHostileStudy(dir, { breaker: true, target: true })
      const ran = yield* assay(["study", "run", file, "-q"], { killAfterMs: 120_000 })
      assert.include([0, 1], ran.code, ran.stderr)
      const h = yield* SuiteStore.makeRead(path.join(dir, "out")).pipe(Effect.provide(NodeContext.layer))
      const info = yield* StatsServer.serve({
        store: h.store,
        reads: Monitor.storeReads(h.store),
        port: 0,
        refreshMs: 500,
        suite: h.catalog,
        study: { study: h.study, catalog: h.catalog, studyId: h.catalog.suiteId }
      })
      const c = (yield* Effect.promise(() => fetch(`${info.url}/study`).then((r) => r.json()))) as StudyCompare.StudyComparison

      const context = yield* browser
      const page = yield* Effect.promise(() => context.newPage())
      const dialogs: Array<string> = []
      page.on("dialog", (d) => {
        dialogs.push(d.message())
        void d.dismiss()
      })
      const pageErrors: Array<string> = []
      page.on("pageerror", (e) => pageErrors.push(e.message))
      const visible = (id: string) => Effect.promise(() => page.locator(`#${id}`).isVisible())
      const textOf = (selector: string) => Effect.promise(() => page.locator(selector).first().innerText())

      // the dashboard links the Study page
      yield* Effect.promise(() => page.goto(`${info.url}/`))
      yield* Effect.promise(() => Promise.all([page.waitForURL(/\/study\/page/), page.locator("#study-tab").click()]))
      yield* Effect.promise(() => page.waitForFunction(() => (globalThis as any).window.__assayStudy?.ready === true))

      // Design first; the study's markup is shown as text
      assert.isTrue(yield* visible("panel-design"))
      assert.isFalse(yield* visible("panel-compare"))
      assert.strictEqual(yield* textOf("#study-question"), QUESTION)
      const labels = yield* Effect.promise(() => page.$$eval("#design-variants td.assign", (tds) => tds.map((td) => td.textContent ?? "")))
      for (const l of LABELS) assert.include(labels, l)

      // Compare: every variant, each value with its interval
      yield* Effect.promise(() => page.locator("#tab-compare").click())
      assert.isTrue(yield* visible("panel-compare"))
      assert.isFalse(yield* visible("panel-design"))
      const rows = yield* Effect.promise(() =>
        page.$$eval("#compare-table tbody tr", (trs) =>
          trs.map((tr) => ({
            variant: tr.getAttribute("data-variant"),
            accuracy: tr.querySelector("td[data-metric=accuracy]")?.textContent ?? ""
          })))
      )
      assert.deepStrictEqual(rows.map((r) => r.variant), c.variants.map((v) => v.variantId))
      const breakers = c.variants.filter((v) => v.succeeded === 0).map((v) => v.variantId)
      assert.strictEqual(breakers.length, 2, "the two noise-0.9 variants have no compared trial")
      for (const r of rows.filter((x) => !breakers.includes(x.variant!))) assert.match(r.accuracy, /\[[-0-9.e]+, [-0-9.e]+\]/, `${r.variant} shows an interval: ${r.accuracy}`)

      // the Pareto plot: one point per compared variant, the candidates marked
      const pareto = yield* Effect.promise(() =>
        page.evaluate(() => {
          const { document } = globalThis as any
          const box = document.getElementById("pareto-plot")
          // the variants drawn as each kind (a point several variants share names them all)
          const count = (kind: string) =>
            [...box.querySelectorAll(`svg circle.pt.${kind}`)].flatMap((c: any) => String(c.getAttribute("data-variant")).split(",")).length
          return {
            points: Number(box.getAttribute("data-points")),
            candidates: String(box.getAttribute("data-candidates")).split(",").filter((x: string) => x !== "").sort(),
            marked: count("candidate"),
            others: count("both") + count("uncertain") + count("strict") + count("dominated"),
            svg: box.querySelectorAll("svg").length,
            axes: [document.getElementById("pareto-x").value, document.getElementById("pareto-y").value],
            // each point labelled with its variant; each axis with its metric, unit and direction
            labels: String(box.getAttribute("data-labels")).split(",").filter((x: string) => x !== "").sort(),
            axisLabels: [box.getAttribute("data-axis-x"), box.getAttribute("data-axis-y")]
          }
        })
      )
      const compared = c.variants.filter((v) => v.succeeded > 0)
      assert.strictEqual(pareto.points, compared.length)
      assert.strictEqual(pareto.marked + pareto.others, compared.length)
      assert.deepStrictEqual(pareto.candidates, [...c.conclusion.candidates].sort())
      assert.strictEqual(pareto.marked, c.conclusion.candidates.length)
      assert.strictEqual(pareto.svg, 1)
      assert.deepStrictEqual(pareto.axes, ["accuracy", "wallMs"])
      assert.deepStrictEqual(pareto.labels, compared.map((v) => v.variantId).sort())
      assert.deepStrictEqual(pareto.axisLabels, ["accuracy, ↑ higher is better", "wallMs (ms), ↓ lower is better"])
      assert.strictEqual(Number(yield* Effect.promise(() => page.locator("#interval-plot").getAttribute("data-points"))), compared.length)
      fs.mkdirSync(OUT, { recursive: true })
      yield* Effect.promise(() => page.screenshot({ path: path.join(OUT, "study.png"), fullPage: true }))

      // tester16d F6: whatever the metric's name and unit, the axes' labels and every point and
      // its label lie inside the plot's SVG, and a target objective's target is drawn with its
      // value; on y (a horizontal line), then on x (a vertical one)
      const inside = () =>
        Effect.promise(() =>
          page.evaluate(() => {
            const { document } = globalThis as any
            const svg = document.querySelector("#pareto-plot svg")
            const box = svg.getBoundingClientRect()
            const rect = (el: any) => {
              const r = el.getBoundingClientRect()
              return { what: `${el.getAttribute("class")} ${el.textContent}`, left: r.left - box.left, top: r.top - box.top, right: r.right - box.left, bottom: r.bottom - box.top }
            }
            return {
              width: box.width,
              height: box.height,
              parts: [...svg.querySelectorAll("text.axis-label, text.pt-label, circle.pt, text.target-label")].map(rect),
              axisY: [...svg.querySelectorAll("text.axis-y tspan")].map((t: any) => t.textContent).join(" "),
              axisYTitle: svg.querySelector("text.axis-y title").textContent,
              targets: [...svg.querySelectorAll("text.target-label")].map((t: any) => t.firstChild.textContent),
              lines: svg.querySelectorAll("line.target-line").length,
              labels: [...svg.querySelectorAll("text.pt-label")].flatMap((t: any) => String(t.getAttribute("data-variant")).split(",")).sort()
            }
          })
        )
      const check = (got: Effect.Effect.Success<ReturnType<typeof inside>>, where: string) => {
        assert.deepStrictEqual(got.labels, compared.map((v) => v.variantId).sort(), where)
        for (const p of got.parts) {
          assert.isTrue(p.left >= 0 && p.top >= 0 && p.right <= got.width + 0.5 && p.bottom <= got.height + 0.5, `${where}: ${p.what} inside the ${got.width}x${got.height} plot: ${JSON.stringify(p)}`)
        }
        assert.deepStrictEqual(got.targets, ["target 0.8"], where)
        assert.strictEqual(got.lines, 1, where)
      }
      const select = (id: string, value: string) => Effect.promise(() => page.locator(`#${id}`).selectOption(value))
      yield* select("pareto-y", TARGET_METRIC)
      const onY = yield* inside()
      check(onY, "target on y")
      // the long label is wrapped or cut to the plot, its whole text in the title
      assert.strictEqual(onY.axisYTitle, `${TARGET_METRIC} (share of the numbers tried), → nearer the target 0.8 is better`)
      assert.notStrictEqual(onY.axisY, onY.axisYTitle)
      yield* Effect.promise(() => page.locator("#pareto-plot").screenshot({ path: path.join(OUT, "study-pareto-target.png") }))
      yield* select("pareto-x", TARGET_METRIC)
      yield* select("pareto-y", "accuracy")
      check(yield* inside(), "target on x")

      // Evidence: a pipeline link opens the dashboard's view of its trial, which lists that pipeline
      yield* Effect.promise(() => page.locator("#tab-evidence").click())
      assert.isTrue(yield* visible("panel-evidence"))
      // a variant whose trials all broke the hard constraint is there, its cases marked not compared
      for (const b of breakers) {
        const block = page.locator(`.evidence[data-variant="${b}"][data-metric="accuracy"]`)
        assert.strictEqual(yield* Effect.promise(() => block.count()), 1, `${b} has an evidence block`)
        const marked = yield* Effect.promise(() => block.locator(".not-compared").innerText())
        assert.include(marked, "not compared")
        assert.include(marked, "accuracy >= 0.5")
        const why = yield* Effect.promise(() => block.locator("p.muted").first().innerText())
        assert.include(why, "no compared repeat")
        assert.isAbove(yield* Effect.promise(() => block.locator("table.cases tr").count()), 0)
      }
      const link = page.locator("a.evidence-link").first()
      const pipelineId = yield* Effect.promise(() => link.innerText())
      const href = (yield* Effect.promise(() => link.getAttribute("href")))!
      const trial = new URL(href, info.url).searchParams.get("experiment")!
      yield* Effect.promise(() => Promise.all([page.waitForURL(/experiment=/), link.click()]))
      yield* Effect.promise(() => page.waitForFunction(() => ((globalThis as any).window.__assay?.refreshes ?? 0) > 0))
      assert.isAbove(yield* Effect.promise(() => page.locator("#pipelines tr").count()), 0)
      const listed = (yield* Effect.promise(() =>
        fetch(`${info.url}/pipelines?experiment=${encodeURIComponent(trial)}&limit=1000`).then((r) => r.json())
      )) as { rows: Array<{ pipeline_id: string }> }
      assert.isTrue(listed.rows.some((r) => r.pipeline_id === pipelineId), `${pipelineId} is one of ${trial}'s pipelines`)

      // no markup of the study ran or became an element
      yield* Effect.promise(() => page.goto(`${info.url}/study/page#design`))
      yield* Effect.promise(() => page.waitForFunction(() => (globalThis as any).window.__assayStudy?.ready === true))
      assert.strictEqual(yield* Effect.promise(() => page.locator("main img, main script").count()), 0)
      assert.deepStrictEqual(dialogs, [], "no alert fired")
      assert.deepStrictEqual(pageErrors, [], "the page script ran without errors")

      // tester16e F4: the page's plot data replaced by tester16e's case (the page's script and
      // its CSP unchanged): v02 and v03 at one point, a metric whose values differ only in the
      // third decimal of a large number (its ticks would round to one label), accuracy in a
      // unit (the interval plot's y label was cut: "accuracy (ratio), ↑ higher is bette")
      const real = JSON.parse((yield* Effect.promise(() => page.locator("#study-data").textContent())) ?? "{}") as {
        metrics: Record<string, { unit: string; direction: string }>
      }
      const acc = [0.75, 0.9, 0.9, 0.6167, 0.6, 0.55]
      const wall = [123456.011, 123456.012, 123456.012, 123456.013, 123456.014, 123456.015]
      const value = (mean: number, half: number) => ({ mean, lower: mean - half, upper: mean + half })
      const plot = {
        candidates: ["v01", "v02", "v03"],
        metrics: { ...real.metrics, accuracy: { unit: "ratio", direction: "maximize" }, wallMs: { unit: "ms", direction: "minimize" } },
        variants: acc.map((a, i) => ({
          id: `v0${i + 1}`,
          strict: i < 2,
          uncertain: i === 2,
          compared: true,
          values: Object.fromEntries(Object.keys(real.metrics).map((k) => [k, k === "wallMs" ? value(wall[i]!, 0.0004) : value(a, 0.05)]))
        }))
      }
      yield* Effect.promise(() =>
        page.route(/\/study\/page\?f4$/, async (route) => {
          const response = await route.fetch()
          const body = (await response.text()).replace(
            /(<script id="study-data" type="application\/json">)[\s\S]*?(<\/script>)/,
            (_, open: string, close: string) => `${open}${JSON.stringify(plot)}${close}`
          )
          await route.fulfill({ response, body })
        })
      )
      // a new document (not a hash change of the page already open)
      yield* Effect.promise(() => page.goto(`${info.url}/study/page?f4#compare`))
      yield* Effect.promise(() => page.waitForFunction(() => (globalThis as any).window.__assayStudy?.ready === true))
      yield* select("pareto-x", "accuracy")
      yield* select("pareto-y", "wallMs")
      const f4 = yield* Effect.promise(() =>
        page.evaluate(() => {
          const { document } = globalThis as any
          const svg = document.querySelector("#pareto-plot svg")
          const box = svg.getBoundingClientRect()
          const rect = (el: any) => {
            const r = el.getBoundingClientRect()
            return { what: `${el.getAttribute("class")} ${el.textContent}`, left: r.left - box.left, top: r.top - box.top, right: r.right - box.left, bottom: r.bottom - box.top }
          }
          return {
            width: box.width,
            height: box.height,
            labels: [...svg.querySelectorAll("text.pt-label")].map((t: any) => ({ id: t.getAttribute("data-variant"), ...rect(t) })),
            parts: [...svg.querySelectorAll("text.axis-label, text.pt-label, circle.pt, text.tick")].map(rect),
            ticksX: [...svg.querySelectorAll("text.tick-x")].map((t: any) => t.textContent),
            ticksY: [...svg.querySelectorAll("text.tick-y")].map((t: any) => t.textContent)
          }
        })
      )
      // every variant labelled, v02 and v03 both (one label at their shared point: tester16f
      // F7), no two labels overlapping, all inside the SVG
      assert.deepStrictEqual(f4.labels.map((l) => l.id).sort(), ["v01", "v02,v03", "v04", "v05", "v06"])
      for (const p of f4.parts) {
        assert.isTrue(p.left >= 0 && p.top >= 0 && p.right <= f4.width + 0.5 && p.bottom <= f4.height + 0.5, `F4: ${p.what} inside the ${f4.width}x${f4.height} plot: ${JSON.stringify(p)}`)
      }
      for (const a of f4.labels) {
        for (const b of f4.labels) {
          if (a.id >= b.id) continue
          const overlap = a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5
          assert.isFalse(overlap, `labels ${a.id} and ${b.id} overlap: ${JSON.stringify([a, b])}`)
        }
      }
      // tick labels: no two the same, on either axis
      for (const ticks of [f4.ticksX, f4.ticksY]) {
        assert.isAbove(ticks.length, 2, JSON.stringify(ticks))
        assert.strictEqual(new Set(ticks).size, ticks.length, `tick labels repeat: ${ticks.join(", ")}`)
      }
      // the interval plot: its y label fits the plot's height on uPlot's canvas (the metric, its
      // unit and which way is better), its tick labels distinct
      yield* select("interval-metric", "accuracy")
      const interval = () =>
        Effect.promise(() =>
          page.evaluate(() => {
            const { document } = globalThis as any
            const box = document.getElementById("interval-plot")
            const ctx = document.createElement("canvas").getContext("2d")
            ctx.font = "bold 12px system-ui, -apple-system, \"Segoe UI\", Roboto, \"Helvetica Neue\", Arial, \"Noto Sans\", sans-serif"
            const label = String(box.getAttribute("data-axis-y"))
            const plotHeight = box.querySelector(".u-over").getBoundingClientRect().height
            ctx.font = "12px system-ui, -apple-system, \"Segoe UI\", Roboto, \"Helvetica Neue\", Arial, \"Noto Sans\", sans-serif"
            const ticks = JSON.parse(box.getAttribute("data-ticks-y") ?? "[]") as Array<string>
            const widest = Math.max(...ticks.map((t) => ctx.measureText(t).width))
            return { label, width: ctx.measureText(label).width, plotHeight, title: box.title, ticks, widest, axisSize: Number(box.getAttribute("data-axis-y-size")) }
          })
        )
      const accuracy = yield* interval()
      assert.isAtMost(accuracy.width, accuracy.plotHeight, JSON.stringify(accuracy))
      assert.match(accuracy.label, /^accuracy \(ratio\)(, ↑ higher is better| ↑)$/, JSON.stringify(accuracy))
      assert.strictEqual(accuracy.title, "accuracy (ratio), ↑ higher is better")
      yield* select("interval-metric", "wallMs")
      const wallAxis = yield* interval()
      const wallTicks = wallAxis.ticks
      // the y axis is wide enough for its widest tick label (123456.015: none cut at the left)
      assert.isAtLeast(wallAxis.axisSize, wallAxis.widest + 15, JSON.stringify(wallAxis))
      assert.isAbove(wallTicks.length, 2, JSON.stringify(wallTicks))
      assert.strictEqual(new Set(wallTicks).size, wallTicks.length, `tick labels repeat: ${wallTicks.join(", ")}`)
      yield* Effect.promise(() => page.locator("#panel-compare").screenshot({ path: path.join(OUT, "study-f4.png") }))
      assert.deepStrictEqual(pageErrors, [], "the page script ran without errors on tester16e's case")

      // tester16f F7: 12 variants, some at one point: v02 (front within noise) under v03 (a
      // candidate, drawn larger), v07 and v08 (both dominated). Every point carries its
      // variant's name, on both plots; two variants at one point are both seen
      const many = ["v01", "v02", "v03", "v04", "v05", "v06", "v07", "v08", "v09", "v10", "v11", "v12"]
      const accs = [0.7, 0.9, 0.9, 0.62, 0.6, 0.55, 0.5, 0.5, 0.45, 0.4, 0.35, 0.3]
      const walls = [400, 300, 300, 500, 520, 540, 560, 560, 580, 600, 620, 640]
      const f7 = {
        candidates: ["v01", "v03"],
        metrics: { ...real.metrics, accuracy: { unit: "ratio", direction: "maximize" }, wallMs: { unit: "ms", direction: "minimize" } },
        variants: many.map((id, i) => ({
          id,
          strict: id === "v01" || id === "v03",
          uncertain: id === "v01" || id === "v02" || id === "v03",
          compared: true,
          values: Object.fromEntries(Object.keys(real.metrics).map((k) => [k, k === "wallMs" ? value(walls[i]!, 20) : value(accs[i]!, 0.04)]))
        }))
      }
      yield* Effect.promise(() =>
        page.route(/\/study\/page\?f7$/, async (route) => {
          const response = await route.fetch()
          const body = (await response.text()).replace(
            /(<script id="study-data" type="application\/json">)[\s\S]*?(<\/script>)/,
            (_, open: string, close: string) => `${open}${JSON.stringify(f7)}${close}`
          )
          await route.fulfill({ response, body })
        })
      )
      yield* Effect.promise(() => page.goto(`${info.url}/study/page?f7#compare`))
      yield* Effect.promise(() => page.waitForFunction(() => (globalThis as any).window.__assayStudy?.ready === true))
      yield* select("pareto-x", "accuracy")
      yield* select("pareto-y", "wallMs")
      yield* select("interval-metric", "accuracy")
      const shared = yield* Effect.promise(() =>
        page.evaluate(() => {
          const { document } = globalThis as any
          const svg = document.querySelector("#pareto-plot svg")
          svg.scrollIntoView({ block: "center" })
          const label = (id: string) => [...svg.querySelectorAll("text.pt-label")].find((t: any) => String(t.getAttribute("data-variant")).split(",").includes(id))
          // what the pointer finds at a point's centre, and 1.5 pixels inside its outer edge
          const at = (id: string) => {
            const circles = [...svg.querySelectorAll("circle.pt")].filter((c: any) => String(c.getAttribute("data-variants") ?? c.getAttribute("data-variant")).split(",").includes(id))
            const outer = circles.reduce((a: any, c: any) => (Number(c.getAttribute("r")) > Number(a.getAttribute("r")) ? c : a))
            const r = outer.getBoundingClientRect()
            const cx = r.left + r.width / 2
            const cy = r.top + r.height / 2
            const hit = (x: number, y: number) => {
              const el = document.elementFromPoint(x, y)
              return { cls: String(el?.getAttribute("class") ?? ""), title: String(el?.querySelector("title")?.textContent ?? "") }
            }
            return { centre: hit(cx, cy), rim: hit(cx + r.width / 2 - 1.5, cy) }
          }
          return {
            labels: Object.fromEntries(["v02", "v03", "v07", "v08"].map((id) => [id, String(label(id)?.firstChild?.textContent ?? "")])),
            v02: at("v02"),
            v07: at("v07"),
            legend: String(document.querySelector("#pareto-plot .legend").textContent)
          }
        })
      )
      // v02 and v03: one point, one label with both names; the pointer finds both names at its
      // centre and on its rim, and both kinds: the front within noise inside, the candidate around
      assert.strictEqual(shared.labels["v02"], "v02, v03", JSON.stringify(shared))
      assert.strictEqual(shared.labels["v03"], "v02, v03")
      for (const spot of [shared.v02.centre, shared.v02.rim]) {
        assert.include(spot.title, "v02", JSON.stringify(shared.v02))
        assert.include(spot.title, "v03", JSON.stringify(shared.v02))
      }
      assert.include(shared.v02.centre.cls, "uncertain", JSON.stringify(shared.v02))
      assert.include(shared.v02.rim.cls, "candidate", JSON.stringify(shared.v02))
      assert.strictEqual(shared.labels["v07"], "v07, v08")
      assert.include(shared.v07.centre.title, "v07")
      assert.include(shared.v07.centre.title, "v08")
      assert.include(shared.legend, "share its marker")
      // the interval plot: a name under every variant's interval (uPlot's own tick values), and
      // hovering a variant's interval names it in the legend
      const intervals = yield* Effect.promise(() =>
        page.evaluate(() => {
          const { window } = globalThis as any
          const u = window.__assayStudy.intervals
          return { ticks: (u.axes[0]._values ?? []).filter((t: string) => t !== ""), variants: u.variants, axis: u.axes[0].label }
        })
      )
      assert.deepStrictEqual(intervals.ticks, many, JSON.stringify(intervals))
      assert.strictEqual(intervals.axis, "variant")
      const over = page.locator("#interval-plot .u-over")
      const box = (yield* Effect.promise(() => over.boundingBox()))!
      for (const k of [1, 7, 12]) {
        const x = yield* Effect.promise(() => page.evaluate((i) => (globalThis as any).window.__assayStudy.intervals.valToPos(i, "x"), k))
        yield* Effect.promise(() => page.mouse.move(box.x + x, box.y + box.height / 2))
        const shown = yield* Effect.promise(() => page.locator("#interval-plot .u-legend .u-series").first().innerText())
        assert.include(shown, many[k - 1]!, `hovering variant ${k}: ${shown}`)
      }
      yield* Effect.promise(() => page.locator("#panel-compare .two").screenshot({ path: path.join(OUT, "study-f7.png") }))
      assert.deepStrictEqual(pageErrors, [], "the page script ran without errors on tester16f's case")

      // tester16g F8: a point's colour is its front membership (v01 on the strict front only,
      // dominated beyond noise: its own mark, not grey "dominated"; v03 on both fronts but no
      // candidate: not amber), and an axis whose values are never negative (wallMs all 0 here,
      // as calls or tokens can be) starts at 0 with no negative tick, on both plots
      const f8 = {
        candidates: ["v02"],
        metrics: { ...real.metrics, accuracy: { unit: "ratio", direction: "maximize" }, wallMs: { unit: "ms", direction: "minimize" } },
        variants: [[0.1, true, false], [0.4, true, true], [0.3, true, true], [0, false, false]].map(([a, strict, uncertain], i) => ({
          id: `v0${i + 1}`,
          strict,
          uncertain,
          compared: true,
          values: Object.fromEntries(Object.keys(real.metrics).map((k) => [k, k === "wallMs" ? value(0, 0) : value(a as number, 0)]))
        }))
      }
      yield* Effect.promise(() =>
        page.route(/\/study\/page\?f8$/, async (route) => {
          const response = await route.fetch()
          const body = (await response.text()).replace(
            /(<script id="study-data" type="application\/json">)[\s\S]*?(<\/script>)/,
            (_, open: string, close: string) => `${open}${JSON.stringify(f8)}${close}`
          )
          await route.fulfill({ response, body })
        })
      )
      yield* Effect.promise(() => page.goto(`${info.url}/study/page?f8#compare`))
      yield* Effect.promise(() => page.waitForFunction(() => (globalThis as any).window.__assayStudy?.ready === true))
      yield* select("pareto-x", "wallMs")
      yield* select("pareto-y", "accuracy")
      yield* select("interval-metric", "wallMs")
      const marks = yield* Effect.promise(() =>
        page.evaluate(() => {
          const { document } = globalThis as any
          const box = document.getElementById("pareto-plot")
          const svg = box.querySelector("svg")
          const circle = (id: string) => svg.querySelector(`circle.pt[data-variant="${id}"]`)
          return {
            kinds: Object.fromEntries(["v01", "v02", "v03", "v04"].map((id) => [id, String(circle(id)?.getAttribute("class") ?? "")])),
            fills: Object.fromEntries(["v01", "v02", "v03", "v04"].map((id) => [id, String(circle(id)?.getAttribute("fill") ?? "")])),
            titles: Object.fromEntries(["v01", "v03"].map((id) => [id, String(circle(id)?.querySelector("title")?.textContent ?? "")])),
            legend: String(box.querySelector(".legend").textContent),
            range: JSON.parse(box.getAttribute("data-range")) as [[number, number], [number, number]],
            ticks: [...svg.querySelectorAll("text.tick")].map((t: any) => String(t.textContent)),
            intervalRange: JSON.parse(document.getElementById("interval-plot").getAttribute("data-range-y")) as [number, number],
            intervalTicks: JSON.parse(document.getElementById("interval-plot").getAttribute("data-ticks-y") ?? "[]") as Array<string>
          }
        })
      )
      assert.include(marks.kinds["v01"], "strict", JSON.stringify(marks))
      assert.include(marks.kinds["v02"], "candidate")
      assert.include(marks.kinds["v03"], "both")
      assert.include(marks.kinds["v04"], "dominated")
      assert.strictEqual(new Set(Object.values(marks.fills)).size, 4, `four colours: ${JSON.stringify(marks.fills)}`)
      assert.include(marks.titles["v01"], "v01 (strict front only: dominated beyond noise)")
      assert.notInclude(marks.titles["v01"], "(dominated)")
      assert.include(marks.titles["v03"], "v03 (on both fronts)")
      for (const k of ["candidate", "on both fronts", "strict front only", "dominated"]) assert.include(marks.legend, k)
      assert.deepStrictEqual(marks.range[0], [0, 1], "wallMs, all 0: from 0")
      assert.strictEqual(marks.range[1][0], 0, "accuracy from 0")
      assert.isAbove(marks.ticks.length, 4)
      for (const t of marks.ticks) assert.isAtLeast(Number(t), 0, `negative tick ${t} of ${marks.ticks.join(", ")}`)
      assert.strictEqual(marks.intervalRange[0], 0)
      assert.isAbove(marks.intervalTicks.length, 1)
      for (const t of marks.intervalTicks) assert.isAtLeast(Number(t), 0, `negative interval tick ${t} of ${marks.intervalTicks.join(", ")}`)
      yield* Effect.promise(() => page.locator("#panel-compare .two").screenshot({ path: path.join(OUT, "study-f8.png") }))
      assert.deepStrictEqual(pageErrors, [], "the page script ran without errors on tester16g F8's case")
    })), { timeout: 240_000 })
})
