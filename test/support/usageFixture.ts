/**
 * Store-filling helpers for the tests of token and cost figures (report, export, `/stats`, the
 * dashboard): one finished model call as a succeeded one-task pipeline with its attempt, and a
 * throwaway SQLite store file for the test's scope.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { PipelineRecord } from "../../src/domain/Records.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import type { NewAttempt, StoreService } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import { pid, rid } from "./ids.js"

/** One model call: the lease it went through (`pool/resource#n`), its tokens and its cost (USD, or `null` when unpriced). */
export interface Call {
  readonly pipeline: string
  readonly runId: string
  /** Epoch ms the call started (it lasts 5 ms). */
  readonly at: number
  readonly leaseId: string
  readonly tokensIn: number
  readonly tokensOut: number
  readonly costUsd: number | null
}

/** The succeeded attempt of a {@link Call} (attempt 1 of task `ask`, seq 0). */
export const callAttempt = (c: Call): NewAttempt => ({
  pipelineId: pid(c.pipeline), runId: rid(c.runId), taskRunId: `${c.pipeline}/0`, taskName: "ask", seq: 0, attemptNo: 1,
  outcome: "succeeded", errorClass: null, errorType: null, errorMessage: null, decision: null,
  leaseIds: [c.leaseId], startedAt: c.at, endedAt: c.at + 5, durationMs: 5, tokensIn: c.tokensIn, tokensOut: c.tokensOut,
  costUsd: c.costUsd, tokensEstimated: false
})

/** Writes a {@link Call} as a succeeded one-task pipeline (row, task, attempt) of an open run. */
export const recordCall = (store: StoreService, c: Call) =>
  Effect.gen(function*() {
    const p = pid(c.pipeline)
    yield* store.admit([
      new PipelineRecord({
        pipelineId: p, key: null, name: "demo", state: "succeeded", nTasksDone: 1, nTasksTotal: 1, specDigest: "spec",
        seedDigest: `seed-${c.pipeline}`, tags: {}, attemptsTotal: 1, runId: rid(c.runId), createdAt: c.at, updatedAt: c.at + 5,
        startedAt: c.at, endedAt: c.at + 5, failedTask: null, errorType: null, errorMessage: null, errorClass: null
      })
    ])
    yield* store.putTask({
      taskRunId: `${c.pipeline}/0`, pipelineId: p, runId: rid(c.runId), seq: 0, taskName: "ask", state: "succeeded",
      attemptsUsed: 1, startedAt: c.at, endedAt: c.at + 5, durationMs: 5, errorType: null, errorMessage: null, errorClass: null, leaseIds: []
    })
    yield* store.recordAttempt(callAttempt(c))
  })

/**
 * Runs `body` with a `Store` on a fresh SQLite file in a temporary directory (removed when the
 * scope closes), flushed every 10 ms.
 */
export const withTempSqliteStore = <A, E, R>(prefix: string, body: Effect.Effect<A, E, R | Store>) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), prefix))),
      (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
    )
    return yield* body.pipe(Effect.provide(SqliteStore.layer({ filename: nodePath.join(dir, "store.db"), flushIntervalMs: 10 })))
  })
