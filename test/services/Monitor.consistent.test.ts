/**
 * Issue 18 trial: a live `/stats` answer's figures disagreed within itself (the attempts'
 * totals against the per-resource sums), because the picture was read in several queries while
 * the run's writer committed between them. The picture is now read in one consistent view
 * (`Store.consistentReads`; SQLite: one WAL snapshot; memory: writers wait for the view):
 * here a writer commits more model calls in the middle of the reads, and every figure of the
 * answer still describes the same moment. Postgres: `test/layers/PgStore.consistent.test.ts`.
 */
import { describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import type { StoreService } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import { checkPictureWithWriteBetween } from "../support/consistentPicture.js"

const openAt = (filename: string, readonly: boolean) =>
  Effect.flatMap(Layer.build(SqliteStore.layer({ filename, readonly, flushIntervalMs: 10 })), (ctx) => Effect.succeed(ctx.unsafeMap.get(Store.key) as StoreService))

describe("monitor picture: one consistent view", () => {
  it.scopedLive("sqlite: a writer committing between the picture's reads: totals, per-state counts and per-resource sums agree", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-consistent-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const file = nodePath.join(dir, "store.db")
      const writer = yield* openAt(file, false)
      // `serve`'s side: the file opened read-only
      const reader = yield* openAt(file, true)
      yield* checkPictureWithWriteBetween(writer, reader, "written")
    }))

  it.scoped("memory: a writer in another fiber between the picture's reads waits for the picture to end; its figures agree", () =>
    Effect.gen(function*() {
      const store = yield* Effect.map(Layer.build(MemoryStore.layer()), (ctx) => ctx.unsafeMap.get(Store.key) as StoreService)
      yield* checkPictureWithWriteBetween(store, store, "yield")
    }))
})
