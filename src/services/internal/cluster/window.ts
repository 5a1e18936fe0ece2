/**
 * A window of pipelines run under one window claim (window claims on; issue 17, step 1 of
 * docs/scale-out.md "Design: windows claimed whole"): what a window workflow's activity executes
 * in place of a task claim, a fence and an input read per task.
 *
 * 1. The window's pipelines are claimed all at once (`windowClaims.ts`: a row per pipeline, a
 *    token, a TTL on the database's clock; the process renews all of its claims in one
 *    statement per heartbeat). While another live execution holds one of them (the same
 *    window, another lane of it, or another window the pipeline was grouped in), this one
 *    waits (one heartbeat at a time), reading the window's rows: once they are all settled,
 *    it returns their verdicts without running; the next claim is of those not settled only.
 *    A pipeline that settles while its siblings still run gives its row up at once
 *    (`releasePipeline`, once its terminal row is committed): another execution that claims
 *    it (a re-submission that admitted it again) need not wait for the window's end.
 * 2. Its pipelines' rows and the last committed checkpoint of each are read in one statement
 *    (`pipeline_id = ANY($1)`, when the store lives in the cluster's database; through the
 *    store otherwise): L1 for the whole window; each pipeline resumes from its stored cursor.
 * 3. Each pipeline's tasks run in order (`task.ts`, `runWindowedTask`): a task's input is the
 *    output this process committed for the task before it, held in memory; before each call
 *    the window's local deadline is checked in memory. Checkpoints stay per task and
 *    first-writer-wins in the store's group commit (L1).
 * 4. A window whose deadline passed (its renewals failing, or the database saying the row is
 *    another's) calls nothing more: once its pipelines stopped, it is claimed again (its own
 *    token wins back a claim nobody took over) and read again, and only what is not committed
 *    runs.
 * 5. A window whose activities the engine interrupted (its shard moved to another runner)
 *    drains: no new call, the calls under way commit, the claim is given up, and the new
 *    owner's replay claims the window and runs what is left (`runWindow`).
 *
 * After a takeover (the claim won over another execution's expired token), that execution
 * may have had a call in flight when it stopped, whose late commit can win over this one's:
 * the first task each pipeline runs after a takeover has its output read back from the store
 * before the next task takes it as input (the winner's value).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Deferred, Effect, Exit, Fiber, FiberId, Option } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import { PREPARED } from "../preparedMark.js"
import type { RunId } from "../../../domain/Ids.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type * as Task from "../../../domain/Task.js"
import { executionToken, inputOf, registryFor, retryOnFailure, runWindowedTask, type TaskEnv, type WindowedTask, type WindowRun } from "./task.js"
import { pipelineClaimKey, type WindowClaims } from "./windowClaims.js"
import { runControlled } from "./controlled.js"
import { installAttemptServices } from "../runner/attemptScope.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * How one pipeline of a window ended: `interrupted` when its run was cancelled
 * (`cancelMarks.ts`: its row is settled `interrupted`, resumable).
 *
 * @internal
 */
export type PipelineVerdict = "succeeded" | "failed" | "gone" | "interrupted"

/** A pipeline's stored row as the window's read gives it, with its last checkpoint's output when inline. */
interface WindowRow {
  readonly runId: string
  readonly state: string
  readonly nTasksDone: number
  /** The output of task `nTasksDone - 1` (inline payload), `undefined` when none or stored as a blob. */
  readonly last: { readonly typeName: string; readonly codec: string; readonly data: Uint8Array } | undefined
}

const settled = (row: WindowRow | undefined): PipelineVerdict | undefined =>
  row === undefined
    ? "gone"
    : row.state === "succeeded"
    ? "succeeded"
    : row.state === "failed"
    ? "failed"
    // settled by a cancel of its run (a resume admits it again, `running`, first)
    : row.state === "interrupted"
    ? "interrupted"
    : undefined

/**
 * The rows of `ids` in one statement on `sql` (the store's database): each pipeline's run,
 * state, cursor and the output of its last committed task (inline payloads only).
 */
const readRows = (sql: SqlClient.SqlClient, ids: ReadonlyArray<string>): Effect.Effect<Map<string, WindowRow>, StoreUnavailable> =>
  sql.unsafe<{
    pipeline_id: string
    run_id: string
    state: string
    n_tasks_done: number
    type_name: string | null
    codec: string | null
    payload: Uint8Array | null
  }>(
    PREPARED + `SELECT p.pipeline_id, p.run_id, p.state, p.n_tasks_done, a.type_name, a.codec, a.payload
     FROM assay_pipelines p
     LEFT JOIN LATERAL (
       SELECT type_name, codec, payload FROM assay_artifacts a
       WHERE a.pipeline_id = p.pipeline_id AND a.seq = p.n_tasks_done - 1 AND a.active = 1
       ORDER BY a.artifact_id DESC LIMIT 1
     ) a ON p.n_tasks_done > 0
     WHERE p.pipeline_id = ANY($1::text[])`,
    [ids]
  ).pipe(
    Effect.map((rows) => {
      const out = new Map<string, WindowRow>()
      for (const r of rows) {
        out.set(r.pipeline_id, {
          runId: r.run_id,
          state: r.state,
          nTasksDone: Number(r.n_tasks_done),
          last: r.payload === null || r.type_name === null || r.codec === null
            ? undefined
            : { typeName: r.type_name, codec: r.codec, data: r.payload }
        })
      }
      return out
    }),
    Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the window's pipelines: ${e.message}`, cause: e }))
  )

/** The rows of `ids` through the store (a store outside the cluster's database): one read per pipeline. */
const readThroughStore = (env: TaskEnv, ids: ReadonlyArray<string>): Effect.Effect<Map<string, WindowRow>, StoreUnavailable> =>
  Effect.map(
    Effect.forEach(ids, (id) => env.store.getPipeline(id as never)),
    (rows) => {
      const out = new Map<string, WindowRow>()
      for (const row of rows) {
        if (Option.isNone(row)) continue
        out.set(row.value.pipelineId, { runId: row.value.runId, state: row.value.state, nTasksDone: row.value.nTasksDone, last: undefined })
      }
      return out
    }
  )

/**
 * Runs one pipeline of a claimed window from its stored row to its verdict, or `"lost"` when
 * the window's deadline passed before it ended. `verify`: read the first task's committed
 * output back from the store (after a takeover).
 */
const runPipeline = (
  env: TaskEnv,
  spec: AnySpec,
  row: WindowRow | undefined,
  live: () => boolean,
  verify: boolean
): Effect.Effect<PipelineVerdict | "lost", StoreUnavailable> =>
  Effect.gen(function*() {
    const done = settled(row)
    if (done !== undefined || row === undefined) return done ?? "gone"
    // a pipeline that declares control runs whole under the window's claim (`controlled.ts`)
    if (spec.template.control !== undefined) return yield* runControlled(env, spec, { live })
    const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    const start = row.nTasksDone
    if (start >= tasks.length) return "succeeded"
    let input: unknown
    if (start === 0) input = JSON.parse(spec.seedJson)
    else {
      const decoded = row.last === undefined ? undefined : registryFor(env, tasks[start - 1]!).load(row.last)
      if (decoded !== undefined && decoded._tag === "Right") input = decoded.right
      else {
        const loaded = yield* inputOf(env, spec, start)
        if (Option.isNone(loaded)) return "gone"
        input = loaded.value
      }
    }
    for (let seq = start; seq < tasks.length; seq++) {
      const windowed: WindowedTask = { runId: row.runId as RunId, input, live, committed: undefined }
      const verdict = yield* runWindowedTask(env, spec, seq, windowed)
      if (verdict !== "done") return verdict
      if (seq + 1 === tasks.length) break
      const own = windowed.committed
      const decoded = own === undefined || (verify && seq === start) ? undefined : registryFor(env, tasks[seq]!).load(own)
      if (decoded !== undefined && decoded._tag === "Right") input = decoded.right
      else {
        // read back: the store's value (another execution's commit may have won)
        const loaded = yield* inputOf(env, spec, seq + 1)
        if (Option.isNone(loaded)) return "gone"
        input = loaded.value
      }
    }
    return "succeeded"
  })

/**
 * Runs window `key` (its pipelines `specs`, in order) under a window claim to every
 * pipeline's verdict (see the module comment). `sql`: the cluster's client when the store
 * lives in its database (the window's read is then one statement), else `undefined`.
 * `storeId`: the admitting store's identity (part of each pipeline's claim key,
 * `pipelineClaimKey`). `key` names the execution in this process (`env.windows`); the
 * claim is of the pipelines.
 *
 * The execution runs in a fiber of the process's scope (`env.scope`), not the caller's: an
 * activity interrupted by the engine stops waiting, not the window's calls under way; a
 * second run of the same window in this process awaits the first. Once no activity awaits
 * it any more (the engine interrupted every one: the window's shard moved to another runner,
 * or this runner let it go), the execution **drains**: it starts no call (a task about to
 * call finds the window not live and stops), lets the calls under way finish and commit,
 * gives its claim up and ends, so that the window's new owner claims it at its next look
 * and runs what is left there (the work follows the shards, as without window claims). An
 * activity of this process that comes back to the window before the drain ends stops the
 * drain and awaits the same execution. Store errors are retried with `env.infraRetry` (L5).
 * Interrupted (the process stopping), it releases its claim.
 *
 * @internal
 */
export const runWindow = (
  env: TaskEnv,
  claims: WindowClaims,
  sql: SqlClient.SqlClient | undefined,
  key: string,
  specs: ReadonlyArray<AnySpec>,
  storeId?: string | undefined
): Effect.Effect<ReadonlyArray<PipelineVerdict>, StoreUnavailable> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      const attach = (run: WindowRun) => {
        run.callers++
        run.draining = false
        return restore(Deferred.await(run.done)).pipe(
          Effect.onInterrupt(() =>
            Effect.sync(() => {
              run.callers--
              if (run.callers <= 0) run.draining = true
            })
          )
        )
      }
      const running = env.windows.get(key)
      if (running !== undefined) return attach(running)
      const run: WindowRun = {
        done: Deferred.unsafeMake<ReadonlyArray<PipelineVerdict>, StoreUnavailable>(FiberId.none),
        callers: 0,
        draining: false
      }
      env.windows.set(key, run)
      const execution = Effect.interruptible(Effect.flatMap(executionToken, (token) =>
        windowExecution(env, claims, sql, key, specs, storeId, token, run).pipe(
          Effect.onInterrupt(() => Effect.ignore(claims.release(token))),
          Effect.ensuring(Effect.sync(() => claims.forget(token)))
        )))
      return Effect.zipRight(
        Effect.map(Effect.forkIn(execution, env.scope), (fiber) =>
          fiber.addObserver((exit) => {
            if (env.windows.get(key) === run) env.windows.delete(key)
            Deferred.unsafeDone(run.done, exit)
          })),
        attach(run)
      )
    })
  )

/**
 * Whether a draining window's execution ends now: no activity awaits it (checked and the
 * window unregistered in one step, so an activity arriving later starts a new execution
 * rather than awaiting this one). An activity that came back stops the drain (`false`).
 */
const drained = (env: TaskEnv, key: string, run: WindowRun): boolean => {
  if (!run.draining || run.callers > 0) return false
  if (env.windows.get(key) === run) env.windows.delete(key)
  return true
}

/**
 * The exits of `effects`, each run on a fiber of its own, all at once: what
 * `Effect.forEach(effects, Effect.exit, { concurrency: "unbounded" })` gives, without merging
 * each fiber's FiberRefs back into the caller's (its join diffed the runner's whole service
 * Context per pipeline fiber, whose Context `installAttemptServices` changed: fib17an) and
 * without the concurrent `forEach`'s own bookkeeping. The caller interrupted: every fiber is
 * interrupted and awaited before the caller goes on (its finalizers: the window claim's
 * release), as the `forEach` did.
 *
 * @internal
 */
export const allExits = <A, E>(effects: ReadonlyArray<Effect.Effect<A, E>>): Effect.Effect<Array<Exit.Exit<A, E>>> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(Effect.forEach(effects, (effect) => Effect.fork(restore(effect))), (fibers) =>
      restore(Effect.forEach(fibers, Fiber.await)).pipe(
        Effect.onInterrupt(() => Fiber.interruptAll(fibers))
      ))
  )

const windowExecution = (
  env: TaskEnv,
  claims: WindowClaims,
  sql: SqlClient.SqlClient | undefined,
  key: string,
  specs: ReadonlyArray<AnySpec>,
  storeId: string | undefined,
  token: string,
  run: WindowRun
): Effect.Effect<ReadonlyArray<PipelineVerdict>, StoreUnavailable> =>
  Effect.gen(function*() {
    const claimKeys = specs.map((spec) => pipelineClaimKey(spec.pipelineId, storeId))
    const verdicts: Array<PipelineVerdict | undefined> = specs.map(() => undefined)
    const read = (indices: ReadonlyArray<number>) => {
      const ids = indices.map((i) => specs[i]!.pipelineId)
      // this process's own writes are committed before the read (the store's front may hold some)
      return Effect.zipRight(env.store.flush, sql === undefined ? readThroughStore(env, ids) : readRows(sql, ids)).pipe(
        Effect.retry(env.infraRetry)
      )
    }
    // a draining window calls nothing more (as one past its deadline)
    const live = () => !run.draining && claims.live(token)
    // what a drained execution settles: nobody awaits it (its verdicts are never read)
    const partial = () => verdicts as ReadonlyArray<PipelineVerdict>
    let pending: ReadonlyArray<number> = specs.map((_, i) => i)
    while (pending.length > 0) {
      // 1. the claim of the pipelines not ended; while another live execution holds one of
      // them, they are waited for
      let tookOver = false
      while (true) {
        if (drained(env, key, run)) return partial()
        // a claim retried (its answer lost with the connection) may have taken rows over in
        // the attempt whose answer was lost: the retry finds them its own and cannot tell, so
        // it counts as a takeover (the first outputs read back: one read per pipeline)
        let attempts = 0
        const won = yield* Effect.suspend(() => {
          attempts++
          return claims.claim(pending.map((i) => claimKeys[i]!), token)
        }).pipe(Effect.retry(env.infraRetry))
        if (won.won) {
          tookOver = won.tookOver || attempts > 1
          break
        }
        const rows = yield* read(pending)
        const left: Array<number> = []
        for (const i of pending) {
          const v = settled(rows.get(specs[i]!.pipelineId))
          if (v === undefined) left.push(i)
          else verdicts[i] = v
        }
        pending = left
        if (pending.length === 0) return verdicts as ReadonlyArray<PipelineVerdict>
        yield* Effect.sleep(claims.heartbeat)
      }
      // 2. one read of the window's rows and their last checkpoints; 3. the pipelines
      const rows = yield* read(pending)
      // the pipelines of this round still running: one that settles while others run gives
      // its claim row up at once (the last one's goes with the window's release)
      let running = pending.length
      const exits = yield* allExits(
        pending.map((i) =>
          // one fiber per pipeline, the attempt services installed in it once (as the embedded
          // engine's pipeline fibers): its tasks run in it one after another (`runWindowedTask`).
          // A pipeline's failure (its store unreachable past L5, a defect) does not interrupt the
          // others: each ends on its own (a call under way commits), then the window fails
          // with the first failure (pg17v: a task's call in its pipeline's fiber must not be cut
          // by a sibling's failure; before pg17ac each task ran in a fiber of its own for it)
          Effect.zipRight(
            installAttemptServices,
            retryOnFailure(runPipeline(env, specs[i]!, rows.get(specs[i]!.pipelineId), live, tookOver), env.infraRetry)
          ).pipe(
            Effect.onError(() => Effect.sync(() => running--)),
            Effect.tap((verdict) =>
              // settled: its terminal row is committed (`checkpoint` resolves once durable), so
              // another execution that claims it now reads it settled (a re-submission that
              // admitted it again runs it without waiting for this window's slowest sibling);
              // a pipeline "lost" is claimed again by this window, so it keeps its row
              --running > 0 && verdict !== "lost" ? claims.releasePipeline(token, claimKeys[i]!) : Effect.void
            )
          )
        )
      )
      const failed = exits.find(Exit.isFailure)
      if (failed !== undefined) return yield* Effect.failCause((failed as Exit.Failure<unknown, StoreUnavailable>).cause)
      const results = exits.map((e) => (e as Exit.Success<PipelineVerdict | "lost", StoreUnavailable>).value)
      // 4. a window past its deadline: claimed again, and only what did not end runs again
      const left: Array<number> = []
      results.forEach((r, k) => {
        const i = pending[k]!
        if (r === "lost") left.push(i)
        else verdicts[i] = r
      })
      pending = left
      if (pending.length > 0 && run.draining) {
        // drained: the calls under way have committed; the claim is given up for the new owner
        // (an activity that came back meanwhile claims it again with the same token)
        yield* Effect.ignore(claims.release(token))
        if (drained(env, key, run)) return partial()
      }
    }
    yield* Effect.ignore(claims.release(token))
    return verdicts as ReadonlyArray<PipelineVerdict>
  })
