/**
 * Test support for control pipelines on the cluster engine (ClusterEngine.control*.test.ts):
 * templates that hand off forward, rewind with a value, retry all, spend their budget and take
 * an undeclared edge, and the picture of what a store holds for a set of pipelines, without
 * what differs between two runs of the same experiment (run ids, times, row ids, task-run ids),
 * so that the stores written by the embedded and the cluster engines can be compared row by row.
 */
import { Chunk, Effect, Option, Stream } from "effect"
import * as Handoff from "../../src/domain/Handoff.js"
import type { PipelineId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import type { StoreService } from "../../src/services/Store.js"

export interface Draft {
  readonly n: number
  readonly hint: string | null
  readonly visit: number
  readonly attempt: number
}

/** Calls made by the tasks of {@link travelling}: `pipelineId/task#visit@attempt`, in order. */
export const makeCallLog = () => {
  const calls: Array<string> = []
  return {
    calls,
    add: (pipelineId: string, task: string, visit: number, attempt: number) => calls.push(`${pipelineId}/${task}#${visit}@${attempt}`)
  }
}

/**
 * `gen → check → extra → report` with control: `check` rewinds `gen` with a value on its first
 * visit; on its second, an odd `n` retries all, an even one goes on; on its third it hands off
 * to `report` with a value (skipping `extra`).
 */
export const travelling = (log: ReturnType<typeof makeCallLog>) => {
  const gen = Task.make("gen", (row: { readonly n: number; readonly hint?: string }, ctx) =>
    Effect.sync((): Draft => {
      log.add(ctx.pipelineId, "gen", ctx.visit, ctx.attempt)
      return { n: row.n, hint: row.hint ?? null, visit: ctx.visit, attempt: ctx.attempt }
    }))
  const check = Task.make("check", (draft: Draft, ctx) =>
    Effect.sync(() => {
      log.add(ctx.pipelineId, "check", ctx.visit, ctx.attempt)
      if (ctx.visit === 0) return Handoff.rewind("gen", { n: draft.n, hint: "again" }, { reason: "first draft refused" })
      if (ctx.visit === 1 && draft.n % 2 === 1) return Handoff.retryAll({ reason: "odd: start over" })
      if (ctx.visit >= 2) return Handoff.to("report", { ...draft, hint: "skipped extra" }, { reason: "good enough" })
      return draft
    }))
  const extra = Task.make("extra", (draft: Draft, ctx) =>
    Effect.sync(() => {
      log.add(ctx.pipelineId, "extra", ctx.visit, ctx.attempt)
      return { ...draft, extra: true }
    }))
  const report = Task.make("report", (draft: Draft, ctx) =>
    Effect.sync(() => {
      log.add(ctx.pipelineId, "report", ctx.visit, ctx.attempt)
      return { ...draft, ok: true }
    }))
  return Pipeline.fromTasks("travelling", [gen, check, extra, report], {
    control: { edges: { check: ["report"] }, rewind: { check: ["gen"] }, retryAll: ["check"], maxHandoffs: 5 }
  })
}

/** `again → stop` whose `stop` always rewinds `again`: the third rewind is refused (`BudgetExceeded`, budget 2). */
export const spender = Pipeline.fromTasks("spender", [
  Task.make("again", (n: number) => Effect.succeed(n)),
  Task.make("stop", (n: number) => Effect.succeed(Handoff.rewind("again", n + 1, { reason: "more" })))
], { control: { rewind: { stop: ["again"] }, maxHandoffs: 2 } })

/** `a → b → c` whose `a` hands off to `c`, an edge it does not declare (`HandoffRefused`, fatal). */
export const strayer = Pipeline.fromTasks("strayer", [
  Task.make("a", (n: number) => Effect.succeed(Handoff.to("c", n, { reason: "skip b" }))),
  Task.make("b", (n: number) => Effect.succeed(n)),
  Task.make("c", (n: number) => Effect.succeed(n))
], { control: { edges: { a: ["b"] }, rewind: { c: ["a"] }, maxHandoffs: 3 } })

const all = <A, E>(s: Stream.Stream<A, E>) => Effect.map(Stream.runCollect(s), Chunk.toReadonlyArray)

/**
 * What `store` holds for `ids`, without run ids, times, row ids and task-run ids: the
 * pipelines' rows, task rows, attempt rows, artifacts (with their occurrence addresses' parts,
 * digests and flags), ledger rows and traversal states (without `version`: a cluster
 * execution's first write is a start mark, see `cluster/controlled.ts`).
 */
export const picture = (store: StoreService, ids: ReadonlyArray<PipelineId>) =>
  Effect.gen(function*() {
    yield* store.flush
    const out: Record<string, unknown> = {}
    for (const pipelineId of ids) {
      const row = Option.getOrThrow(yield* store.getPipeline(pipelineId))
      const tasks = yield* all(store.streamTasks({ pipelineId }))
      const attempts = yield* all(store.streamAttempts({ pipelineId }))
      const artifacts = yield* all(store.streamArtifacts({ pipelineId }))
      const handoffs = yield* store.traversal!.handoffs({ pipelineId })
      const vs = Option.getOrUndefined(yield* store.traversal!.visitState(pipelineId))
      out[pipelineId] = {
        row: {
          state: row.state,
          nTasksDone: row.nTasksDone,
          attemptsTotal: row.attemptsTotal,
          failedTask: row.failedTask,
          errorType: row.errorType,
          errorClass: row.errorClass
        },
        tasks: tasks.map((t) => `${t.seq}#${t.visit} ${t.taskName} ${t.state} used=${t.attemptsUsed} active=${t.active} ${t.errorType ?? ""}`)
          .sort(),
        attempts: attempts.map((a) => `${a.seq}#${a.visit}@${a.attemptNo} ${a.taskName} ${a.outcome} ${a.errorType ?? ""}`).sort(),
        artifacts: artifacts.map((a) => `${a.seq}#${a.visit} ${a.taskName} ${a.digest} final=${a.isFinal} active=${a.active}`).sort(),
        handoffs: handoffs.map((h) =>
          `${h.fromSeq}:${h.fromTask} -${h.operation}-> ${h.toSeq}:${h.toTask} entry=${h.entryArtifactId} reused=${h.entryReused} (${h.reason})`
        ),
        traversal: vs === undefined ? undefined : { ...vs, version: undefined }
      }
    }
    return out
  })
