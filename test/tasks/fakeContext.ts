/**
 * A {@link TaskContext} for unit tests of tasks, built on a real `Pools` service so that
 * leases, capacity, reports and reclaim behave exactly as in a run, without the runner.
 *
 * The context mirrors what the runner gives one attempt: `acquire` is scoped and tracked
 * under the attempt's owner key, `acquireLease` is the raw escape hatch under the same key,
 * the task's `resource` / `algorithm` are the defaults of every acquire, and `emit` /
 * `reportMetric` are recorded in memory for assertions.
 */
import * as Bus from "../../src/services/Bus.js"
import { unused } from "../support/unused.js"
import { Effect } from "effect"
import { ConfigError } from "../../src/domain/Errors.js"
import type { AcquireOptions } from "../../src/domain/Lease.js"
import type * as Task from "../../src/domain/Task.js"
import type { MetricOptions, TaskContext } from "../../src/domain/TaskContext.js"
import { Pools } from "../../src/services/Pool.js"
import { pid, rid } from "../support/ids.js"

/**
 * What {@link makeFakeContext} accepts; every field has a default (`pipelineId` "p-test",
 * `runId` "r-test", `taskName` the task's name or "task", `seq` 0, `attempt` 1, `seed` 0,
 * `owner` `${runId}:${pipelineId}:${seq}:${attempt}`).
 */
export interface FakeContextOptions {
  readonly task?: Task.Any | undefined
  readonly pipelineId?: string | undefined
  readonly runId?: string | undefined
  readonly taskName?: string | undefined
  readonly seq?: number | undefined
  readonly attempt?: number | undefined
  readonly seed?: number | undefined
  readonly owner?: string | undefined
  readonly meta?: Record<string, unknown> | undefined
}

/** One call of `ctx.emit`. */
export interface EmittedEvent {
  readonly kind: string
  readonly data: Readonly<Record<string, unknown>>
}

/** One call of `ctx.reportMetric`. */
export interface ReportedMetric {
  readonly name: string
  readonly value: string | number | boolean
  readonly options: MetricOptions | undefined
}

/** A context plus what it recorded. */
export interface FakeContext {
  readonly ctx: TaskContext
  /** The key under which this attempt's leases are tracked in `Pools` (for `reclaim`). */
  readonly owner: string
  readonly events: Array<EmittedEvent>
  readonly metrics: Array<ReportedMetric>
}

/**
 * Builds a task context for one attempt on top of the `Pools` service in the environment.
 */
export const makeFakeContext = (options: FakeContextOptions = {}): Effect.Effect<FakeContext, never, Pools> =>
  Effect.gen(function*() {
    const pools = yield* Pools
    const bus = yield* Bus.make
    const pipelineId = options.pipelineId ?? "p-test"
    const runId = options.runId ?? "r-test"
    const taskName = options.taskName ?? options.task?.name ?? "task"
    const seq = options.seq ?? 0
    const attempt = options.attempt ?? 1
    const owner = options.owner ?? `${runId}:${pipelineId}:${seq}:${attempt}`
    const events: Array<EmittedEvent> = []
    const metrics: Array<ReportedMetric> = []
    const task = options.task
    const holder = {
      taskName,
      pipelineId,
      owner,
      defaultPool: task?.options.resource ?? undefined,
      defaultAlgorithm: task?.options.algorithmInstance ?? task?.options.algorithm ?? undefined
    }
    const ctx: TaskContext = {
      pipelineId: pid(pipelineId),
      runId: rid(runId),
      taskName,
      suiteId: null,
      experimentId: null,
      localKey: null,
      outputDir: null,
      variables: {},
      seq,
      attempt,
      visit: 0,
      seed: options.seed ?? 0,
      meta: options.meta ?? {},
      bus,
      store: unused("store"),
      publishResource: (pool, resource) => pools.add(pool, resource),
      revokeResource: (pool, id, reason) => pools.revoke(pool, id, reason),
      subscribe: (filter) => pools.subscribe(filter),
      acquire: (o?: AcquireOptions | string) => pools.acquire(o, holder),
      acquireLease: (o?: AcquireOptions | string) => pools.acquireRaw(o, holder),
      heldLeases: pools.heldBy(owner),
      reclaimNow: Effect.asVoid(pools.releaseAll(owner)),
      emit: (kind, data) => Effect.sync(() => void events.push({ kind, data: data ?? {} })),
      reportMetric: (name, value, metricOptions) =>
        typeof value === "number" && !Number.isFinite(value) ?
          Effect.fail(new ConfigError({ message: `metric "${name}": ${value} is not a finite number` })) :
          Effect.sync(() => void metrics.push({ name, value, options: metricOptions }))
    }
    return { ctx, owner, events, metrics }
  })
