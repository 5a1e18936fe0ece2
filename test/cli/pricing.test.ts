/**
 * Token and cost accounting as a user meets it through `bin/assay` (issue 18 §2): a bad price
 * refused with its field path (exit 2); `run` against the mock LLM with a price table, then
 * `report` (text and JSON) and `export --rows attempts` (JSON Lines) showing the figures; and `study run`
 * taking the call cache flags with `run`'s meaning (a shared `--cache-db` serves a second
 * output root without a call; a bad `--cache-ttl` is exit 2); `report`'s top pipelines and the pipelines export's
 * columns; a study's costUsd budget priced by the experiment's table (refused by path without a price).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as NodePath from "node:path"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, count, start, tempDir, waitFor, write } from "../support/cli.js"

const KEY = "sk-cli-price-7a6b5c4d3e2f"

const mock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "m", latency: { medianMs: 0 } }] })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

const experiment = (dir: string, baseUrl: string, extra: Record<string, unknown> = {}, resource: Record<string, unknown> = {}) => {
  write(dir, "rows.jsonl", ["win money now", "lunch on friday?", "meeting notes"].map((p) => JSON.stringify({ prompt: p })).join("\n"))
  return write(dir, "exp.json", {
    pools: {
      llm: { resources: [{ id: "m", capacity: 2, options: { baseUrl, model: "mock-spam-1", apiKeyEnv: "PRICE_TEST_KEY" }, ...resource }] }
    },
    pipeline: { name: "ask", tasks: [{ use: "chat", options: { temperature: 0 } }] },
    source: { jsonl: { path: "rows.jsonl" } },
    ...extra
  })
}

describe("pricing through bin/assay", () => {
  it.scopedLive("a bad price is refused with its field path (exit 2); run → report and export show tokens and cost", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("pricing")
      const baseUrl = server.endpoints[0]!.baseUrl
      const env = { PRICE_TEST_KEY: KEY }

      // a negative price, an unknown field, a resource's price that is not a number
      const bad = experiment(dir, baseUrl, { pricing: { "mock-spam-1": { inputPer1M: -1, outputPer1M: 2, cachedPer1M: 1 } } }, {
        pricing: { inputPer1M: "cheap", outputPer1M: 1 }
      })
      const refused = yield* assay(["run", "-c", bad, "--store", "bad.db", "--quiet"], { cwd: dir, env })
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.include(refused.stderr, "pricing.mock-spam-1.inputPer1M")
      assert.include(refused.stderr, "pricing.mock-spam-1.cachedPer1M")
      assert.include(refused.stderr, "pools.llm.resources[0].pricing")
      assert.isFalse(fs.existsSync(NodePath.join(dir, "bad.db")), "nothing written")

      const good = experiment(dir, baseUrl, { pricing: { "mock-spam-1": { inputPer1M: 2, outputPer1M: 8 } } })
      const ran = yield* assay(["run", "-c", good, "--store", "run.db", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)

      const json = yield* assay(["report", "run.db", "--json"], { cwd: dir })
      assert.strictEqual(json.code, 0, json.stderr)
      const r = JSON.parse(json.stdout) as {
        accounting: { total: { tokensIn: number; tokensOut: number; costUsd: number; unpriced: number } }
        resources: Array<{ resourceId: string; tokensIn: number; costUsd: number }>
      }
      const t = r.accounting.total
      assert.isAbove(t.tokensIn, 0)
      assert.isAbove(t.tokensOut, 0)
      assert.strictEqual(t.unpriced, 0)
      assert.closeTo(t.costUsd, (t.tokensIn * 2 + t.tokensOut * 8) / 1e6, 1e-12)
      assert.strictEqual(r.resources.find((x) => x.resourceId === "m")!.tokensIn, t.tokensIn)

      const text = yield* assay(["report", "run.db"], { cwd: dir })
      assert.include(text.stdout, `Tokens and cost (each attempt once): calls 3; tokens in ${t.tokensIn}, out ${t.tokensOut}; cost $`)
      assert.include(text.stdout, "Top 3 pipeline(s) by cost:")

      // the per-pipeline figures: report's top N (by tokens), and the pipelines export's columns
      const top = yield* assay(["report", "run.db", "--json", "--top-pipelines", "1", "--pipelines-by", "tokens"], { cwd: dir })
      assert.strictEqual(top.code, 0, top.stderr)
      const tp = (JSON.parse(top.stdout) as { accounting: { pipelines: { by: string; rows: Array<Record<string, number | string>> } } })
        .accounting.pipelines
      assert.strictEqual(tp.by, "tokens")
      assert.strictEqual(tp.rows.length, 1)
      const csv = yield* assay(["export", "run.db", "pipelines.csv", "--rows", "pipelines", "--format", "csv"], { cwd: dir })
      assert.strictEqual(csv.code, 0, csv.stderr)
      const cols = fs.readFileSync(NodePath.join(dir, "pipelines.csv"), "utf8").split("\n")[0]!.split(",")
      for (const c of ["calls", "cacheHits", "tokensIn", "tokensOut", "costUsd", "estimated", "unpriced"]) assert.include(cols, c)
      const jsonl = yield* assay(["export", "run.db", "pipelines.jsonl", "--rows", "pipelines", "--format", "jsonl"], { cwd: dir })
      assert.strictEqual(jsonl.code, 0, jsonl.stderr)
      const ps = fs.readFileSync(NodePath.join(dir, "pipelines.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>)
      assert.strictEqual(ps.length, 3)
      assert.deepStrictEqual(ps.map((p) => [p["calls"], p["cacheHits"], p["unpriced"]]), [[1, 0, 0], [1, 0, 0], [1, 0, 0]])
      assert.strictEqual(ps.reduce((n, p) => n + p["tokensIn"]!, 0), t.tokensIn)
      assert.closeTo(ps.reduce((n, p) => n + p["costUsd"]!, 0), t.costUsd, 1e-12)
      const most = Math.max(...ps.map((p) => p["tokensIn"]! + p["tokensOut"]!))
      assert.strictEqual(Number(tp.rows[0]!.tokensIn) + Number(tp.rows[0]!.tokensOut), most)

      const exported = yield* assay(["export", "run.db", "attempts.jsonl", "--rows", "attempts", "--format", "jsonl"], { cwd: dir })
      assert.strictEqual(exported.code, 0, exported.stderr)
      const rows = fs.readFileSync(NodePath.join(dir, "attempts.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>)
      assert.strictEqual(rows.length, 3)
      for (const row of rows) {
        assert.strictEqual(row["model"], "mock-spam-1")
        assert.strictEqual(row["tokensEstimated"], false)
        assert.isAbove(row["tokensIn"] as number, 0)
      }
      const cost = rows.reduce((n, row) => n + (row["costUsd"] as number), 0)
      assert.closeTo(cost, t.costUsd, 1e-12)
    }))
})

describe("unpriced calls through bin/assay", () => {
  it.scopedLive("validate: a near miss in the pricing key is warned at the key, suggesting the model's name (tester18f F6); a model with no near price keeps the resource's warning", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("price-near")
      const price = { inputPer1M: 2, outputPer1M: 8 }
      const near = experiment(dir, "http://127.0.0.1:9/v1", { pricing: { "mock-spam1": price } })
      const warned = yield* assay(["validate", "-c", near], { cwd: dir, env: { PRICE_TEST_KEY: KEY } })
      assert.strictEqual(warned.code, 0, warned.stderr)
      const out = warned.stdout + warned.stderr
      assert.include(
        out,
        "warning: pricing.mock-spam1: no model in use is called \"mock-spam1\"; did you mean \"mock-spam-1\" (the model of pools.llm.resources[0] (m))? Until then, calls of \"mock-spam-1\" count as unpriced."
      )
      assert.notInclude(out, "pools.llm.resources[0] (m): model")
      const far = write(dir, "far.json", {
        ...JSON.parse(fs.readFileSync(near, "utf8")) as Record<string, unknown>,
        pricing: { "other-model": price }
      })
      const plain = yield* assay(["validate", "-c", far], { cwd: dir, env: { PRICE_TEST_KEY: KEY } })
      assert.strictEqual(plain.code, 0, plain.stderr)
      assert.include(
        plain.stdout + plain.stderr,
        "warning: pools.llm.resources[0] (m): model \"mock-spam-1\" has no price, so its calls will count as unpriced (priced: \"other-model\")"
      )
    }))

  it.scopedLive("no price anywhere: report (text, JSON) and the pipelines export give the cost as unknown, never $0", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("unpriced")
      const exp = experiment(dir, server.endpoints[0]!.baseUrl)
      const env = { PRICE_TEST_KEY: KEY }
      const ran = yield* assay(["run", "-c", exp, "--store", "run.db", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)
      const json = yield* assay(["report", "run.db", "--json"], { cwd: dir })
      const r = JSON.parse(json.stdout) as {
        accounting: { total: { costUsd: number | null; unpriced: number }; pools: Array<{ costUsd: number | null }> }
        resources: Array<{ costUsd: number | null }>
      }
      assert.deepStrictEqual([r.accounting.total.costUsd, r.accounting.total.unpriced], [null, 3])
      assert.deepStrictEqual(r.resources.map((x) => x.costUsd), [null])
      const text = (yield* assay(["report", "run.db"], { cwd: dir })).stdout
      assert.include(text, "cost unpriced (3 attempts)")
      assert.notInclude(text, "$0")
      const jsonl = yield* assay(["export", "run.db", "p.jsonl", "--rows", "pipelines", "--format", "jsonl"], { cwd: dir })
      assert.strictEqual(jsonl.code, 0, jsonl.stderr)
      const ps = fs.readFileSync(NodePath.join(dir, "p.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>)
      assert.deepStrictEqual(ps.map((p) => [p["costUsd"], p["unpriced"]]), [[null, 1], [null, 1], [null, 1]])
    }))
})

describe("study run takes the call cache flags", () => {
  it.scopedLive("--cache-db: a second output root is served from the shared cache (0 calls); --cache-ttl nonsense is exit 2", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("study-cache")
      const baseUrl = server.endpoints[0]!.baseUrl
      const env = { PRICE_TEST_KEY: KEY }
      experiment(dir, baseUrl)
      const base = JSON.parse(fs.readFileSync(NodePath.join(dir, "exp.json"), "utf8"))
      base.pipeline.tasks[0].options.temperature = { $var: "temperature" }
      write(dir, "sexp.json", base)
      write(dir, "study.yaml", [
        "study: { id: cached, question: Does the cache serve a study?, type: compare }",
        "protocol: { experiment: ./sexp.json }",
        "output: { root: ./out-a }",
        "variables:",
        "  - name: temperature",
        "    type: enum",
        "    values: [0, 1]",
        "baseline: { temperature: 0 }",
        "repeats: 1"
      ].join("\n"))
      const calls = Effect.map(server.log, (log) => log.filter((e) => e.status === 200).length)
      const run = (args: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const before = yield* calls
          const r = yield* assay(["study", "run", "study.yaml", "-q", ...args], { cwd: dir, env, killAfterMs: 120_000 })
          return { r, calls: (yield* calls) - before }
        })
      const first = yield* run(["--cache-db", "cache.db"])
      assert.strictEqual(first.r.code, 0, first.r.stderr)
      assert.strictEqual(first.calls, 6, "2 variants × 3 rows")
      const second = yield* run(["--cache-db", "cache.db", "--output-root", "out-b"])
      assert.strictEqual(second.r.code, 0, second.r.stderr)
      assert.strictEqual(second.calls, 0, "every call served from the shared cache")
      // each trial's hits and misses, from its attempt rows, in study status and study report
      // (text, Markdown, JSON) as study run shows them (issue 18)
      const read = (args: ReadonlyArray<string>) =>
        Effect.map(assay(["study", ...args], { cwd: dir, env }), (r) => {
          assert.strictEqual(r.code, 0, r.stderr)
          return r.stdout
        })
      type StatusJson = { trials: Array<{ trialId: string; cache?: { hits: number; misses: number; costSavedUsd: number | null } }> }
      const statusOf = (root: string) => Effect.map(read(["status", "study.yaml", "--output-root", root, "--json"]), (o) => JSON.parse(o) as StatusJson)
      assert.deepStrictEqual((yield* statusOf("out-a")).trials.map((t) => [t.trialId, t.cache === undefined ? undefined : { hits: t.cache.hits, misses: t.cache.misses }]), [
        ["p1-v01-r1", { hits: 0, misses: 3 }],
        ["p1-v02-r1", { hits: 0, misses: 3 }]
      ])
      assert.deepStrictEqual((yield* statusOf("out-b")).trials.map((t) => [t.trialId, t.cache === undefined ? undefined : { hits: t.cache.hits, misses: t.cache.misses }]), [
        ["p1-v01-r1", { hits: 3, misses: 0 }],
        ["p1-v02-r1", { hits: 3, misses: 0 }]
      ])
      const statusText = yield* read(["status", "study.yaml", "--output-root", "out-b"])
      assert.include(statusText, "cache hit/miss")
      assert.match(statusText, /p1-v01-r1 .* 3\/0 /)
      // the calls in study run's wording (callsServedText), beside the hit/miss column: one wording
      assert.match(statusText, /p1-v01-r1 .* 0 calls \(3 served from cache[,)].* 3\/0 /)
      assert.notMatch(statusText, /p1-v01-r1 .* 0 +3\/0 /)
      assert.match(yield* read(["status", "study.yaml", "--output-root", "out-a"]), /p1-v01-r1 .* 3 calls +0\/3 /)
      const reportText = yield* read(["report", "study.yaml", "--output-root", "out-b"])
      assert.include(reportText, "call cache: 6 hits, 0 misses; per trial (hits/misses): p1-v01-r1 3/0 · p1-v02-r1 3/0")
      // no objectives: no Pareto placement, never "dominated by " an empty list (tester18c F7)
      assert.notInclude(reportText, "dominated by ;")
      assert.include(reportText, "Pareto: none (no objectives to place it by)")
      const reportMd = yield* read(["report", "study.yaml", "--output-root", "out-a", "--format", "markdown"])
      assert.include(reportMd, "- call cache: 0 hits, 6 misses; per trial (hits/misses): p1-v01-r1 0/3 · p1-v02-r1 0/3")
      const reportJson = JSON.parse(yield* read(["report", "study.yaml", "--output-root", "out-b", "--format", "json"])) as {
        run: { cache?: unknown }
        variants: Array<{ trials: Array<{ trialId: string; cache?: unknown }> }>
      }
      assert.deepStrictEqual(reportJson.run.cache, { hits: 6, misses: 0 })
      assert.deepStrictEqual(reportJson.variants.flatMap((v) => v.trials.map((t) => [t.trialId, t.cache])), [
        ["p1-v01-r1", { hits: 3, misses: 0 }],
        ["p1-v02-r1", { hits: 3, misses: 0 }]
      ])
      // without the flags a third root calls again
      const third = yield* run(["--output-root", "out-c"])
      assert.strictEqual(third.r.code, 0, third.r.stderr)
      assert.strictEqual(third.calls, 6)
      // the cache did nothing there: no cache column, no cache line
      assert.notInclude(yield* read(["status", "study.yaml", "--output-root", "out-c"]), "cache hit/miss")
      assert.notInclude(yield* read(["report", "study.yaml", "--output-root", "out-c"]), "call cache:")
      const badTtl = yield* run(["--cache-ttl", "soon", "--output-root", "out-d"])
      assert.strictEqual(badTtl.r.code, 2, badTtl.r.stderr)
      assert.include(badTtl.r.stderr, "--cache-ttl")
    }))
})

describe("a study's costUsd budget reads the experiment's pricing", () => {
  it.scopedLive("no price for the model: refused at budget.perTrial.costUsd (exit 2); priced by the experiment's table: the plan has a cost and the study runs within it", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("study-cost")
      const baseUrl = server.endpoints[0]!.baseUrl
      const env = { PRICE_TEST_KEY: KEY }
      const studyFile = (exp: string) =>
        write(dir, `study-${exp}.yaml`, [
          "study: { id: costed, question: Does the table price the budget?, type: compare }",
          `protocol: { experiment: ./${exp} }`,
          `output: { root: ./out-${exp} }`,
          "variables:",
          "  - name: temperature",
          "    type: enum",
          "    values: [0, 1]",
          "baseline: { temperature: 0 }",
          "budget: { perTrial: { costUsd: 10 } }",
          "repeats: 1"
        ].join("\n"))
      const withVar = (extra: Record<string, unknown>, name: string) => {
        experiment(dir, baseUrl, extra)
        const base = JSON.parse(fs.readFileSync(NodePath.join(dir, "exp.json"), "utf8"))
        base.pipeline.tasks[0].options.temperature = { $var: "temperature" }
        base.pipeline.tasks[0].options.maxTokens = 5
        write(dir, name, base)
        return name
      }
      const unpriced = yield* assay(["study", "plan", studyFile(withVar({}, "bare.json"))], { cwd: dir, env })
      assert.strictEqual(unpriced.code, 2, unpriced.stderr)
      assert.include(unpriced.stderr, "budget.perTrial.costUsd")
      assert.include(unpriced.stderr, "model mock-spam-1 (task chat on llm/m)")

      const priced = studyFile(withVar({ pricing: { "mock-spam-1": { inputPer1M: 2, outputPer1M: 8 } } }, "priced.json"))
      const plan = yield* assay(["study", "plan", priced], { cwd: dir, env })
      assert.strictEqual(plan.code, 0, plan.stderr)
      assert.match(plan.stdout, /\ncost: +\$[0-9.]+ \.\. \$[0-9.]+\n/)
      const ran = yield* assay(["study", "run", priced, "-q"], { cwd: dir, env, killAfterMs: 120_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)
    }))
})

describe("report's scope after a kill and a resume", () => {
  it.scopedLive("the report says it shows the latest run and gives the whole experiment beside it; --run-id all shows it; a pool of two resources gets a subtotal", () =>
    Effect.gen(function*() {
      const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "m", latency: { medianMs: 150 } }] }).pipe(Effect.orDie)
      const server = yield* MockLlm.serve({ profile }).pipe(Effect.provide(NodeContext.layer))
      const dir = yield* tempDir("scope")
      const baseUrl = server.endpoints[0]!.baseUrl
      const env = { PRICE_TEST_KEY: KEY }
      write(dir, "rows.jsonl", Array.from({ length: 24 }, (_, i) => JSON.stringify({ prompt: `message ${i}` })).join("\n"))
      const options = { baseUrl, model: "mock-spam-1", apiKeyEnv: "PRICE_TEST_KEY" }
      const exp = write(dir, "exp.json", {
        pools: { llm: { resources: [{ id: "a", capacity: 1, options }, { id: "b", capacity: 1, options }] } },
        pipeline: { name: "ask", tasks: [{ use: "chat", options: { temperature: 0 } }] },
        source: { jsonl: { path: "rows.jsonl" } },
        pricing: { "mock-spam-1": { inputPer1M: 2, outputPer1M: 8 } }
      })
      const db = NodePath.join(dir, "run.db")
      // a real kill (SIGKILL) once a few calls are in the store, then a resume
      const first = start(["run", "-c", exp, "--store", "run.db", "--quiet"], { cwd: dir, env })
      yield* Effect.promise(() => waitFor(() => count(db, "SELECT count(*) FROM attempts WHERE tokens_in IS NOT NULL") >= 4, "4 calls"))
      first.child.kill("SIGKILL")
      yield* Effect.promise(() => first.done)
      const resumed = yield* assay(["resume", "-c", exp, "--store", "run.db", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      const calls = count(db, "SELECT count(*) FROM attempts WHERE tokens_in IS NOT NULL OR tokens_out IS NOT NULL")

      type Figures = { calls: number; costUsd: number | null; runs?: number }
      const latest = JSON.parse((yield* assay(["report", "run.db", "--json"], { cwd: dir })).stdout) as {
        accounting: { total: Figures; experiment?: Figures; pools: Array<{ pool: string; resources: number; costUsd: number | null }> }
      }
      assert.strictEqual(latest.accounting.experiment?.runs, 2)
      assert.strictEqual(latest.accounting.experiment?.calls, calls, "the whole experiment: every call of both runs")
      assert.isBelow(latest.accounting.total.calls, calls, "the latest run alone made fewer calls")
      assert.deepStrictEqual(latest.accounting.pools.map((p) => [p.pool, p.resources]), [["llm", 2]])
      const text = (yield* assay(["report", "run.db"], { cwd: dir })).stdout
      assert.match(text, new RegExp(`^Scope: this run \\(the latest\\): ${latest.accounting.total.calls} calls, .* · whole experiment \\(2 runs\\): ${calls} calls, .* — \`assay report run.db --run-id all\`$`, "m"))
      assert.match(text, /^ {2}pool llm \(2 resource\(s\), attempts \d+\): tokens in \d+, out \d+; cost \$/m)

      const all = JSON.parse((yield* assay(["report", "run.db", "--run-id", "all", "--json"], { cwd: dir })).stdout) as {
        accounting: { total: Figures; experiment?: Figures }
      }
      assert.strictEqual(all.accounting.total.calls, calls)
      assert.isUndefined(all.accounting.experiment)
      const allText = (yield* assay(["report", "run.db", "--run-id", "all"], { cwd: dir })).stdout
      assert.match(allText, /^Scope: whole experiment \(2 runs\) — one run: `--run-id ID`/m)
    }))
})
