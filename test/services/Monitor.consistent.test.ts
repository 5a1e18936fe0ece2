/**
 * Issue 18 trial: a live `/stats` answer's figures disagreed within itself (the attempts'
 * totals against the per-resource sums), because the picture was read in several queries while
 * the run's writer committed between them. The picture is now read in one read transaction
 * (SQLite: one WAL snapshot): here a writer commits more model calls in the middle of the
 * reads, and every figure of the answer still describes the same moment.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import type { StoreService } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import { rid } from "../support/ids.js"
import { recordCall } from "../support/usageFixture.js"

const openAt = (filename: string, readonly: boolean) =>
  Effect.flatMap(Layer.build(SqliteStore.layer({ filename, readonly, flushIntervalMs: 10 })), (ctx) => Effect.succeed(ctx.unsafeMap.get(Store.key) as StoreService))

describe("monitor picture: one consistent view", () => {
  it.scopedLive("a writer committing between the picture's reads: totals, per-state counts and per-resource sums agree", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-consistent-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const file = nodePath.join(dir, "store.db")
      const writer = yield* openAt(file, false)
      yield* writer.openRun({ runId: rid("r1"), startedAt: 1_000 })
      let n = 0
      const call = (target: string) =>
        recordCall(writer, { pipeline: `p${n}`, runId: "r1", at: 1_000 + n++, leaseId: `${target}#${n}`, tokensIn: 100, tokensOut: 10, costUsd: 0.001 })
      for (const t of ["llm/a", "llm/a", "llm/b"]) yield* call(t)
      for (const id of ["a", "b"]) {
        yield* writer.putResource({ pool: "llm", resourceId: id, kind: "chat", spec: {}, health: { state: "ready" }, updatedAt: 1 })
      }
      yield* writer.flush
      // `serve`'s side: the file opened read-only, the picture's reads with a writer's commit
      // in their middle (after the totals were read, before the per-resource sums)
      const reader = yield* openAt(file, true)
      const base = Monitor.storeReads(reader)
      let wrote = false
      const reads: Monitor.MonitorReads = {
        ...base,
        completions: (o) =>
          Effect.gen(function*() {
            if (!wrote) {
              wrote = true
              for (const t of ["llm/a", "llm/b", "llm/b"]) yield* call(t)
              yield* writer.flush
            }
            return yield* base.completions(o)
          })
      }
      const s = yield* Monitor.readSnapshot(reader, { runId: "r1" }, reads)
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
    }))
})
