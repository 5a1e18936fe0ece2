/**
 * The cluster engine's submitter: registers a run, admits pipelines in windows (at most
 * `maxAdmitted` running at once: L7, v3 cluster has no cap on resident entities) by writing
 * their rows and starting their workflows (`discard: true`: the submitter never hosts them),
 * and follows their rows in the store until all are terminal.
 *
 * Interrupting it (Ctrl-C) stops admission at once: the run is closed `interrupted`; the
 * workflows already started go on on the runners; pipelines not admitted have no row (or
 * keep theirs), so submitting again admits them, and re-starting an admitted pipeline's
 * workflow finds the same execution (the idempotency key is the pipeline id).
 *
 * @internal
 */
import type { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import { Clock, Duration, Effect, Exit, Option, Random, Stream } from "effect"
import { ConfigError, type StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import { digest } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import { Store } from "../../Store.js"
import * as Rows from "../runner/rows.js"
import { PipelineWorkflow } from "./workflow.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * Options of {@link submit}.
 *
 * - `maxAdmitted`: pipelines running at once across the cluster (default 256);
 * - `pollInterval`: how often the rows of running pipelines are read (default 500 ms);
 * - `runId`, `label`, `meta`: of the run record;
 * - `onProgress`: told after every poll.
 *
 * @internal
 */
export interface SubmitOptions {
  readonly maxAdmitted?: number | undefined
  readonly pollInterval?: Duration.DurationInput | undefined
  readonly runId?: RunId | undefined
  readonly label?: string | undefined
  readonly meta?: Readonly<Record<string, unknown>> | undefined
  readonly onProgress?: ((progress: SubmitProgress) => Effect.Effect<void>) | undefined
}

/**
 * What the submitter has seen so far: pipelines admitted by this submission, skipped (already
 * terminal in the store), and of the admitted ones, how many ended succeeded / failed / gone,
 * and how many are running now.
 *
 * @internal
 */
export interface SubmitProgress {
  readonly runId: RunId
  readonly admitted: number
  readonly skipped: number
  readonly succeeded: number
  readonly failed: number
  readonly running: number
}

/**
 * What {@link submit} returns: the progress at the end and the run's status.
 *
 * @internal
 */
export interface SubmitReport extends SubmitProgress {
  readonly status: "completed"
  readonly durationMs: number
}

const makeRunId = (now: number) =>
  Effect.map(Random.nextIntBetween(0, 0x7fffffff), (r): RunId => {
    const stamp = new Date(now).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z")
    return `${stamp}-${digest(`${now}:${r}`).slice(0, 8)}` as RunId
  })

/**
 * The refusal of a pipeline the cluster engine cannot run yet: one that declares `control`
 * (handoffs, rewinds): its traversal is not mapped onto activities.
 *
 * @internal
 */
export const refuseControl = (spec: AnySpec): ConfigError | undefined =>
  spec.template.control === undefined ? undefined : new ConfigError({
    message: `pipeline "${spec.template.name}" declares control (handoffs/rewind), which the cluster engine does not run yet;` +
      " run it with the embedded engine (without --engine cluster)",
    issues: [{ path: "pipeline.control", message: "not supported by --engine cluster" }]
  })

/**
 * Submits every spec of `specs` and follows them to the end (see the module comment). Fails
 * with `ConfigError` for a control pipeline (before anything is written for it), or the
 * store's `StoreUnavailable`; the source's errors propagate as they are.
 *
 * @internal
 */
export const submit = <SE, SR>(
  specs: Stream.Stream<AnySpec, SE, SR>,
  options: SubmitOptions = {}
): Effect.Effect<SubmitReport, SE | StoreUnavailable | ConfigError, Store | WorkflowEngine | SR> =>
  Effect.gen(function*() {
    const store = yield* Store
    const maxAdmitted = Math.max(1, options.maxAdmitted ?? 256)
    const poll = Duration.decode(options.pollInterval ?? Duration.millis(500))
    const startedAt = yield* Clock.currentTimeMillis
    const runId = options.runId ?? (yield* makeRunId(startedAt))
    yield* store.openRun({
      runId,
      label: options.label ?? null,
      config: { engine: "cluster", maxAdmitted },
      startedAt,
      meta: options.meta
    })
    const running = new Set<PipelineId>()
    const counts = { admitted: 0, skipped: 0, succeeded: 0, failed: 0 }
    const progress = (): SubmitProgress => ({ runId, ...counts, running: running.size })

    /** Reads the rows of running pipelines once; drops the terminal ones. */
    const refresh = Effect.gen(function*() {
      for (const id of Array.from(running)) {
        const row = yield* store.getPipeline(id)
        if (Option.isNone(row)) continue
        const state = row.value.state
        if (state === "succeeded" || state === "failed") {
          running.delete(id)
          if (state === "succeeded") counts.succeeded++
          else counts.failed++
        }
      }
      yield* store.heartbeat(runId, yield* Clock.currentTimeMillis)
      if (options.onProgress !== undefined) yield* options.onProgress(progress())
    })
    const waitBelow = (n: number) =>
      Effect.whileLoop({
        while: () => running.size > n,
        body: () => Effect.zipRight(Effect.sleep(poll), refresh),
        step: () => {}
      })

    const admitOne = (spec: AnySpec) =>
      Effect.gen(function*() {
        const refused = refuseControl(spec)
        if (refused !== undefined) return yield* refused
        const stored = yield* store.getPipeline(spec.pipelineId)
        if (Option.isSome(stored) && (stored.value.state === "succeeded" || stored.value.state === "failed")) {
          counts.skipped++
          return
        }
        yield* waitBelow(maxAdmitted - 1)
        const now = yield* Clock.currentTimeMillis
        const row = Option.getOrUndefined(stored)
        yield* store.admit(
          [Rows.admissionRow(spec, row?.nTasksDone ?? 0, row, runId, now)],
          row === undefined ? [Rows.seedArtifact(spec, runId, now)] : []
        )
        yield* PipelineWorkflow.execute({ pipelineId: spec.pipelineId, specDigest: spec.specDigest }, { discard: true })
        running.add(spec.pipelineId)
        counts.admitted++
      })

    const body = Effect.gen(function*() {
      yield* Stream.runForEach(specs, admitOne)
      yield* waitBelow(0)
      const endedAt = yield* Clock.currentTimeMillis
      yield* store.finishRun(runId, { status: "completed", endedAt, stopReason: null })
      return { ...progress(), status: "completed" as const, durationMs: endedAt - startedAt }
    })
    // interrupted or failed: admission stops; the run is closed, its admitted pipelines go on
    return yield* Effect.onExit(body, (exit) =>
      Exit.isSuccess(exit) ? Effect.void : Effect.flatMap(Clock.currentTimeMillis, (endedAt) =>
        store.finishRun(runId, {
          status: "interrupted",
          endedAt,
          stopReason: Exit.isInterrupted(exit) ? "user" : "submit_failed"
        }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not close the run: ${e.message}`)))))
  })
