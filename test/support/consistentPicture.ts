/**
 * The check of one consistent `/stats` picture (issue 18 trial: a live answer's totals and
 * per-resource sums disagreed): a writer in another fiber commits three more model calls in the
 * middle of the picture's reads (after the totals, before the per-resource sums), and every
 * figure of the answer must still describe one moment. Shared by the SQLite, memory and
 * Postgres tests.
 */
import { assert } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import * as Monitor from "../../src/services/internal/monitor.js"
import type { StoreService } from "../../src/services/Store.js"
import { rid } from "./ids.js"
import { recordCall } from "./usageFixture.js"

/**
 * Fills `writer` with 3 calls of run `r1` (two resources), then reads a picture from `reader`
 * (the same store or another handle on it) while a fiber forked before the picture writes 3
 * more calls between its reads. `wait`: `"written"` when the store lets that writer commit
 * during the picture (SQLite's WAL, Postgres' snapshot): the reads wait for it; `"yield"` when
 * the store holds writers until the picture ends (memory): the reads yield the writer a
 * chance instead (200 yields; without a consistent view it commits in them). Asserts that the
 * picture agrees with itself and that the next picture sees all 6 calls.
 */
export const checkPictureWithWriteBetween = (
  writer: StoreService,
  reader: StoreService,
  wait: "written" | "yield"
) =>
  Effect.gen(function*() {
    yield* writer.openRun({ runId: rid("r1"), startedAt: 1_000 })
    let n = 0
    const call = (target: string) =>
      recordCall(writer, { pipeline: `p${n}`, runId: "r1", at: 1_000 + n++, leaseId: `${target}#${n}`, tokensIn: 100, tokensOut: 10, costUsd: 0.001 })
    for (const t of ["llm/a", "llm/a", "llm/b"]) yield* call(t)
    for (const id of ["a", "b"]) {
      yield* writer.putResource({ pool: "llm", resourceId: id, kind: "chat", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    }
    yield* writer.flush
    // the other writer: a fiber of its own (not the picture's), started before the picture
    const go = yield* Deferred.make<void>()
    const written = yield* Deferred.make<void>()
    const other = yield* Effect.fork(Effect.gen(function*() {
      yield* Deferred.await(go)
      for (const t of ["llm/a", "llm/b", "llm/b"]) yield* call(t)
      yield* writer.flush
      yield* Deferred.succeed(written, undefined)
    }))
    const base = Monitor.storeReads(reader)
    let wrote = false
    const reads: Monitor.MonitorReads = {
      ...base,
      completions: (o) =>
        Effect.gen(function*() {
          if (!wrote) {
            wrote = true
            yield* Deferred.succeed(go, undefined)
            if (wait === "written") yield* Deferred.await(written)
            else for (let i = 0; i < 200; i++) yield* Effect.yieldNow()
          }
          return yield* base.completions(o)
        })
    }
    const s = yield* Monitor.readSnapshot(reader, { runId: "r1" }, reads)
    yield* Fiber.join(other)
    assert.isTrue(wrote)
    const accounting = s.accounting!
    const perResource = s.resources.map((r) => (r.accounting as { attempts: number; tokens_in: number } | null))
    const sum = (f: "attempts" | "tokens_in") => perResource.reduce((a, r) => a + (r?.[f] ?? 0), 0)
    assert.strictEqual(sum("attempts"), accounting.calls, JSON.stringify({ accounting, perResource }))
    assert.strictEqual(sum("tokens_in"), accounting.tokens_in)
    assert.strictEqual(s.pipelines.total, s.attempts_total)
    assert.strictEqual(s.pipelines.by_state.succeeded, s.pipelines.total)
    // the next picture sees the new calls, all figures together
    const next = yield* Monitor.readSnapshot(reader, { runId: "r1" })
    assert.strictEqual(next.accounting!.calls, 6)
    assert.strictEqual(next.pipelines.total, 6)
    const nextSum = next.resources.reduce((a, r) => a + ((r.accounting as { attempts: number } | null)?.attempts ?? 0), 0)
    assert.strictEqual(nextSum, 6)
  })
