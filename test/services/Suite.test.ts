import { assert, describe, it } from "@effect/vitest"
import { Chunk, Data, Effect, Exit, Layer, Option, Stream } from "effect"
import * as fc from "effect/FastCheck"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type { PipelineRecord } from "../../src/domain/Records.js"
import * as Resource from "../../src/domain/Resource.js"
import * as DomainSuite from "../../src/domain/Suite.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Pools from "../../src/services/Pools.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import * as Suite from "../../src/services/Suite.js"
import { SuiteCatalog } from "../../src/services/SuiteCatalog.js"
import { fakeCatalog, suiteEnv } from "./suiteFixture.js"

/** A member source's own failure (a tagged error, as a source would fail). */
class SourceBroke extends Data.TaggedError("SourceBroke")<{ readonly message: string }> {}

const rid = (s: string) => s as RunId
const echo = Task.sync("echo", (n: number) => n)
const template = Pipeline.make("numbers", echo)
const numbers = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i)
const memberOf = (id: string, n: number, options: Partial<Suite.MemberOptions> = {}) =>
  Suite.member(id, () => template.map(numbers(n)), { definitionDigest: `${id}-v1`, ...options })

const catalogLayer = (suiteId: string) =>
  fakeCatalog(suiteId).pipe(Layer.provideMerge(MemoryStore.layer()))

/** The specs `Suite.pipelines` gives, and the facts recorded per member at the end. */
const collect = (suite: Suite.Suite<any, any, any>, options: Omit<Suite.PipelinesOptions, "runId"> = {}) =>
  Effect.gen(function*() {
    const specs = Chunk.toReadonlyArray(yield* Stream.runCollect(Suite.pipelines(suite, { runId: rid("r1"), ...options })))
    const catalog = yield* SuiteCatalog
    const facts = new Map((yield* catalog.membership(rid("r1"))).map((m) => [m.experimentId, m]))
    return { specs, facts }
  }).pipe(Effect.provide(catalogLayer(suite.id)))

describe("Suite.make", () => {
  it.effect("refuses invalid and case-insensitively equal ids, bad limits and unknown alias targets, by field path", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Suite.make({
        id: "bad id",
        outputRoot: "runs/x",
        pools: [Pool.make("shared")],
        experiments: [
          memberOf("Base", 1),
          memberOf("base", 1),
          memberOf("con", 1),
          memberOf("c", 1, { limit: -1, poolAliases: { apis: "nope" } })
        ]
      }))
      assert.isTrue(Exit.isFailure(exit))
      const error = Option.getOrThrow(Exit.isFailure(exit) ? Option.some(exit.cause) : Option.none())
      const paths = JSON.stringify(error)
      for (const p of ["\"id\"", "experiments[1].id", "experiments[2].id", "experiments[3].limit", "experiments[3].poolAliases.apis"]) {
        assert.include(paths, p)
      }
      for (const bad of [0, -1, 1.5]) {
        const e = yield* Effect.flip(Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 1), memberOf("b", 1, { stopAfterFailures: bad })] }))
        assert.deepStrictEqual(e.issues.map((i) => i.path), ["experiments[1].stopAfterFailures"])
      }
    }))
})

describe("Suite.pipelines", () => {
  it.effect("takes one spec of each member in turn and re-keys them into the suite", () =>
    Effect.gen(function*() {
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "runs/s",
        experiments: [memberOf("a", 4), memberOf("b", 2), memberOf("c", 3)]
      })
      const { facts, specs } = yield* collect(suite)
      assert.deepStrictEqual(specs.map((s) => s.member!.experimentId), ["a", "b", "c", "a", "b", "c", "a", "c", "a"])
      const first = specs[0]!
      const local = template.bind(0)
      assert.strictEqual(first.member!.localKey, local.key)
      assert.strictEqual(first.pipelineId, DomainSuite.memberPipelineId("s", "a", local.key))
      assert.strictEqual(first.key, first.pipelineId)
      // the same seed in two members: two pipelines
      assert.notStrictEqual(specs[1]!.pipelineId, first.pipelineId)
      for (const id of ["a", "b", "c"]) {
        const f = facts.get(id)!
        assert.isTrue(f.selected)
        assert.isTrue(f.sourceExhausted, id)
        assert.isFalse(f.limitReached)
        assert.isNull(f.sourceError)
      }
      assert.deepStrictEqual([facts.get("a")!.admitted, facts.get("b")!.admitted, facts.get("c")!.admitted], [4, 2, 3])
    }))

  it.effect("more than 8 active members: turns of 64 specs, sweeping back and forth; one spec each again at 8", () =>
    Effect.gen(function*() {
      // 9 members: m0..m7 have 130 specs, m8 has 64 (it ends after the first round)
      const ids = Array.from({ length: 9 }, (_, k) => `m${k}`)
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "r",
        experiments: ids.map((id) => memberOf(id, id === "m8" ? 64 : 130))
      })
      const { facts, specs } = yield* collect(suite)
      const order = specs.map((s) => s.member!.experimentId)
      // runs of the same member, as [id, length]
      const runs: Array<[string, number]> = []
      for (const id of order) {
        const last = runs[runs.length - 1]
        if (last !== undefined && last[0] === id) last[1]++
        else runs.push([id, 1])
      }
      const forward = ids.map((id): [string, number] => [id, 64])
      // round 2 (9 active: m8 ends when its source runs dry, at its next pull) sweeps backwards
      const backward = ids.slice(0, 8).reverse().map((id): [string, number] => [id, 64])
      // round 3: 8 active, one spec each (2 left per member); its first (m0) joins m0's wide turn
      backward[7] = ["m0", 65]
      const single = [...ids.slice(1, 8), ...ids.slice(0, 8)].map((id): [string, number] => [id, 1])
      assert.deepStrictEqual(runs, [...forward, ...backward, ...single])
      for (const id of ids) {
        assert.strictEqual(facts.get(id)!.admitted, id === "m8" ? 64 : 130)
        assert.isTrue(facts.get(id)!.sourceExhausted)
      }
      // the total limit counts specs across wide turns too
      const cut = yield* collect(suite, { limit: 100 })
      assert.deepStrictEqual(cut.specs.map((s) => s.member!.experimentId).slice(62, 66), ["m0", "m0", "m1", "m1"])
      assert.strictEqual(cut.specs.length, 100)
    }))

  it.effect("a member's limit and the total limit never claim a source exhausted", () =>
    Effect.gen(function*() {
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "r",
        experiments: [
          memberOf("cut", 5, { limit: 2 }),
          memberOf("exact", 2, { limit: 2 }),
          memberOf("short", 1, { limit: 3 }),
          memberOf("zero", 4, { limit: 0 })
        ]
      })
      const { facts, specs } = yield* collect(suite)
      assert.strictEqual(specs.length, 5)
      const f = (id: string) => facts.get(id)!
      assert.deepStrictEqual([f("cut").admitted, f("cut").limitReached, f("cut").sourceExhausted], [2, true, false])
      assert.deepStrictEqual([f("exact").admitted, f("exact").limitReached, f("exact").sourceExhausted], [2, true, false])
      assert.deepStrictEqual([f("short").admitted, f("short").limitReached, f("short").sourceExhausted], [1, false, true])
      assert.deepStrictEqual([f("zero").admitted, f("zero").limitReached, f("zero").sourceExhausted], [0, true, false])

      const total = yield* collect(
        yield* Suite.make({ id: "t", outputRoot: "r", experiments: [memberOf("a", 5), memberOf("b", 5)] }),
        { limit: 3 }
      )
      assert.deepStrictEqual(total.specs.map((s) => s.member!.experimentId), ["a", "b", "a"])
      for (const id of ["a", "b"]) {
        assert.isTrue(total.facts.get(id)!.limitReached)
        assert.isFalse(total.facts.get(id)!.sourceExhausted)
      }
    }))

  it.effect("selection: only the selected members are streamed; the others are recorded as not selected", () =>
    Effect.gen(function*() {
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 2), memberOf("b", 2)] })
      const { facts, specs } = yield* collect(suite, { experiments: ["B"] })
      assert.deepStrictEqual(specs.map((s) => s.member!.experimentId), ["b", "b"])
      assert.isFalse(facts.get("a")!.selected)
      assert.isTrue(facts.get("b")!.selected)
      const unknown = yield* Effect.exit(collect(suite, { experiments: ["zzz"] }))
      assert.isTrue(Exit.isFailure(unknown))
      assert.include(JSON.stringify(unknown), "--experiment")
    }))

  it.effect("a member's failing source (a failed stream, a throwing iterator, a throwing factory) ends that member only", () =>
    Effect.gen(function*() {
      const failing = Suite.member(
        "failing",
        () => Stream.concat(template.map([100]), Stream.fail(new SourceBroke({ message: "source broke" }))),
        { definitionDigest: "f" }
      )
      const throwing = Suite.member("throwing", () => ({
        *[Symbol.iterator]() {
          yield template.bind(7)
          throw new Error("iterator broke")
        }
      }), { definitionDigest: "t" })
      const factory = Suite.member("factory", (): Iterable<Pipeline.PipelineSpec<number, number>> => {
        throw new Error("factory broke")
      }, { definitionDigest: "x" })
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "r",
        experiments: [failing, throwing, factory, memberOf("ok", 4)]
      })
      const { facts, specs } = yield* collect(suite)
      assert.strictEqual(specs.filter((s) => s.member!.experimentId === "ok").length, 4)
      assert.strictEqual(facts.get("failing")!.admitted, 1)
      assert.include(facts.get("failing")!.sourceError!, "source broke")
      assert.include(facts.get("throwing")!.sourceError!, "iterator broke")
      assert.include(facts.get("factory")!.sourceError!, "factory broke")
      assert.isTrue(facts.get("ok")!.sourceExhausted)
      assert.isFalse(facts.get("failing")!.sourceExhausted)
    }))
})

describe("Suite.run", () => {
  it.effect("runs every member; a source error fails its member and the others finish; facts per member", () =>
    Effect.gen(function*() {
      const broken = Suite.member("broken", () => Stream.fail(new Pipeline.SeedError({ message: "no input file" })), { definitionDigest: "b" })
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 3), broken, memberOf("c", 2, { label: "two\nlines" })] })
      const report = yield* Suite.run(suite)
      assert.strictEqual(report.run.status, "completed")
      assert.strictEqual(report.run.stats.byState.succeeded, 5)
      assert.isTrue(report.sourceFailed)
      const byId = new Map(report.members.map((m) => [m.experimentId, m]))
      assert.include(byId.get("broken")!.sourceError!, "no input file")
      assert.isTrue(byId.get("a")!.sourceExhausted)
      assert.include(report.summary(), "broken: submitted 0")
      assert.include(report.summary(), "source failed: no input file")
      // the suite's line totals its members' lines; one line per member, whatever the label holds
      const lines = report.summary().split("\n")
      const at = lines.indexOf(lines.find((l) => l.startsWith("suite s:"))!)
      const counts = (l: string) => [...l.matchAll(/(submitted|succeeded|failed|interrupted|skipped|pending) (\d+)/g)].map((m) => `${m[1]} ${m[2]}`)
      const sums = new Map<string, number>()
      for (const l of lines.slice(at + 1)) {
        for (const c of counts(l)) sums.set(c.split(" ")[0]!, (sums.get(c.split(" ")[0]!) ?? 0) + Number(c.split(" ")[1]))
      }
      assert.strictEqual(counts(lines[at]!)[0], "submitted 5")
      assert.deepStrictEqual(counts(lines[at]!), [...sums].map(([k, n]) => `${k} ${n}`))
      assert.deepStrictEqual(lines.slice(at + 1).map((l) => l.split(":")[0]), ["  a", "  broken", "  c (two\\nlines)"])
    }).pipe(Effect.provide(suiteEnv("s"))))

  it.effect("a member's own stopAfterFailures ends only its submissions; the others run to their end", () =>
    Effect.gen(function*() {
      const boom = Task.sync("boom", (_: number): number => {
        throw new Error("boom")
      })
      const failing = Suite.member("failing", () => Pipeline.make("boom", boom).map(numbers(40)), {
        definitionDigest: "f",
        stopAfterFailures: 3
      })
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [failing, memberOf("ok", 40)] })
      const report = yield* Suite.run(suite, { concurrency: 1, maxAdmitted: 1 })
      assert.strictEqual(report.run.status, "completed")
      const byId = new Map(report.members.map((m) => [m.experimentId, m]))
      const f = byId.get("failing")!
      assert.isTrue(f.failuresReached)
      assert.isFalse(f.sourceExhausted)
      assert.isAtLeast(f.stats!.byState.failed, 3)
      assert.isBelow(f.admitted, 40)
      assert.isTrue(byId.get("ok")!.sourceExhausted)
      assert.isFalse(byId.get("ok")!.failuresReached)
      assert.strictEqual(byId.get("ok")!.stats!.byState.succeeded, 40)
      assert.include(report.summary(), "stopped by its own stopAfterFailures")
    }).pipe(Effect.provide(suiteEnv("s"))))

  it.effect("a member's own stopAfterFailures: once its N-th failure is decided none of its pipelines starts (at most N + concurrency - 1 fail), the rest stay pending for resume", () =>
    Effect.gen(function*() {
      for (const [budget, concurrency] of [[1, 6], [4, 3], [2, 1]] as const) {
        let started = 0
        // every row fails, after a few yields (attempts overlap, as calls to a server do)
        const bad = Task.make("bad", (n: number) =>
          Effect.gen(function*() {
            started++
            for (let i = 0; i < 1 + (n % 5); i++) yield* Effect.yieldNow()
            return yield* Effect.fail(new SourceBroke({ message: "no" }))
          }))
        const failing = Suite.member("failing", () => Pipeline.make("bad", bad).map(numbers(200)), {
          definitionDigest: "f",
          stopAfterFailures: budget
        })
        const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [failing, memberOf("ok", 30)] })
        const report = yield* Suite.run(suite, { concurrency }).pipe(Effect.provide(suiteEnv("s")))
        const at = `budget ${budget}, concurrency ${concurrency}`
        assert.strictEqual(report.run.status, "completed", at)
        const byId = new Map(report.members.map((m) => [m.experimentId, m]))
        const f = byId.get("failing")!
        assert.isTrue(f.failuresReached, at)
        const failed = f.stats!.byState.failed ?? 0
        assert.isAtLeast(failed, budget, at)
        assert.isAtMost(failed, budget + concurrency - 1, at)
        assert.isAtMost(started, budget + concurrency - 1, at)
        // what it submitted and did not start is pending (never failed, never run): a resume runs it
        assert.strictEqual(f.stats!.byState.interrupted ?? 0, 0, at)
        assert.isAtLeast(f.stats!.byState.pending ?? 0, 1, at)
        assert.strictEqual(byId.get("ok")!.stats!.byState.succeeded, 30, at)
        assert.include(report.summary(), "stopped by its own stopAfterFailures", at)
      }
    }))

  it.effect("a store failure (the catalog) stops the suite with StoreUnavailable", () =>
    Effect.gen(function*() {
      // 2 calls at the start (a, b selected), then a member's end fails
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 1), memberOf("b", 50)] })
      const exit = yield* Effect.exit(Suite.run(suite))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(JSON.stringify(exit), "the catalog is gone")
    }).pipe(Effect.provide(suiteEnv("s", [], {}, 2))))

  it.effect("a changed definition under a known member id is refused before anything runs", () =>
    Effect.gen(function*() {
      const v1 = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 1)] })
      yield* Suite.run(v1)
      const v2 = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 1, { definitionDigest: "a-v2" })] })
      const exit = yield* Effect.exit(Suite.run(v2))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(JSON.stringify(exit), "experiments.a")
      const other = yield* Effect.exit(Suite.run(yield* Suite.make({ id: "other", outputRoot: "r", experiments: [memberOf("a", 1)] })))
      assert.include(JSON.stringify(other), "suite.id")
    }).pipe(Effect.provide(suiteEnv("s"))))

  it.effect("ctx and the completion record carry the suite, the member, the local key and the repeat", () =>
    Effect.gen(function*() {
      const probe = Task.sync("probe", (n: number, ctx) => ({
        n,
        suiteId: ctx.suiteId,
        experimentId: ctx.experimentId,
        localKey: ctx.localKey,
        outputDir: ctx.outputDir
      }))
      const t = Pipeline.make("probe", probe)
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "r",
        experiments: [Suite.member("m", () => t.map([5], { repeats: 2 }), { definitionDigest: "m" })]
      })
      const finished: Array<{ record: PipelineRecord; output: any }> = []
      yield* Suite.run(suite, {
        onPipelineFinished: (record, output) => Effect.sync(() => finished.push({ record, output: Option.getOrNull(output) }))
      })
      assert.strictEqual(finished.length, 2)
      const repeats = finished.map((f) => f.record.repeat).sort()
      assert.deepStrictEqual(repeats, [0, 1])
      for (const { output, record } of finished) {
        const local = t.bind(5, { repeat: record.repeat! })
        assert.strictEqual(record.suiteId, "s")
        assert.strictEqual(record.experimentId, "m")
        assert.strictEqual(record.localKey, local.key)
        assert.strictEqual(record.pipelineId, DomainSuite.memberPipelineId("s", "m", local.key))
        assert.deepStrictEqual(output, { n: 5, suiteId: "s", experimentId: "m", localKey: local.key, outputDir: "/suite-root" })
      }
      // outside a suite, the fields are null
      const plain = yield* Runner.run(t.map([1]), {
        onPipelineFinished: (record, output) => Effect.sync(() => finished.push({ record, output: Option.getOrNull(output) }))
      })
      assert.strictEqual(plain.stats.byState.succeeded, 1)
      const last = finished[finished.length - 1]!
      assert.isNull(last.record.suiteId)
      assert.deepStrictEqual(last.output, { n: 1, suiteId: null, experimentId: null, localKey: null, outputDir: null })
    }).pipe(Effect.provide(suiteEnv("s"))))

  it.effect("runner.reportMetric(…, { experiment }) is stored in the member's scope", () =>
    Effect.scoped(Effect.gen(function*() {
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [memberOf("a", 1)] })
      const handle = yield* Suite.start(suite)
      const report = yield* handle.awaitSuite
      yield* handle.reportMetric("accuracy", 0.75, { experiment: "a", display: "percent" })
      const bad = yield* Effect.exit(handle.reportMetric("accuracy", 1, { experiment: "not valid" }))
      assert.isTrue(Exit.isFailure(bad))
      const store = yield* Store
      const metrics = yield* store.metrics({ runId: report.run.runId, pipelineId: null })
      const m = metrics.find((x) => x.name === Suite.memberMetricName("a", "accuracy"))!
      assert.strictEqual(m.value, 0.75)
      assert.deepStrictEqual(Suite.parseMemberMetric(m.name), { experimentId: "a", name: "accuracy" })
      assert.isUndefined(Suite.parseMemberMetric("accuracy"))
    })).pipe(Effect.provide(suiteEnv("s"))))
})

// ---- pools ------------------------------------------------------------------------------------

/** A task that leases from its declared pool "apis" and records how many leases of each actual pool are held at once. */
const leasing = (peak: Map<string, number>, now: Map<string, number>) =>
  Task.make("call", { resource: "apis" }, (n: number, ctx) =>
    Effect.gen(function*() {
      const lease = yield* ctx.acquire()
      const held = (now.get(lease.pool) ?? 0) + 1
      now.set(lease.pool, held)
      peak.set(lease.pool, Math.max(peak.get(lease.pool) ?? 0, held))
      yield* Effect.yieldNow()
      yield* Effect.yieldNow()
      now.set(lease.pool, (now.get(lease.pool) ?? 1) - 1)
      return n
    }))

describe("suite pools", () => {
  it.effect("bound members share one pool instance (capacity and leases); unbound same-named pools stay independent", () =>
    Effect.gen(function*() {
      const peak = new Map<string, number>()
      const now = new Map<string, number>()
      const t = Pipeline.make("calls", leasing(peak, now))
      const m = (id: string, aliases: Record<string, string>) =>
        Suite.member(id, () => t.map(numbers(6)), { definitionDigest: id, poolAliases: aliases })
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "r",
        experiments: [
          m("a", { apis: "shared" }),
          m("b", { apis: "shared" }),
          m("c", { apis: "experiment:c:apis" }),
          m("d", { apis: "experiment:d:apis" })
        ]
      })
      const report = yield* Suite.run(suite)
      assert.strictEqual(report.run.stats.byState.succeeded, 24)
      const pools = yield* Pools.Pools
      assert.strictEqual((yield* pools.stats("shared")).leasesTotal, 12)
      assert.strictEqual((yield* pools.stats("experiment:c:apis")).leasesTotal, 6)
      assert.strictEqual((yield* pools.stats("experiment:d:apis")).leasesTotal, 6)
      assert.strictEqual((yield* pools.stats("apis")).leasesTotal, 0, "no implicit merging by name")
      // both slots of the shared key were used at once, never more
      assert.strictEqual(peak.get("shared"), 2)
      assert.strictEqual(peak.get("experiment:c:apis"), 1)
    }).pipe(Effect.provide(suiteEnv("s", [
      Pool.make("shared", [Resource.make("api", { id: "k1", capacity: 2 })]),
      Pool.make("apis", [Resource.make("api", { id: "plain", capacity: 1 })]),
      Pool.make("experiment:c:apis", [Resource.make("api", { id: "c1", capacity: 1 })]),
      Pool.make("experiment:d:apis", [Resource.make("api", { id: "d1", capacity: 1 })])
    ], { concurrency: 8 }))))

  it.effect("Pools.aliased: publish, revoke, snapshot, stats and events under the local name reach the actual pool", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pools.makePools([Pool.make("shared", [Resource.make("api", { id: "k1" })])])
      const view = Pools.aliased(pools, { apis: "shared" })
      const events = yield* view.events({ pool: "apis" })
      yield* view.add("apis", { id: "k2" })
      assert.deepStrictEqual((yield* pools.snapshot("shared")).map((r) => r.id), ["k1", "k2"])
      assert.deepStrictEqual((yield* view.snapshot("apis")).map((r) => r.id), ["k1", "k2"])
      const added = yield* events.take
      assert.strictEqual(added.kind, "resource.added")
      assert.strictEqual(added.pool, "apis")
      assert.isTrue(yield* view.revoke("apis", "k2"))
      assert.strictEqual((yield* view.stats("apis")).pool, "apis")
      assert.strictEqual((yield* view.get("apis")).name, "apis")
      const lease = yield* view.acquire(undefined, { taskName: "t", pipelineId: "p", defaultPool: "apis" })
      assert.strictEqual(lease.pool, "shared")
      assert.strictEqual((yield* pools.stats("shared")).active, 1)
      const none = yield* Effect.either(Pools.aliased(pools, {}).snapshot("shared"))
      assert.isTrue(none._tag === "Left" && none.left._tag === "PoolNotFound", "no alias: no pool")
    })))

  it.effect("Pools.aliased is closed: unbound, other members' and actual names fail like an unknown pool, listing the local names", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pools.makePools([
        Pool.make("shared", [Resource.make("api", { id: "k1" })]),
        Pool.make("free", [Resource.make("api", { id: "f1" })]),
        Pool.make("experiment:b:gpu", [Resource.make("api", { id: "g1" })]),
        Pool.make("experiment:a:gpu", [Resource.make("api", { id: "a1" })])
      ])
      const view = Pools.aliased(pools, { apis: "shared", gpu: "experiment:a:gpu" })
      const holder = { taskName: "t", pipelineId: "p" }
      const refused = <A, E>(e: Effect.Effect<A, E, any>, name: string) =>
        Effect.gen(function*() {
          const r = yield* Effect.either(Effect.scoped(e as Effect.Effect<A, E>))
          assert.isTrue(r._tag === "Left", `${name} must be refused`)
          const err = (r as any).left
          assert.strictEqual(err._tag, "PoolNotFound", name)
          assert.strictEqual(err.pool, name)
          assert.deepStrictEqual(err.known, ["apis", "gpu"])
          assert.include(err.message, "known pools: apis, gpu")
        })
      for (const name of ["shared", "free", "experiment:b:gpu", "experiment:a:gpu", "nope"]) {
        yield* refused(view.acquire(name, holder), name)
        yield* refused(view.acquireRaw({ pool: name }, holder), name)
        yield* refused(view.acquire(undefined, { ...holder, defaultPool: name }), name)
        yield* refused(view.add(name, { id: "x" }), name)
        yield* refused(view.revoke(name, "k1"), name)
        yield* refused(view.snapshot(name), name)
        yield* refused(view.stats(name), name)
        yield* refused(view.get(name), name)
      }
      // two local pools: an acquire naming none has no default
      yield* refused(view.acquire(undefined, holder), "(none given)")
      assert.deepStrictEqual(yield* view.names, ["apis", "gpu"])
      // nothing was added to, or revoked from, a pool the view does not reach
      assert.deepStrictEqual((yield* pools.snapshot("free")).map((r) => [r.id, r.state]), [["f1", "ready"]])
      // the local names still work, an identity binding included
      const same = Pools.aliased(pools, { shared: "shared" })
      assert.strictEqual((yield* Effect.scoped(same.acquire("shared", holder))).pool, "shared")
      yield* refused(Pools.aliased(pools, { apis: "shared", gpu: "experiment:a:gpu" }).acquire("free", holder), "free")
      // a member with one local pool gets it when the call names none
      assert.strictEqual((yield* Effect.scoped(Pools.aliased(pools, { apis: "shared" }).acquire(undefined, holder))).pool, "shared")
      // events: only the view's pools, under local names; a filter on a foreign name gets nothing
      const all = yield* view.events()
      const foreign = yield* view.events({ pool: "free" })
      yield* pools.add("free", { id: "f2" })
      yield* pools.add("experiment:b:gpu", { id: "g2" })
      yield* pools.add("shared", { id: "k2" })
      const first = yield* all.take
      assert.strictEqual(first.pool, "apis")
      assert.strictEqual(yield* all.size, 0)
      assert.strictEqual(yield* foreign.size, 0)
    })))

  it.effect("a member's task reaches only its own local names (ctx.acquire, resource, publish, revoke)", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const probe = Task.make("probe", (n: number, ctx) =>
        Effect.gen(function*() {
          for (const name of ["shared", "experiment:b:gpu", "free"]) {
            const r = yield* Effect.either(Effect.scoped(ctx.acquire(name)))
            seen.push(`${ctx.experimentId}:${name}:${r._tag === "Left" ? r.left._tag : r.right.pool}`)
            const p = yield* Effect.either(ctx.publishResource(name, { id: `x${n}` }))
            seen.push(`${ctx.experimentId}:publish:${name}:${p._tag}`)
          }
          const own = yield* Effect.scoped(ctx.acquire("gpu"))
          seen.push(`${ctx.experimentId}:gpu:${own.pool}`)
          return n
        }))
      const undeclared = Task.make("undeclared", { resource: "free" }, (n: number, ctx) =>
        Effect.map(Effect.scoped(ctx.acquire()), () => n))
      const suite = yield* Suite.make({
        id: "s",
        outputRoot: "r",
        experiments: [
          Suite.member("a", () => Pipeline.make("probe", probe).map([1]), {
            definitionDigest: "a",
            poolAliases: { gpu: "experiment:a:gpu" }
          }),
          Suite.member("c", () => Pipeline.make("undeclared", undeclared).map([1]), {
            definitionDigest: "c",
            poolAliases: { gpu: "experiment:c:gpu" }
          })
        ]
      })
      const report = yield* Suite.run(suite)
      assert.deepStrictEqual(seen, [
        "a:shared:PoolNotFound",
        "a:publish:shared:Left",
        "a:experiment:b:gpu:PoolNotFound",
        "a:publish:experiment:b:gpu:Left",
        "a:free:PoolNotFound",
        "a:publish:free:Left",
        "a:gpu:experiment:a:gpu"
      ])
      assert.strictEqual(report.run.stats.byState.succeeded, 1)
      assert.strictEqual(report.run.stats.byState.failed, 1, "a task resource the member does not declare is no pool")
      const pools = yield* Pools.Pools
      assert.strictEqual((yield* pools.stats("free")).leasesTotal, 0)
      assert.strictEqual((yield* pools.stats("experiment:b:gpu")).leasesTotal, 0)
    }).pipe(Effect.provide(suiteEnv("s", [
      Pool.make("shared", [Resource.make("api", { id: "k1" })]),
      Pool.make("free", [Resource.make("api", { id: "f1" })]),
      Pool.make("experiment:a:gpu", [Resource.make("api", { id: "a1" })]),
      Pool.make("experiment:b:gpu", [Resource.make("api", { id: "b1" })]),
      Pool.make("experiment:c:gpu", [Resource.make("api", { id: "c1" })])
    ], { concurrency: 2 }))))

  it.effect("two members bound to one pool share its health: failures reported through one view degrade it for the other", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pools.makePools([
        Pool.make("shared", [Resource.make("api", { id: "k1", degradeAfter: 2 })]),
        Pool.make("experiment:b:apis", [Resource.make("api", { id: "own", degradeAfter: 2 })])
      ])
      const a = Pools.aliased(pools, { apis: "shared" })
      const b = Pools.aliased(pools, { apis: "shared" })
      const c = Pools.aliased(pools, { apis: "experiment:b:apis" })
      for (let i = 0; i < 2; i++) {
        const lease = yield* a.acquireRaw("apis")
        yield* lease.report({ ok: false, error: "boom" })
        yield* lease.releaseNow
      }
      assert.strictEqual((yield* b.snapshot("apis"))[0]!.state, "degraded")
      assert.strictEqual((yield* c.snapshot("apis"))[0]!.state, "ready", "a private pool of the same local name is another instance")
    })))

  it.effect.prop(
    "a shared pool's capacity is never exceeded across members",
    {
      capacity: fc.integer({ min: 1, max: 3 }),
      sizes: fc.array(fc.integer({ min: 0, max: 6 }), { minLength: 2, maxLength: 4 }),
      concurrency: fc.integer({ min: 1, max: 8 })
    },
    ({ capacity, concurrency, sizes }) =>
      Effect.gen(function*() {
        const peak = new Map<string, number>()
        const now = new Map<string, number>()
        const t = Pipeline.make("calls", leasing(peak, now))
        const suite = yield* Suite.make({
          id: "p",
          outputRoot: "r",
          experiments: sizes.map((n, i) =>
            Suite.member(`m${i}`, () => t.map(numbers(n)), { definitionDigest: `m${i}`, poolAliases: { apis: "shared" } })
          )
        })
        const report = yield* Suite.run(suite)
        const total = sizes.reduce((a, b) => a + b, 0)
        assert.strictEqual(report.run.stats.byState.succeeded ?? 0, total)
        assert.isAtMost(peak.get("shared") ?? 0, capacity)
        const pools = yield* Pools.Pools
        assert.strictEqual((yield* pools.stats("shared")).leasesTotal, total)
      }).pipe(Effect.provide(suiteEnv("p", [Pool.make("shared", [Resource.make("api", { id: "k", capacity })])], {
        concurrency
      }))),
    { fastCheck: { numRuns: 25, endOnFailure: true } }
  )
})
