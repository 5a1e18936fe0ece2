/**
 * Suites on the cluster engine, below the command line (issue 17 §3):
 *
 * - the suite catalog in a Postgres store (`layers/internal/pg/suites.ts`, rows of
 *   `assay_meta`): a member registered with one definition and given again with another is
 *   refused with the suite store's own message (the changed parts named, `experiments.ID`),
 *   nothing written; a run's member facts merge field by field, with the outcome counts the
 *   submitter adds; `summaries` (what `assay report URL` shows) lists the suite's members with
 *   their latest run;
 * - a runner's task of a member pipeline sees the pools under the member's own names
 *   (`cluster/member.ts`): the member's `apis` is the suite's pool it is bound to, and a name
 *   outside its aliases is not reachable;
 * - one member's view of the store (`PgStore.layerReadOnlyMember`: `export`, `watch`, `serve
 *   URL --experiment ID`): its pipelines and their events alone, found by an id in any case;
 *   a member no suite has, or several suites have, refused naming `--experiment`.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Layer, Option, Redacted, Stream } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import { memberDigest, tagSpec } from "../../src/domain/Suite.js"
import * as Task from "../../src/domain/Task.js"
import * as PgSuites from "../../src/layers/internal/pg/suites.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { memberSharedOf } from "../../src/services/internal/cluster/member.js"
import type { AttemptShared } from "../../src/services/internal/runner/attemptContext.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import { assay } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()

const catalogOn = (sql: SqlClient.SqlClient) =>
  PgSuites.make(sql, { suiteId: "cmp", root: "/out/cmp", layout: "byExperiment", outputDirOf: (id) => `/out/cmp/experiments/${id}` })

const registration = (id: string, digest: string, tasks: string) => ({
  experimentId: id,
  definitionDigest: digest,
  definitionParts: { tasks, source: "s1" },
  label: null,
  limit: null
})

describe("the suite catalog of a Postgres store", () => {
  it.live("a changed member definition is refused, nothing written; a run's facts merge; summaries list the members", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("suites"))
      const url = pg.url("suites")
      yield* PgStore.migrate(url)
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const catalog = catalogOn(sql)
        yield* catalog.registerMembers([registration("a", "d-a", "t1"), registration("b", "d-b", "t1")], 1_000)
        // the same definitions again: accepted
        yield* catalog.registerMembers([registration("a", "d-a", "t1"), registration("b", "d-b", "t1")], 2_000)
        const refused = yield* Effect.flip(catalog.registerMembers([registration("b", "d-b2", "t2")], 3_000))
        assert.strictEqual(refused._tag, "ConfigError")
        assert.include(refused.message, `the definition of member "b" changed: its pipeline definition`)
        // the cluster's suite lives in its database: no output root to change (tester17ad F8)
        assert.include(refused.message, "use a new member id or another database (--database)")
        assert.notInclude(refused.message, "output root")
        assert.deepStrictEqual(refused._tag === "ConfigError" ? refused.issues.map((i) => i.path) : [], ["experiments.b"])
        // a member id differing only in case is refused as on a suite root
        const cased = yield* Effect.exit(catalog.registerMembers([registration("A", "d-a", "t1")], 3_000))
        assert.isTrue(Exit.isFailure(cased))
        const members = yield* catalog.members
        assert.deepStrictEqual(members.map((m) => [m.experimentId, m.definitionDigest, m.createdAt]), [["a", "d-a", 1_000], ["b", "d-b", 1_000]])

        const run = "r1" as RunId
        yield* catalog.recordMembership(run, "a", { selected: true, admitted: 0 }, 10)
        yield* catalog.recordMembership(run, "b", { selected: false }, 10)
        yield* catalog.recordMembership(run, "a", { admitted: 4, sourceExhausted: true }, 20)
        yield* catalog.recordOutcome(run, "a", { succeeded: 3, failed: 1, skipped: 0 }, 30)
        const facts = yield* catalog.runMembership(run)
        assert.deepStrictEqual(
          facts.map((f) => [f.experimentId, f.selected, f.admitted, f.sourceExhausted, f.succeeded, f.failed, f.updatedAt]),
          [["a", true, 4, true, 3, 1, 30], ["b", false, 0, false, null, null, 10]]
        )
        // another suite's rows in the same store are not this one's
        yield* PgSuites.make(sql, { suiteId: "other", root: "/o", layout: "combined", outputDirOf: () => "/o" })
          .registerMembers([registration("a", "zzz", "t9")], 5)
        assert.strictEqual((yield* catalog.members).length, 2)

        const suites = yield* PgSuites.summaries(sql)
        const cmp = suites.find((s) => s.suiteId === "cmp")!
        assert.strictEqual(cmp.latestRunId, "r1")
        assert.deepStrictEqual(cmp.members.map((m) => [m.experimentId, m.latest?.admitted ?? null]), [["a", 4], ["b", 0]])
        const text = PgSuites.renderSummaries(suites)
        assert.include(text, "suite cmp (every run's pipelines by member; latest run r1):")
        assert.include(text, "  a: no pipelines · latest run: submitted 4 · succeeded 3 · failed 1 · already done 0")
        assert.include(text, "  b: no pipelines · latest run: not selected")
      }).pipe(Effect.scoped, Effect.provide(PgClient.layer({ url: Redacted.make(url) })))
    }), 120_000)
})

describe("a member's pools on a runner", () => {
  it.effect("the member's local pool names reach the suite's pools it is bound to, and nothing else", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pool.makePools([
        Pool.make("shared", [Resource.make("worker", { id: "s", capacity: 1 })]),
        Pool.make("experiment:b:apis", [Resource.make("worker", { id: "p", capacity: 1 })])
      ])
      const shared = { pools } as unknown as AttemptShared
      const of = memberSharedOf(shared)
      const membership = (experimentId: string, poolAliases: Record<string, string>) => ({
        suiteId: "cmp",
        experimentId,
        localKey: "k",
        poolAliases,
        outputDir: "/out"
      })
      const a = of(membership("a", { apis: "shared" }))
      const b = of(membership("b", { apis: "experiment:b:apis" }))
      assert.strictEqual(of(membership("a", { apis: "shared" })), a, "made once per member")
      assert.strictEqual((yield* a.pools.acquire("apis")).pool, "shared")
      assert.strictEqual((yield* b.pools.acquire("apis")).pool, "experiment:b:apis")
      // another member's private pool is not reachable under its actual name
      assert.isTrue(Exit.isFailure(yield* Effect.exit(a.pools.acquire("experiment:b:apis"))))
    })))
})

describe("a suite member's view of a Postgres store (export, watch, serve --experiment ID)", () => {
  it.live("shows the member's pipelines and their events alone; an unknown or ambiguous member is refused", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("members"))
      const url = pg.url("members")
      yield* PgStore.migrate(url)
      const run = "r1" as RunId
      const echo = Task.sync("echo", (n: number) => n)
      // two members' pipelines (keyed into the suite) and one pipeline of no suite
      const specsOf = (experimentId: string, n: number) =>
        Array.from({ length: n }, (_, i) =>
          tagSpec(Pipeline.make("p", echo).bind(i), { suiteId: "cmp", experimentId, poolAliases: {}, outputDir: "/out" }))
      const specs = [...specsOf("a", 3), ...specsOf("b", 2), Pipeline.make("p", echo).bind(9)]
      yield* Effect.gen(function*() {
        const store = yield* Store
        yield* store.openRun({ runId: run, label: null, config: {}, startedAt: 1 })
        yield* store.admit(specs.map((s) => Rows.admissionRow(s, 0, undefined, run, 2)), specs.map((s) => Rows.seedArtifact(s, run, 2)))
        for (const s of specs) yield* store.emitEvent({ kind: "pipeline.note", pipelineId: s.pipelineId, runId: run, data: null, ts: 3 })
        yield* store.emitEvent({ kind: "run.note", pipelineId: null, runId: run, data: null, ts: 3 })
        yield* store.flush
        const sql = yield* SqlClient.SqlClient
        yield* catalogOn(sql).registerMembers([registration("a", "d-a", "t1"), registration("b", "d-b", "t1")], 1)
      }).pipe(
        Effect.provide(Layer.merge(PgStore.layer({ url }), PgClient.layer({ url: Redacted.make(url) }))),
        Effect.scoped
      )
      const ids = (n: ReadonlyArray<{ readonly pipelineId: string | null }>) => n.map((r) => r.pipelineId).sort()
      const aIds = specs.slice(0, 3).map((s) => s.pipelineId as string).sort()
      yield* Effect.gen(function*() {
        const store = yield* Store
        assert.deepStrictEqual(ids(Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamPipelines()))), aIds)
        assert.deepStrictEqual(ids((yield* store.pipelinesPage({ limit: 10 })).pipelines), aIds)
        assert.strictEqual((yield* store.stats()).pipelines, 3)
        assert.deepStrictEqual(ids(Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamEvents()))), aIds)
        assert.strictEqual((yield* store.getPipelines(specs.map((s) => s.pipelineId))).size, 3)
        assert.isTrue(Option.isSome(yield* store.getRun(run)), "the runs are the store's")
      }).pipe(Effect.provide(PgStore.layerReadOnlyMember(url, "A")), Effect.scoped)
      // the whole store, for comparison
      const all = yield* Effect.map(Store, (s) => s.stats()).pipe(Effect.flatten, Effect.provide(PgStore.layerReadOnly(url)), Effect.scoped)
      assert.strictEqual(all.pipelines, 6)
      // `assay report URL --experiment ID` too: the member's pipelines and suite line alone;
      // an unknown member refused (exit 2), never the whole store's report (tester17ad F3)
      const report = yield* assay(["report", url, "--experiment", "A", "--json"])
      assert.strictEqual(report.code, 0, report.stderr)
      const data = JSON.parse(report.stdout) as { pipelines: number; suites?: Array<{ members: Array<{ experimentId: string }> }> }
      assert.strictEqual(data.pipelines, 3)
      assert.deepStrictEqual(data.suites?.flatMap((x) => x.members.map((m) => m.experimentId)), ["a"])
      const text = yield* assay(["report", url, "--experiment", "b"])
      assert.strictEqual(text.code, 0, text.stderr)
      assert.include(text.stdout, "[member b]")
      assert.notMatch(text.stdout, /\n {2}a: /)
      const nobody = yield* assay(["report", url, "--experiment", "nobody"])
      assert.strictEqual(nobody.code, 2, nobody.stderr)
      assert.include(nobody.stderr, `no suite member "nobody"`)
      const unknown = yield* Effect.flip(PgStore.memberOf(url, "c"))
      assert.strictEqual(unknown._tag, "ConfigError")
      assert.include(unknown.message, `no suite member "c" (members: cmp/a, cmp/b)`)
      // a member id two suites share: which suite is meant is not guessed
      yield* Effect.gen(function*() {
        yield* PgSuites.make(yield* SqlClient.SqlClient, { suiteId: "other", root: "/o", layout: "combined", outputDirOf: () => "/o" })
          .registerMembers([registration("a", "zzz", "t9")], 5)
      }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped)
      const ambiguous = yield* Effect.flip(PgStore.memberOf(url, "a"))
      assert.include(ambiguous.message, `member "a" is in several suites`)
      assert.include(ambiguous.message, "name it as SUITE/ID (cmp/a, other/a)")
      // ... and `SUITE/ID`, the spelling the refusals list, picks one (tester17af F9)
      const other = yield* PgStore.memberOf(url, "other/a")
      assert.deepStrictEqual([other.suiteId, other.experimentId], ["other", "a"])
      const cased = yield* PgStore.memberOf(url, "CMP/A")
      assert.deepStrictEqual([cased.suiteId, cased.experimentId, cased.prefix], ["cmp", "a", `${memberDigest("cmp", "a")}-`])
      const picked = yield* assay(["report", url, "--experiment", "cmp/a", "--json"])
      assert.strictEqual(picked.code, 0, picked.stderr)
      const pickedData = JSON.parse(picked.stdout) as { pipelines: number; suites?: Array<{ suiteId: string; members: Array<{ experimentId: string }> }> }
      assert.strictEqual(pickedData.pipelines, 3)
      assert.deepStrictEqual(pickedData.suites?.map((x) => [x.suiteId, x.members.map((m) => m.experimentId)]), [["cmp", ["a"]]])
    }), 120_000)
})
