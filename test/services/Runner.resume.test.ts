/**
 * Issue 19 §4: a resume asks the store once which pipelines already succeeded and skips their
 * specs without reading their rows; it still starts exactly the pipelines that are not
 * finished (failed, new, other repeats) and keeps every identity check.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"

/** The pipeline ids each `getPipelines` call asked for. */
const asked: Array<string> = []
const counted = (base: Layer.Layer<Store, unknown>) =>
  Layer.effect(
    Store,
    Effect.map(Store, (s): StoreService => ({
      ...s,
      getPipelines: (ids) => {
        asked.push(...ids)
        return s.getPipelines(ids)
      }
    }))
  ).pipe(Layer.provide(base))

const stores = {
  memory: () => MemoryStore.layer(),
  sqlite: () => SqliteStore.layer({ filename: nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-resume-")), "s.db") })
}

/** One store shared by the runs of a test, with the runner and an empty pool set. */
const envOf = (store: Layer.Layer<Store, unknown>) =>
  Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(counted(store), Pool.layer([]), NodeContext.layer))

describe("Runner: resume from the store's succeeded index", () => {
  it.effect.each(["memory", "sqlite"] as const)("%s: after a partial run, exactly the unfinished pipelines start; no finished row is read", (kind) => {
    const ran: Array<number> = []
    let failing = true
    const template = Pipeline.make(
      "partial",
      Task.sync("a", (n: number) => n + 1),
      Task.sync("b", (n: number) => {
        ran.push(n - 1)
        if (failing && (n - 1) % 7 === 3) throw new FatalError({ message: "down" })
        return n * 2
      })
    )
    const first = Array.from({ length: 30 }, (_, i) => i)
    return Effect.gen(function*() {
      const r1 = yield* Runner.run(template.map(first))
      const failed = first.filter((i) => i % 7 === 3)
      assert.strictEqual(r1.stats.byState.failed, failed.length)
      failing = false
      ran.length = 0
      asked.length = 0
      // the same source and 4 new seeds, in batches of 8
      const r2 = yield* Runner.run(template.map([...first, 30, 31, 32, 33]), { resume: true, maxAdmitted: 8 })
      assert.deepStrictEqual([...ran].sort((a, b) => a - b), [...failed, 30, 31, 32, 33])
      assert.strictEqual(r2.skipped, 30 - failed.length)
      assert.strictEqual(r2.stats.byState.succeeded, failed.length + 4)
      // rows were read for the unfinished and the new pipelines only
      const unfinished = new Set([...failed, 30, 31, 32, 33].map((i) => template.bind(i).pipelineId as string))
      assert.isAbove(asked.length, 0)
      assert.deepStrictEqual(asked.filter((id) => !unfinished.has(id)), [])
      // everything done: a third run reads no row at all
      asked.length = 0
      ran.length = 0
      const r3 = yield* Runner.run(template.map([...first, 30, 31, 32, 33]), { resume: true })
      assert.strictEqual(r3.skipped, 34)
      assert.deepStrictEqual(ran, [])
      assert.deepStrictEqual(asked, [])
    }).pipe(Effect.provide(envOf(stores[kind]())))
  })

  it.effect.each(["as written", "reversed", "shuffled"] as const)(
    "sqlite: the source %s, with new rows and rows of a changed task version among the finished ones: exactly those start; the counts are exact",
    (order) => {
      // the index finds ids fastest in the order the store wrote them: any other order, and ids
      // it does not hold next to ones it holds, must give the same answers
      const ran: Array<string> = []
      let failing = true
      const make = (version: string) =>
        Pipeline.make(
          "ordered",
          Task.sync("a", { version }, (n: number) => {
            ran.push(`${version}:${n}`)
            if (failing && n % 11 === 5) throw new FatalError({ message: "down" })
            return n + 1
          })
        )
      const v1 = make("1")
      const v2 = make("2")
      const first = Array.from({ length: 60 }, (_, i) => i)
      const arrange = <A>(xs: ReadonlyArray<A>): Array<A> =>
        order === "as written" ? [...xs] : order === "reversed" ? [...xs].reverse() : xs.map((x, i) => [x, (i * 37) % xs.length] as const)
          .sort((a, b) => a[1] - b[1]).map(([x]) => x)
      return Effect.gen(function*() {
        yield* Runner.run(v1.map(first), { maxAdmitted: 8 })
        failing = false
        ran.length = 0
        const failed = first.filter((n) => n % 11 === 5)
        // v1 rows (finished or not), new v1 rows and v2 rows (another definition: new ids) interleaved
        const specs = arrange([
          ...first.map((n) => v1.bind(n)),
          ...[60, 61, 62].map((n) => v1.bind(n)),
          ...[3, 4, 5].map((n) => v2.bind(n))
        ])
        const r = yield* Runner.run(Stream.fromIterable(specs), { resume: true, maxAdmitted: 8 })
        assert.deepStrictEqual(
          [...ran].sort(),
          [...failed.map((n) => `1:${n}`), "1:60", "1:61", "1:62", "2:3", "2:4", "2:5"].sort()
        )
        assert.strictEqual(r.skipped, first.length - failed.length)
        assert.strictEqual(r.stats.byState.succeeded, failed.length + 6)
        // a keyed source whose task version changed is another definition under the same keys:
        // a conflict, as before
        const keyed = (version: string) => Pipeline.make("keyed-version", Task.sync("k", { version }, (n: number) => n))
        yield* Runner.run(keyed("1").map(first, { keyOf: (n) => `row-${n}` }))
        const error = yield* Effect.flip(Runner.run(keyed("2").map(arrange(first), { keyOf: (n) => `row-${n}` }), { resume: true }))
        assert.strictEqual(error._tag, "PipelineIdentityConflict")
        const again = yield* Runner.run(keyed("1").map(arrange(first), { keyOf: (n) => `row-${n}` }), { resume: true })
        assert.strictEqual(again.skipped, first.length)
      }).pipe(Effect.provide(envOf(stores.sqlite())))
    }
  )

  it.effect("repeats: only the repeat that failed runs again", () => {
    let calls = 0
    let failing = true
    const template = Pipeline.make(
      "repeats",
      Task.sync("v", (n: number) => {
        calls++
        if (failing && calls === 4) throw new FatalError({ message: "one sample failed" })
        return n
      })
    )
    return Effect.gen(function*() {
      const r1 = yield* Runner.run(template.map([1, 2], { repeats: 3 }), { concurrency: 1 })
      assert.strictEqual(r1.stats.byState.failed, 1)
      failing = false
      calls = 0
      const r2 = yield* Runner.run(template.map([1, 2], { repeats: 3 }), { resume: true })
      assert.strictEqual(calls, 1)
      assert.strictEqual(r2.skipped, 5)
      assert.strictEqual(r2.stats.byState.succeeded, 1)
    }).pipe(Effect.provide(envOf(stores.sqlite())))
  })

  it.effect("a finished key whose seed changed is still a conflict; a finished seed repeated in the source is still a duplicate", () => {
    const template = Pipeline.make("keyed", Task.sync("v", (row: { readonly id: string; readonly v: number }) => row.v))
    return Effect.gen(function*() {
      yield* Runner.run(template.map([{ id: "a", v: 1 }, { id: "b", v: 2 }], { keyOf: (r) => r.id }))
      const error = yield* Effect.flip(Runner.run(template.map([{ id: "a", v: 1 }, { id: "b", v: 3 }], { keyOf: (r) => r.id }), { resume: true }))
      assert.strictEqual(error._tag, "PipelineIdentityConflict")
      const plain = Pipeline.make("plain", Task.sync("w", (n: number) => n))
      yield* Runner.run(plain.map([1, 2]))
      const again = yield* Runner.run(plain.map([1, 2, 1]), { resume: true })
      assert.strictEqual(again.skipped, 3)
      const store = yield* Store
      const skips = yield* store.events({ kind: "pipeline.skipped", runId: again.runId })
      assert.deepStrictEqual(skips.map((e) => (e.data as { reason: string }).reason), ["duplicate"])
    }).pipe(Effect.provide(envOf(stores.sqlite())))
  })
})
