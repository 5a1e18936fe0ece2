/**
 * Issue 17 §3: the cluster engine in one process (`TestRunner`: sharding and message storage
 * in memory) over the memory store: one workflow per window of pipelines, admission in windows, every pipeline terminal with each checkpoint written once, retries and failures
 * recorded as the runner records them, control pipelines refused on a store without traversal state.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as TestRunner from "@effect/cluster/TestRunner"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Option, Schedule, Stream } from "effect"
import { FatalError, RetryableError, StoreUnavailable } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type { PipelineRecord } from "../../src/domain/Records.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import { defaultWindow } from "../../src/services/internal/cluster/submit.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import type { PoolsService } from "../../src/services/Pools.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import * as Resource from "../../src/domain/Resource.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * A runner host in this process over the memory store, for the given specs (with `pools`, and
 * the store as `wrap` changes it).
 */
const hostOf = (
  specs: ReadonlyArray<AnySpec>,
  pools: ReadonlyArray<Pool.PoolConfig> = [],
  wrap: (s: StoreService) => StoreService = (s) => s,
  wrapPools: (p: PoolsService) => PoolsService = (p) => p
) => {
  const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
  const store = Layer.effect(Store, Effect.map(Store, wrap)).pipe(Layer.provide(MemoryStore.layer()))
  const poolsLayer = Layer.effect(Pool.Pools, Effect.map(Pool.Pools, wrapPools)).pipe(Layer.provide(Pool.layer(pools)))
  const services = Layer.mergeAll(store, poolsLayer, NodeContext.layer)
  return ClusterEngine.workflowLayer({ concurrency: 8, resourcesEvery: "50 millis" }).pipe(
    Layer.provideMerge(engine),
    Layer.provideMerge(services),
    Layer.provide(ClusterEngine.catalogLayer(specs))
  )
}

describe("ClusterEngine (in process)", () => {
  it.live("runs every pipeline to its end in windows; each task runs and checkpoints once", () => {
    const calls = new Map<string, number>()
    const count = (name: string) => (n: number, ctx: { readonly pipelineId: string }) => {
      const k = `${ctx.pipelineId}/${name}`
      calls.set(k, (calls.get(k) ?? 0) + 1)
      return Effect.succeed(n + 1)
    }
    const template = Pipeline.make("three", Task.make("a", count("a")), Task.make("b", count("b")), Task.make("c", count("c")))
    const specs = Array.from({ length: 24 }, (_, i) => template.bind(i))
    let peak = 0
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), {
        maxAdmitted: 5,
        pollInterval: "20 millis",
        onProgress: (p) => Effect.sync(() => peak = Math.max(peak, p.running))
      })
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.admitted, 24)
      assert.strictEqual(report.succeeded, 24)
      assert.isAtMost(peak, 5)
      const store = yield* Store
      for (const spec of specs) {
        const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
        assert.strictEqual(row.state, "succeeded")
        assert.strictEqual(row.nTasksDone, 3)
        assert.strictEqual(row.runId, report.runId)
        const artifacts = yield* store.listArtifacts(spec.pipelineId)
        assert.deepStrictEqual(artifacts.map((a) => a.seq), [-1, 0, 1, 2])
        const final = Option.getOrThrow(yield* store.getArtifact(spec.pipelineId, 2))
        assert.strictEqual(new TextDecoder().decode(final.payload!), JSON.stringify((spec.seed as number) + 3))
        for (const t of ["a", "b", "c"]) assert.strictEqual(calls.get(`${spec.pipelineId}/${t}`), 1)
      }
      const run = Option.getOrThrow(yield* store.getRun(report.runId))
      assert.strictEqual(run.status, "completed")
      // submitting again starts nothing: every pipeline is already done
      const again = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis" })
      assert.strictEqual(again.skipped, 24)
      assert.strictEqual(again.admitted, 0)
      assert.strictEqual(Array.from(calls.values()).reduce((a, b) => a + b, 0), 72)
    }).pipe(Effect.provide(hostOf(specs)))
  })

  it.live("one workflow per window: 10 pipelines in windows of 4 are three workflows (4, 4, 2), each with its pipelines' verdicts in order", () => {
    const picky = Task.make("picky", (n: number) => n === 5 ? Effect.fail(new FatalError({ message: "five" })) : Effect.succeed(n))
    const template = Pipeline.make("windowed", picky)
    const specs = Array.from({ length: 10 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 8, window: 4, pollInterval: "20 millis" })
      assert.strictEqual(report.admitted, 10)
      assert.strictEqual(report.succeeded, 9)
      assert.strictEqual(report.failed, 1)
      const storeId = yield* Effect.flatMap(Store, (s) => s.storeId ?? Effect.succeed(undefined))
      const windowOf = (part: ReadonlyArray<AnySpec>) =>
        Effect.flatMap(
          ClusterEngine.WindowWorkflow.executionId({
            pipelineIds: part.map((s) => s.pipelineId),
            specDigests: part.map((s) => s.specDigest),
            storeId
          }),
          (id) =>
            ClusterEngine.WindowWorkflow.poll(id).pipe(
              Effect.filterOrFail((r) => r !== undefined, () => "not ended yet"),
              Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 200 })
            )
        )
      const verdicts: Array<string> = []
      for (const part of [specs.slice(0, 4), specs.slice(4, 8), specs.slice(8)]) {
        const result = yield* windowOf(part)
        assert.strictEqual(result?._tag, "Complete")
        if (result?._tag === "Complete" && result.exit._tag === "Success") verdicts.push(...result.exit.value.verdicts)
      }
      assert.deepStrictEqual(verdicts, ["succeeded", "succeeded", "succeeded", "succeeded", "succeeded", "failed", "succeeded", "succeeded", "succeeded", "succeeded"])
      // no workflow of one pipeline was started
      const single = yield* ClusterEngine.PipelineWorkflow.executionId({ pipelineId: specs[0]!.pipelineId, specDigest: specs[0]!.specDigest, storeId })
      assert.isUndefined(yield* ClusterEngine.PipelineWorkflow.poll(single))
    }).pipe(Effect.provide(hostOf(specs)))
  })

  it.live("the default window leaves room for four windows at once: 12 pipelines with --max-admitted 8 are six workflows of 2 (not one window of 8 at a time, which one runner would run alone)", () => {
    const template = Pipeline.make("spread", Task.make("t", (n: number) => Effect.succeed(n)))
    const specs = Array.from({ length: 12 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 8, pollInterval: "20 millis" })
      assert.strictEqual(report.succeeded, 12)
      const storeId = yield* Effect.flatMap(Store, (s) => s.storeId ?? Effect.succeed(undefined))
      const started = (part: ReadonlyArray<AnySpec>) =>
        Effect.flatMap(
          ClusterEngine.WindowWorkflow.executionId({ pipelineIds: part.map((s) => s.pipelineId), specDigests: part.map((s) => s.specDigest), storeId }),
          (id) =>
            ClusterEngine.WindowWorkflow.poll(id).pipe(
              Effect.filterOrFail((r) => r !== undefined, () => "not ended yet"),
              Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 200 }),
              Effect.option
            )
        )
      for (let i = 0; i < 12; i += 2) assert.isTrue(Option.isSome(yield* started(specs.slice(i, i + 2))), `window ${i / 2}`)
      assert.isTrue(Option.isNone(yield* Effect.flatMap(
        ClusterEngine.WindowWorkflow.executionId({ pipelineIds: specs.slice(0, 8).map((s) => s.pipelineId), specDigests: specs.slice(0, 8).map((s) => s.specDigest), storeId }),
        (id) => Effect.map(ClusterEngine.WindowWorkflow.poll(id), Option.fromNullable)
      )), "no window of 8")
      assert.deepStrictEqual([defaultWindow(256), defaultWindow(40), defaultWindow(3)], [64, 10, 1])
    }).pipe(Effect.provide(hostOf(specs)))
  })

  it.live("retries by the task's policy and fails a pipeline on a declined failure, with the attempts recorded", () => {
    const flaky = Task.make(
      "flaky",
      { retry: { maxAttempts: 3, base: "5 millis", jitter: "none" } },
      (n: number, ctx) =>
        ctx.attempt < 3 ? Effect.fail(new RetryableError({ message: "busy", errorClass: "upstream" })) : Effect.succeed(n)
    )
    const picky = Task.make("picky", (n: number) => n % 2 === 0 ? Effect.succeed(n) : Effect.fail(new FatalError({ message: "odd" })))
    const template = Pipeline.make("mixed", flaky, picky)
    const specs = [0, 1, 2, 3].map((i) => template.bind(i))
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis" })
      assert.strictEqual(report.succeeded, 2)
      assert.strictEqual(report.failed, 2)
      const store = yield* Store
      const odd = Option.getOrThrow(yield* store.getPipeline(specs[1]!.pipelineId))
      assert.strictEqual(odd.state, "failed")
      assert.strictEqual(odd.failedTask, "picky")
      assert.strictEqual(odd.errorClass, "fatal")
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
        .filter((a) => a.pipelineId === specs[0]!.pipelineId)
      assert.deepStrictEqual(attempts.map((a) => `${a.taskName}:${a.outcome}`), [
        "flaky:failed",
        "flaky:failed",
        "flaky:succeeded",
        "picky:succeeded"
      ])
      const even = Option.getOrThrow(yield* store.getPipeline(specs[0]!.pipelineId))
      assert.strictEqual(even.attemptsTotal, 4)
    }).pipe(Effect.provide(hostOf(specs)))
  })

  it.live("refuses a control pipeline before writing anything for it when the store keeps no traversal state", () => {
    const gen = Task.make("generate", (n: number) => Effect.succeed(n))
    const check = Task.make("validate", (n: number) => Effect.succeed(n))
    const template = Pipeline.fromTasks("ctl", [gen, check], { control: { rewind: { validate: ["generate"] }, maxHandoffs: 2 } })
    return Effect.gen(function*() {
      const spec = template.bind(1)
      const out = yield* Effect.either(ClusterEngine.submit(Stream.make(spec), { pollInterval: "20 millis" }))
      assert.isTrue(Either.isLeft(out))
      if (Either.isLeft(out)) assert.match(out.left.message, /declares control .*keeps no traversal state/)
      const store = yield* Store
      assert.isTrue(Option.isNone(yield* store.getPipeline(spec.pipelineId)))
    }).pipe(Effect.provide(hostOf([], [], (s) => ({ ...s, traversal: undefined }))))
  })

  it.live("admission in batches: a window's new pipelines are written in one admission and read in one query; running rows are read together", () => {
    const template = Pipeline.make("batched", Task.make("a", (n: number) => Effect.succeed(n + 1)))
    const specs = Array.from({ length: 12 }, (_, i) => template.bind(i))
    const seen = { admits: 0, rowsReads: 0 }
    // the submitter's reads and writes of pipeline rows (the runner reads the row of each task too)
    const counting = (s: StoreService): StoreService => ({
      ...s,
      admit: (ps, seeds, traversals) => Effect.zipRight(Effect.sync(() => seen.admits++), s.admit(ps, seeds, traversals)),
      getPipelines: (ids) => Effect.zipRight(Effect.sync(() => seen.rowsReads++), s.getPipelines(ids)),
      pipelineStates: (ids, among) => Effect.zipRight(Effect.sync(() => seen.rowsReads++), s.pipelineStates!(ids, among))
    })
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 12, pollInterval: "20 millis" })
      assert.strictEqual(report.succeeded, 12)
      // one by one, each pipeline was its own admission (12) and its own row reads
      assert.strictEqual(seen.admits, 1, "the window's 12 new pipelines in one admission")
      assert.isAtLeast(seen.rowsReads, 2, "the batch's rows, then the running rows per poll")
    }).pipe(Effect.provide(hostOf(specs, [], counting)))
  })

  it.live("L4: a task committed elsewhere while this executor waited for its lease is not called; the lease goes back", () => {
    let called = 0
    const ask = Task.make("ask", { resource: "llm" }, (n: number, ctx) =>
      Effect.gen(function*() {
        yield* ctx.acquire()
        called++
        return n
      }))
    const template = Pipeline.make("l4", ask)
    const raced = template.bind(1)
    // another executor commits the task while this one gets its lease: from the grant on,
    // the store shows it committed
    // (both reads of a row show it: the submitter reads its running pipelines' rows together)
    let granted = false
    const committed = (r: PipelineRecord): PipelineRecord => granted ? { ...r, nTasksDone: 1, state: "succeeded" } : r
    const racing = (s: StoreService): StoreService => ({
      ...s,
      getPipeline: (id) => Effect.map(s.getPipeline(id), Option.map(committed)),
      getPipelines: (ids) =>
        Effect.map(s.getPipelines(ids), (rows) => new Map(Array.from(rows, ([id, r]) => [id, committed(r)] as const))),
      // (the submitter's follow reads the states alone)
      pipelineStates: undefined
    })
    const noting = (p: PoolsService): PoolsService => ({
      ...p,
      acquire: <Client,>(o?: Parameters<PoolsService["acquire"]>[0], h?: Parameters<PoolsService["acquire"]>[1]) =>
        Effect.tap(p.acquire<Client>(o, h), () => Effect.sync(() => granted = true))
    })
    const pools = [Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 1 })])]
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.make(raced), { pollInterval: "20 millis" })
      assert.strictEqual(report.succeeded, 1)
      // the activity has finished once its workflow has (keyed by the store's identity too)
      const storeId = yield* Effect.flatMap(Store, (s) => s.storeId ?? Effect.succeed(undefined))
      yield* Effect.repeat(
        Effect.flatMap(ClusterEngine.WindowWorkflow.executionId({ pipelineIds: [raced.pipelineId], specDigests: [raced.specDigest], storeId }), (id) =>
          ClusterEngine.WindowWorkflow.poll(id)),
        { until: (r) => r !== undefined, schedule: Schedule.spaced("20 millis") }
      )
      assert.isTrue(granted)
      assert.strictEqual(called, 0, "the provider was not called")
      const store = yield* Store
      assert.deepStrictEqual((yield* store.listArtifacts(raced.pipelineId)).map((a) => a.seq), [-1], "no second checkpoint")
      const snap = yield* (yield* Pool.Pools).snapshot("llm")
      assert.strictEqual(snap[0]!.active, 0, "the lease went back")
    }).pipe(Effect.provide(hostOf([raced], pools, racing, noting)))
  })

  it.live("L5: a store error at the commit retries the write (not the call), never a task failure", () => {
    let calls = 0
    const inc = Task.make("inc", (n: number) => Effect.sync(() => (calls++, n + 1)))
    const template = Pipeline.make("l5", inc)
    const spec = template.bind(5)
    // the database is away for the first three commits
    let failing = 3
    const flaky = (s: StoreService): StoreService => ({
      ...s,
      checkpoint: (unit) =>
        Effect.suspend(() =>
          failing-- > 0 ? Effect.fail(new StoreUnavailable({ message: "connection refused" })) : s.checkpoint(unit)
        )
    })
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.make(spec), { pollInterval: "20 millis" })
      assert.strictEqual(report.succeeded, 1)
      assert.strictEqual(report.failed, 0)
      const store = yield* Store
      assert.deepStrictEqual((yield* store.listArtifacts(spec.pipelineId)).map((a) => a.seq), [-1, 0])
      // the write was retried, not the call
      assert.strictEqual(calls, 1)
    }).pipe(Effect.provide(hostOf([spec], [], flaky)))
  })

  it.live("the run's events and the pools' resources land in the store, as an embedded run's do", () => {
    const ask = Task.make("ask", { resource: "llm" }, (n: number, ctx) => Effect.as(ctx.acquire(), n + 1))
    const template = Pipeline.make("recorded", ask)
    const specs = [1, 2, 3].map((i) => template.bind(i))
    const pools = [Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 2, options: { apiKey: "sk-secret" } })])]
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis" })
      assert.strictEqual(report.succeeded, 3)
      const store = yield* Store
      const kinds = Array.from(yield* Stream.runCollect(store.streamEvents({ runId: report.runId }))).map((e) => e.kind)
      assert.include(kinds, "run.started")
      assert.include(kinds, "run.finished")
      // the runner writes its pools' resources, filed under the run it worked for
      const resources = yield* store.resources.pipe(
        Effect.filterOrFail((rs) => rs.length > 0, () => "no resource row yet"),
        Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 200 })
      )
      assert.strictEqual(resources.length, 1)
      const row = resources[0]!
      assert.strictEqual(row.pool, "llm")
      assert.strictEqual(row.resourceId, "key-a")
      assert.strictEqual((row.health as { runId: string }).runId, report.runId)
      assert.notInclude(JSON.stringify(row.spec), "sk-secret")
    }).pipe(Effect.provide(hostOf(specs, pools)))
  })
})
