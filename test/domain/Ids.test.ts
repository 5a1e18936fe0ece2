/**
 * Branded ids. The type-level half is checked by `tsc --noEmit`: every `@ts-expect-error`
 * line below must really be an error (tsc reports an unused directive otherwise), so if a
 * signature of the store, the task store, the run handle, the task context or a record goes
 * back to plain `string`, the type-check fails. The functions holding those lines are never
 * called. The runtime half checks what branding costs at a boundary: nothing but a string
 * check.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import { expectTypeOf } from "vitest"
import { PipelineId, RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import { EventRecord, MetricRecord, PipelineRecord, RunRecord, TaskRecord } from "../../src/domain/Records.js"
import * as RunConfig from "../../src/domain/RunConfig.js"
import type { TaskContext } from "../../src/domain/TaskContext.js"
import type { TaskStore } from "../../src/domain/TaskStore.js"
import type { RunHandle } from "../../src/services/Runner.js"
import type { StoreDriver, StoreService } from "../../src/services/Store.js"

/** Swaps that must not compile (never called: tsc is the check). */
const swaps = (
  store: StoreService,
  tasks: TaskStore,
  driver: StoreDriver,
  handle: RunHandle,
  ctx: TaskContext,
  p: PipelineRecord,
  text: string
) => {
  // a pipeline id where a run id is expected
  // @ts-expect-error PipelineId is not a RunId
  void store.getRun(p.pipelineId)
  // @ts-expect-error PipelineId is not a RunId
  void store.heartbeat(ctx.pipelineId, 0)
  // @ts-expect-error PipelineId is not a RunId
  void store.finishRun(p.pipelineId, { status: "completed", endedAt: 0 })
  // @ts-expect-error PipelineId is not a RunId
  void tasks.metrics({ runId: ctx.pipelineId })
  // @ts-expect-error PipelineId is not a RunId
  void tasks.errors({ runId: p.pipelineId })
  // @ts-expect-error PipelineId is not a RunId
  void tasks.stats(p.pipelineId)
  // @ts-expect-error PipelineId is not a RunId
  void driver.getRun(p.pipelineId)

  // a run id where a pipeline id is expected
  // @ts-expect-error RunId is not a PipelineId
  void store.getPipeline(p.runId)
  // @ts-expect-error RunId is not a PipelineId
  void tasks.getPipeline(handle.runId)
  // @ts-expect-error RunId is not a PipelineId
  void tasks.listArtifacts(ctx.runId)
  // @ts-expect-error RunId is not a PipelineId
  void tasks.getPipelines([p.runId])
  // @ts-expect-error RunId is not a PipelineId
  void tasks.metrics({ runId: ctx.runId, pipelineId: ctx.runId })
  // @ts-expect-error RunId is not a PipelineId
  void store.updatePipeline(p.runId, { updatedAt: 0 })
  // @ts-expect-error RunId is not a PipelineId
  void store.markFinal(handle.runId, 0)
  // @ts-expect-error RunId is not a PipelineId
  void tasks.streamTasks({ pipelineId: p.runId })
  // @ts-expect-error RunId is not a PipelineId
  void driver.getPipeline(p.runId)

  // plain text is neither: it is branded at the boundary
  // @ts-expect-error string is not a RunId
  void store.getRun(text)
  // @ts-expect-error string is not a PipelineId
  void store.getPipeline(text)
  // @ts-expect-error string is not a RunId
  void store.openRun({ runId: text, startedAt: 0 })

  // the well-typed calls compile
  void store.getRun(p.runId)
  void store.getPipeline(p.pipelineId)
  void tasks.metrics({ runId: ctx.runId, pipelineId: ctx.pipelineId })
  void store.getRun(RunId.make(text))
}

describe("RunId and PipelineId", () => {
  it("are kept apart in the store's signatures (see `swaps`, checked by tsc)", () => {
    expectTypeOf(swaps).toBeFunction()
    expectTypeOf<RunId>().not.toEqualTypeOf<PipelineId>()
    expectTypeOf<RunId>().toMatchTypeOf<string>()
    expectTypeOf<PipelineId>().toMatchTypeOf<string>()
    expectTypeOf<string>().not.toMatchTypeOf<RunId>()
    expectTypeOf<PipelineId>().not.toMatchTypeOf<RunId>()
    expectTypeOf<RunId>().not.toMatchTypeOf<PipelineId>()
  })

  it("reads hand back branded ids: records, the run handle, the task context, spec binding", () => {
    expectTypeOf<RunRecord["runId"]>().toEqualTypeOf<RunId>()
    expectTypeOf<PipelineRecord["pipelineId"]>().toEqualTypeOf<PipelineId>()
    expectTypeOf<PipelineRecord["runId"]>().toEqualTypeOf<RunId>()
    expectTypeOf<TaskRecord["pipelineId"]>().toEqualTypeOf<PipelineId>()
    expectTypeOf<TaskRecord["runId"]>().toEqualTypeOf<RunId>()
    expectTypeOf<EventRecord["runId"]>().toEqualTypeOf<RunId | null>()
    expectTypeOf<MetricRecord["pipelineId"]>().toEqualTypeOf<PipelineId | null>()
    expectTypeOf<RunHandle["runId"]>().toEqualTypeOf<RunId>()
    expectTypeOf<TaskContext["runId"]>().toEqualTypeOf<RunId>()
    expectTypeOf<TaskContext["pipelineId"]>().toEqualTypeOf<PipelineId>()
    expectTypeOf(Pipeline.defaultPipelineId).returns.toEqualTypeOf<PipelineId>()
    expectTypeOf<RunConfig.RunConfig["runId"]>().toEqualTypeOf<RunId | undefined>()
  })

  it("are plain strings at runtime: make and decode return the string itself", () => {
    const r = RunId.make("20261130T192600Z-1a2b3c4d")
    assert.strictEqual(r, "20261130T192600Z-1a2b3c4d")
    assert.strictEqual(typeof r, "string")
    assert.strictEqual(Schema.decodeUnknownSync(PipelineId)("p-1"), "p-1")
    assert.strictEqual(Schema.encodeSync(RunId)(r), r)
  })

  it("decoding refuses what is not a string, naming the id", () => {
    const bad = Schema.decodeUnknownEither(RunId)(42)
    assert.isTrue(Either.isLeft(bad))
    assert.match(String(Either.isLeft(bad) ? bad.left : ""), /RunId/)
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(PipelineId)(null)))
  })

  it("records decoded from JSON carry the ids unchanged", () => {
    const json = {
      runId: "r1", label: null, status: "completed" as const, config: {}, startedAt: 1, heartbeatAt: 1, endedAt: 2,
      stopReason: null, notes: null, meta: {}
    }
    const run = Schema.decodeUnknownSync(RunRecord)(json)
    assert.strictEqual(run.runId, "r1")
    assert.deepStrictEqual(Schema.encodeSync(RunRecord)(run), json)
  })

  it("the config's run.runId is a plain string in the input and a RunId once resolved", () => {
    const resolved = RunConfig.resolve({ runId: "mine" })
    assert.isTrue(Either.isRight(resolved))
    if (Either.isRight(resolved)) assert.strictEqual(resolved.right.runId, "mine")
    const wrong = RunConfig.resolve({ runId: 7 as unknown as string })
    assert.isTrue(Either.isLeft(wrong))
    if (Either.isLeft(wrong)) assert.isTrue(wrong.left.issues.some((i) => i.path.includes("runId")))
  })
})
