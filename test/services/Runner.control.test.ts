/**
 * The runner's control-flow path (issue 13): handoffs (to / end), backward traversal (rewind,
 * retryAll), visits and occurrence addresses, budgets, attempt-number reservation, the
 * recovery table, the store-capability refusal, and plain pipelines unchanged.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Chunk, Deferred, Effect, Exit, Fiber, Layer, Option, Random, Stream, TestClock } from "effect"
import { FatalError, RetryableError } from "../../src/domain/Errors.js"
import * as Codec from "../../src/domain/Codec.js"
import { CodecRegistry } from "../../src/domain/Codec.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as HistoryArtifact from "../../src/domain/HistoryArtifact.js"
import type { PipelineId } from "../../src/domain/Ids.js"
import type { PipelineRecord } from "../../src/domain/Records.js"
import { digest } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"

/** What the faulty store wrapper hides or removes (toggled between runs of one test). */
interface Faults {
  noTraversal: boolean
  hideState: boolean
  hideArtifacts: ReadonlySet<string>
}

const faultsNone = (): Faults => ({ noTraversal: false, hideState: false, hideArtifacts: new Set() })

/** A MemoryStore whose traversal capability can be removed or made to lose state / payloads. */
const faultyStore = (faults: Faults) =>
  Layer.effect(
    Store,
    Effect.map(Store, (inner): StoreService => {
      const t = inner.traversal!
      const traversal: NonNullable<StoreService["traversal"]> = {
        ...t,
        visitState: (pipelineId) => faults.hideState ? Effect.succeed(Option.none()) : t.visitState(pipelineId),
        getArtifactById: (address) =>
          faults.hideArtifacts.has(address) ? Effect.succeed(Option.none()) : t.getArtifactById(address)
      }
      return new Proxy(inner, {
        get: (target, key, receiver) =>
          key === "traversal" ? (faults.noTraversal ? undefined : traversal) : Reflect.get(target, key, receiver)
      })
    })
  ).pipe(Layer.provide(MemoryStore.layer()))

const env = (options: Runner.RunOptions = {}, faults: Faults = faultsNone(), pools: ReadonlyArray<Pool.PoolConfig> = []) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, ...options }),
    Layer.mergeAll(faultyStore(faults), Pool.layer(pools))
  )

const traversalOf = Effect.map(Store, (s) => s.traversal!)

const visitState = (pipelineId: PipelineId) =>
  Effect.flatMap(traversalOf, (t) => Effect.map(t.visitState(pipelineId), Option.getOrThrow))

const ledger = (pipelineId: PipelineId) => Effect.flatMap(traversalOf, (t) => t.handoffs({ pipelineId }))

const tasksOf = (pipelineId: PipelineId) =>
  Effect.flatMap(Store, (s) => Effect.map(Stream.runCollect(s.streamTasks({ pipelineId })), (c) => Array.from(c)))

const attemptsOf = (pipelineId: PipelineId) =>
  Effect.flatMap(Store, (s) => Effect.map(Stream.runCollect(s.streamAttempts({ pipelineId })), (c) => Array.from(c)))

const eventsOf = (pipelineId: PipelineId, kind: string) =>
  Effect.flatMap(Store, (s) => s.events({ pipelineId, kind }))

const pipelineRow = (pipelineId: PipelineId) =>
  Effect.flatMap(Store, (s) => Effect.map(s.getPipeline(pipelineId), Option.getOrThrow))

const decodeAt = (address: string) =>
  Effect.flatMap(traversalOf, (t) =>
    Effect.map(t.getArtifactById(address), (o) => {
      const loaded = Option.getOrThrow(o)
      return JSON.parse(new TextDecoder().decode(loaded.payload!)) as unknown
    }))

const plusOne = (name: string, runs: Array<unknown>) =>
  Task.sync(name, (n: number) => {
    runs.push(n)
    return n + 1
  })

describe("Runner with control: forward handoffs", () => {
  it.effect("Handoff.to with a value: skips the stations between, one atomic transition, ledger and event", () =>
    Effect.gen(function*() {
      const bRuns: Array<unknown> = []
      const cRuns: Array<unknown> = []
      const a = Task.sync("a", (n: number) => Handoff.to("c", n * 10, { reason: "skip b" }))
      const template = Pipeline.fromTasks("fwd", [a, plusOne("b", bRuns), plusOne("c", cRuns)], {
        control: { edges: { a: ["c"] } }
      })
      const spec = template.bind(1)
      const pid = spec.pipelineId
      const outputs: Array<unknown> = []
      const report = yield* Runner.run([spec], {
        onPipelineFinished: (_r, out) => Effect.sync(() => outputs.push(Option.getOrNull(out)))
      })
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.handoffsTotal, 1)
      assert.strictEqual(report.stats.handoffsTotal, 1)
      assert.strictEqual(report.toJSON().handoffsTotal, 1)
      assert.deepStrictEqual(bRuns, [])
      assert.deepStrictEqual(cRuns, [10])
      assert.deepStrictEqual(outputs, [11])
      const tasks = (yield* tasksOf(pid)).sort((x, y) => x.seq - y.seq)
      assert.deepStrictEqual(tasks.map((t) => [t.seq, t.taskName, t.state, t.visit]), [
        [0, "a", "handed_off", 0],
        [2, "c", "succeeded", 0]
      ])
      const attempts = yield* attemptsOf(pid)
      const handed = attempts.find((x) => x.taskName === "a")!
      assert.strictEqual(handed.outcome, "handed_off")
      assert.isNull(handed.decision)
      const rows = yield* ledger(pid)
      assert.strictEqual(rows.length, 1)
      assert.deepInclude(rows[0]!, {
        fromSeq: 0,
        fromTask: "a",
        toSeq: 2,
        toTask: "c",
        operation: "to",
        entrySeq: 3,
        entryArtifactId: `${pid}:3`,
        entryReused: false,
        reason: "skip b"
      })
      assert.strictEqual(yield* decodeAt(`${pid}:3`), 10)
      const events = yield* eventsOf(pid, "pipeline.handoff")
      assert.strictEqual(events.length, 1)
      assert.deepInclude(events[0]!.data as object, { operation: "to", fromSeq: 0, toSeq: 2, reason: "skip b" })
      const row = yield* pipelineRow(pid)
      assert.strictEqual(row.state, "succeeded")
      assert.strictEqual(row.nTasksDone, 3)
    }).pipe(Effect.provide(env())))

  it.effect("Handoff.to without a value reuses the source's own input (the seed for seq 0)", () =>
    Effect.gen(function*() {
      const cRuns: Array<unknown> = []
      const a = Task.sync("a", (_n: number) => Handoff.to(2))
      const template = Pipeline.fromTasks("fwd-reuse", [a, plusOne("b", []), plusOne("c", cRuns)], {
        control: { edges: { a: [2] } }
      })
      const spec = template.bind(5)
      yield* Runner.run([spec])
      assert.deepStrictEqual(cRuns, [5])
      const rows = yield* ledger(spec.pipelineId)
      assert.deepInclude(rows[0]!, { entryReused: true, entrySeq: -1, entryArtifactId: `${spec.pipelineId}:-1` })
      // no payload artifact was written
      const artifacts = yield* Effect.flatMap(Store, (s) => s.listArtifacts(spec.pipelineId))
      assert.isFalse(artifacts.some((x) => x.seq >= 3))
    }).pipe(Effect.provide(env())))

  it.effect("Handoff.end with a value finishes at once with that value as the final artifact", () =>
    Effect.gen(function*() {
      const bRuns: Array<unknown> = []
      const a = Task.sync("a", (n: number) => Handoff.end({ done: n }, { reason: "good enough" }))
      const template = Pipeline.fromTasks("end", [a, plusOne("b", bRuns)], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(3)
      const outputs: Array<unknown> = []
      const report = yield* Runner.run([spec], {
        onPipelineFinished: (_r, out) => Effect.sync(() => outputs.push(Option.getOrNull(out)))
      })
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(outputs, [{ done: 3 }])
      assert.deepStrictEqual(bRuns, [])
      const rows = yield* ledger(spec.pipelineId)
      assert.deepInclude(rows[0]!, { operation: "end", toSeq: null, toTask: null, entrySeq: 2 })
      const artifacts = yield* Effect.flatMap(Store, (s) => s.listArtifacts(spec.pipelineId))
      const finals = artifacts.filter((x) => x.isFinal)
      assert.deepStrictEqual(finals.map((x) => x.seq), [2])
      const vs = yield* visitState(spec.pipelineId)
      assert.isNull(vs.pending)
    }).pipe(Effect.provide(env())))

  it.effect("Handoff.end without a value ends with the source's own input", () =>
    Effect.gen(function*() {
      const a = plusOne("a", [])
      const b = Task.sync("b", (_n: number) => Handoff.end())
      const template = Pipeline.fromTasks("end-reuse", [a, b, plusOne("c", [])], {
        control: { edges: { b: ["end"] } }
      })
      const spec = template.bind(1)
      const outputs: Array<unknown> = []
      yield* Runner.run([spec], {
        onPipelineFinished: (_r, out) => Effect.sync(() => outputs.push(Option.getOrNull(out)))
      })
      assert.deepStrictEqual(outputs, [2])
      const rows = yield* ledger(spec.pipelineId)
      assert.deepInclude(rows[0]!, { operation: "end", entryReused: true, entryArtifactId: `${spec.pipelineId}:0` })
      assert.strictEqual((yield* pipelineRow(spec.pipelineId)).state, "succeeded")
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: refusals", () => {
  const flakyPolicy = { retry: { maxAttempts: 5, base: "1 second" as const, jitter: "none" as const } }

  it.effect("a directive from a pipeline without control fails fatally; the retry policy is not consulted", () =>
    Effect.gen(function*() {
      const a = Task.make("a", flakyPolicy, (_n: number) => Effect.succeed(Handoff.to("b")))
      const template = Pipeline.fromTasks("plain", [a, plusOne("b", [])])
      const spec = template.bind(1)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.failed, 1)
      const attempts = yield* attemptsOf(spec.pipelineId)
      assert.strictEqual(attempts.length, 1)
      assert.strictEqual(attempts[0]!.errorType, "HandoffRefused")
      assert.include(attempts[0]!.errorMessage!, "declares no control block")
      assert.deepInclude(attempts[0]!.decision as object, { retry: false, reason: "control_refused" })
      const row = yield* pipelineRow(spec.pipelineId)
      assert.strictEqual(row.errorType, "HandoffRefused")
    }).pipe(Effect.provide(env())))

  it.effect("a thrown (or failed-with) Handoff is refused with the fix, never retried", () =>
    Effect.gen(function*() {
      const a = Task.make("a", flakyPolicy, (_n: number) => Effect.fail(Handoff.end(0)))
      const b = Task.sync("b", (_n: number): number => {
        throw Handoff.rewind("a", 1)
      })
      const template = Pipeline.fromTasks("thrown", [a, plusOne("c", [])], { control: { edges: { a: ["end"] } } })
      const other = Pipeline.fromTasks("thrown2", [plusOne("z", []), b], { control: { rewind: { b: ["z"] }, maxHandoffs: 1 } })
      const specs = [template.bind(1), other.bind(1)]
      const report = yield* Runner.run(specs)
      assert.strictEqual(report.stats.byState.failed, 2)
      for (const [spec, task, op] of [[specs[0]!, "a", "end"], [specs[1]!, "b", "rewind"]] as const) {
        const attempts = (yield* attemptsOf(spec.pipelineId)).filter((x) => x.taskName === task)
        assert.strictEqual(attempts.length, 1, "not retried")
        assert.strictEqual(attempts[0]!.errorType, "HandoffRefused")
        assert.strictEqual(attempts[0]!.errorClass, "fatal")
        assert.include(attempts[0]!.errorMessage!, `failed with a Handoff (${op})`)
        assert.include(attempts[0]!.errorMessage!, "never thrown")
      }
    }).pipe(Effect.provide(env())))

  it.effect("an undeclared edge is refused naming the edge; nothing is written for it", () =>
    Effect.gen(function*() {
      const a = Task.make("a", flakyPolicy, (_n: number) => Effect.succeed(Handoff.to("c")))
      const template = Pipeline.fromTasks("undeclared", [a, plusOne("b", []), plusOne("c", [])], {
        control: { edges: { a: ["b"] } }
      })
      const spec = template.bind(1)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.strictEqual(report.handoffsTotal, 0)
      const attempts = yield* attemptsOf(spec.pipelineId)
      assert.strictEqual(attempts.length, 1)
      assert.strictEqual(attempts[0]!.errorType, "HandoffRefused")
      assert.include(attempts[0]!.errorMessage!, "a → c")
      assert.deepStrictEqual(yield* ledger(spec.pipelineId), [])
    }).pipe(Effect.provide(env())))

  it.effect("a rewind without a value and a backward Handoff.to are refused", () =>
    Effect.gen(function*() {
      const a = plusOne("a", [])
      const b1 = Task.sync("b", (_n: number) => Handoff.rewind("a", undefined))
      const t1 = Pipeline.fromTasks("rw-novalue", [a, b1], { control: { rewind: { b: ["a"] }, maxHandoffs: 2 } })
      const b2 = Task.sync("b", (_n: number) => Handoff.to("a"))
      const t2 = Pipeline.fromTasks("to-back", [a, b2], { control: { rewind: { b: ["a"] }, maxHandoffs: 2 } })
      const report = yield* Runner.run([t1.bind(1), t2.bind(1)])
      assert.strictEqual(report.stats.byState.failed, 2)
      for (const spec of [t1.bind(1), t2.bind(1)]) {
        const attempts = yield* attemptsOf(spec.pipelineId)
        const last = attempts[attempts.length - 1]!
        assert.strictEqual(last.errorType, "HandoffRefused")
        assert.deepInclude(last.decision as object, { reason: "control_refused" })
      }
    }).pipe(Effect.provide(env())))

  it.effect("under strictLeases a leaked lease fails the task instead of handing off", () =>
    Effect.gen(function*() {
      const a = Task.make("a", { resource: "p" }, (n: number, ctx) => Effect.as(ctx.acquireLease(), Handoff.end(n)))
      const template = Pipeline.fromTasks("leak", [a, plusOne("b", [])], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(1)
      const report = yield* Runner.run([spec], { strictLeases: true })
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.strictEqual(report.handoffsTotal, 0)
      assert.deepStrictEqual(yield* ledger(spec.pipelineId), [])
      const attempts = yield* attemptsOf(spec.pipelineId)
      assert.strictEqual(attempts[0]!.errorType, "LeaseLeakError")
    }).pipe(Effect.provide(env({}, faultsNone(), [Pool.make("p", [Resource.make("worker", { id: "w0", capacity: 1 })])]))))

  it.effect("a cancelled (timed-out) attempt never hands off", () =>
    Effect.gen(function*() {
      const a = Task.make("a", { timeout: "1 second" }, (_n: number) =>
        Effect.as(Effect.sleep("5 seconds"), Handoff.end()))
      const template = Pipeline.fromTasks("timeout", [a, plusOne("b", [])], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(1)
      const fiber = yield* Effect.fork(Runner.run([spec]))
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.deepStrictEqual(yield* ledger(spec.pipelineId), [])
      const attempts = yield* attemptsOf(spec.pipelineId)
      assert.strictEqual(attempts[0]!.outcome, "timeout")
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: backward traversal and visits", () => {
  it.effect("rewind with an explicit value (null too): a new visit, new seed, addressed occurrences", () =>
    Effect.gen(function*() {
      const seen: Array<[unknown, number, number]> = []
      const generate = Task.sync("generate", (row: unknown, ctx) => {
        seen.push([row, ctx.visit, ctx.seed])
        return { row, visit: ctx.visit }
      })
      const validate = Task.sync("validate", (x: { visit: number }, ctx) =>
        x.visit === 0 ? Handoff.rewind("generate", null, { reason: "invalid" }) : { ok: true, visit: ctx.visit })
      const template = Pipeline.fromTasks("rewind", [generate, validate], {
        control: { rewind: { validate: ["generate"] }, maxHandoffs: 3 }
      })
      const spec = template.bind({ prompt: "p" })
      const pid = spec.pipelineId
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.handoffsTotal, 1)
      assert.deepStrictEqual(seen.map(([row, visit]) => [row, visit]), [[{ prompt: "p" }, 0], [null, 1]])
      // visit 0 derives its seed exactly as a plain pipeline; the revisit samples anew
      assert.strictEqual(seen[0]![2], Number.parseInt(digest(`${pid}:0:1`).slice(0, 8), 16) >>> 0)
      assert.notStrictEqual(seen[1]![2], seen[0]![2])
      const tasks = (yield* tasksOf(pid)).sort((x, y) => x.visit - y.visit || x.seq - y.seq)
      assert.deepStrictEqual(tasks.map((t) => [t.seq, t.visit, t.state]), [
        [0, 0, "succeeded"],
        [1, 0, "handed_off"],
        [0, 1, "succeeded"],
        [1, 1, "succeeded"]
      ])
      // history stays addressable; the active output is the revisit's
      assert.deepStrictEqual(yield* decodeAt(`${pid}:0`), { row: { prompt: "p" }, visit: 0 })
      assert.deepStrictEqual(yield* decodeAt(`${pid}:0#1`), { row: null, visit: 1 })
      assert.deepStrictEqual(yield* decodeAt(`${pid}:2`), null)
      const vs = yield* visitState(pid)
      assert.strictEqual(vs.handoffs, 1)
      assert.deepStrictEqual(vs.counters, [2, 2])
      assert.deepStrictEqual(vs.active.map((s) => s.artifact), [`${pid}:0#1`, `${pid}:1#1`])
      const rows = yield* ledger(pid)
      assert.deepInclude(rows[0]!, { operation: "rewind", fromSeq: 1, toSeq: 0, entrySeq: 2, entryReused: false })
    }).pipe(Effect.provide(env())))

  it.effect("each pipeline.handoff event says its own transition's visit and budget spent (two rewinds, then end; memory and SQLite)", () =>
    Effect.gen(function*() {
      const gen = Task.sync("gen", (n: number) => n + 1)
      const judge = Task.sync("judge", (n: number, ctx) => ctx.visit < 2 ? Handoff.rewind("gen", n * 10) : Handoff.end(n))
      const template = Pipeline.fromTasks("twice", [gen, judge, Task.sync("after", (n: number) => n)], {
        control: { rewind: { judge: ["gen"] }, edges: { judge: ["end"] }, maxHandoffs: 3 }
      })
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const sqlite = Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        Layer.mergeAll(SqliteStore.layer({ filename: path.join(dir, "twice.db") }), Pool.layer([]))
      )
      for (const layer of [env(), sqlite]) {
        yield* Effect.gen(function*() {
          const specs = [template.bind(1), template.bind(2)]
          const report = yield* Runner.run(specs)
          assert.strictEqual(report.stats.byState.succeeded, 2)
          for (const spec of specs) {
            const pid = spec.pipelineId
            const events = yield* eventsOf(pid, "pipeline.handoff")
            // (the stored JSON's key order too)
            assert.deepStrictEqual(events.map((e) => Object.keys(e.data as object)), Array(3).fill([
              "operation", "fromSeq", "fromTask", "visit", "toSeq", "toTask", "entry", "entryReused", "reason", "handoffs", "limit"
            ]))
            assert.deepStrictEqual(
              events.map((e) => {
                const d = e.data as Record<string, unknown>
                return [d.operation, d.visit, d.handoffs, d.limit, d.entry]
              }),
              [["rewind", 0, 1, 3, `${pid}:3`], ["rewind", 1, 2, 3, `${pid}:4`], ["end", 2, 2, 3, `${pid}:5`]]
            )
            assert.strictEqual((yield* visitState(pid)).handoffs, 2)
            assert.strictEqual((yield* ledger(pid)).length, 3)
          }
        }).pipe(Effect.provide(layer))
      }
    }))

  it.effect("a task reads a superseded occurrence through ctx.store.traversal (read-only view)", () =>
    Effect.gen(function*() {
      const generate = Task.sync("generate", (row: unknown, ctx) => ({ row, visit: ctx.visit }))
      const validate = Task.make("validate", {}, (x: { visit: number }, ctx) =>
        x.visit === 0
          ? Effect.succeed(Handoff.rewind("generate", "again", { reason: "invalid" }))
          : Effect.gen(function*() {
            const t = ctx.store.traversal!
            const first = yield* t.getArtifactById(`${ctx.pipelineId}:0`)
            const handoffs = yield* t.handoffs({ pipelineId: ctx.pipelineId })
            return {
              firstAvailable: Option.isSome(first) && first.value.payload !== undefined,
              firstVisit: Option.map(first, (a) => a.artifact.visit).pipe(Option.getOrNull),
              handoffs: handoffs.length,
              writable: "checkpoint" in ctx.store
            }
          }))
      const template = Pipeline.fromTasks("reads-history", [generate, validate], {
        control: { rewind: { validate: ["generate"] }, maxHandoffs: 1 }
      })
      const spec = template.bind({ prompt: "p" })
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(yield* decodeAt(`${spec.pipelineId}:1#1`), {
        firstAvailable: true,
        firstVisit: 0,
        handoffs: 1,
        writable: false
      })
    }).pipe(Effect.provide(env())))

  it.effect("an Effect task's Random is seeded per attempt and visit: reproducible across runs, new on a revisit", () =>
    Effect.gen(function*() {
      const draws: Array<[number, number]> = []
      const generate = Task.make("generate", (row: unknown, ctx) =>
        Effect.map(Random.next, (r) => {
          draws.push([ctx.visit, r])
          return { row, visit: ctx.visit }
        }))
      const validate = Task.sync("validate", (x: { visit: number }) =>
        x.visit === 0 ? Handoff.rewind("generate", "again") : x)
      const template = Pipeline.fromTasks("random", [generate, validate], {
        control: { rewind: { validate: ["generate"] }, maxHandoffs: 1 }
      })
      const spec = template.bind({ prompt: "p" })
      const once = () => Effect.provide(Runner.run([spec]), env())
      yield* once()
      yield* once()
      assert.strictEqual(draws.length, 4)
      const [a0, a1, b0, b1] = draws.map(([, r]) => r)
      assert.deepStrictEqual(draws.map(([v]) => v), [0, 1, 0, 1])
      assert.strictEqual(a0, b0, "a rerun in a fresh store draws the same value")
      assert.strictEqual(a1, b1)
      assert.notStrictEqual(a0, a1, "a revisit draws anew")
      const expected = yield* Effect.withRandom(Random.next, Random.make(Number.parseInt(digest(`${spec.pipelineId}:0:1`).slice(0, 8), 16) >>> 0))
      assert.strictEqual(a0, expected, "visit 0 is seeded with ctx.seed's plain derivation")
    }))

  it.effect("an Effect task's Random: a fiber it forks draws from the attempt's generator; a retry draws anew; a task that never draws changes no other's draws", () =>
    Effect.gen(function*() {
      const draws: Array<[string, number, number]> = []
      const seedOf = (pipelineId: string, seq: number, attempt: number) =>
        Number.parseInt(digest(`${pipelineId}:${seq}:${attempt}`).slice(0, 8), 16) >>> 0
      // t0 draws in a forked child; t1 never draws; t2 draws, failing its first attempt
      const t0 = Task.make("t0", (row: unknown, ctx) =>
        Effect.map(Effect.flatMap(Effect.fork(Random.next), Fiber.join), (r) => {
          draws.push(["t0", ctx.attempt, r])
          return row
        }))
      const t1 = Task.make("t1", (row: unknown) => Effect.succeed(row))
      const t2 = Task.make("t2", { retry: { maxAttempts: 2, base: "1 second", jitter: "none" } }, (row: unknown, ctx) =>
        Effect.flatMap(Random.next, (r) => {
          draws.push(["t2", ctx.attempt, r])
          return ctx.attempt === 1 ? Effect.fail(new RetryableError({ message: "again" })) : Effect.succeed(row)
        }))
      const spec = Pipeline.fromTasks("random-fork", [t0, t1, t2]).bind({ prompt: "p" })
      const fiber = yield* Effect.fork(Effect.provide(Runner.run([spec]), env()))
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 1)
      const expected = (seq: number, attempt: number) => Effect.withRandom(Random.next, Random.make(seedOf(spec.pipelineId, seq, attempt)))
      assert.deepStrictEqual(draws, [
        ["t0", 1, yield* expected(0, 1)],
        ["t2", 1, yield* expected(2, 1)],
        ["t2", 2, yield* expected(2, 2)]
      ])
    }))

  it.effect("retryAll replays the seed from its bytes captured at binding, not the (mutated) object", () =>
    Effect.gen(function*() {
      const entries: Array<[number, unknown]> = []
      const prepare = Task.sync("prepare", (seed: { items: Array<number> }, ctx) => {
        entries.push([ctx.visit, structuredClone(seed)])
        seed.items.push(99) // a task that mutates its input must not change what a replay runs
        return { prepared: seed.items.length }
      })
      const check = Task.sync("check", (row: unknown, ctx) => ctx.visit === 0 ? Handoff.retryAll({ reason: "again" }) : row)
      const template = Pipeline.fromTasks("retry-all", [prepare, check], {
        control: { retryAll: ["check"], maxHandoffs: 2 }
      })
      const spec = template.bind({ items: [1] })
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(entries, [[0, { items: [1] }], [1, { items: [1] }]])
      const rows = yield* ledger(spec.pipelineId)
      assert.deepInclude(rows[0]!, { operation: "retryAll", toSeq: 0, entryArtifactId: `${spec.pipelineId}:-1` })
      assert.strictEqual((yield* visitState(spec.pipelineId)).handoffs, 1)
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: budgets", () => {
  const looping = (maxHandoffs: number) => {
    const gen = Task.sync("gen", (n: number, ctx) => n + ctx.visit)
    const judge = Task.sync("judge", (n: number) => Handoff.rewind("gen", n, { reason: "never good" }))
    return Pipeline.fromTasks(`loop-${maxHandoffs}`, [gen, judge], {
      control: { rewind: { judge: ["gen"] }, maxHandoffs }
    })
  }

  it.effect("exactly N transitions; the N+1th is refused with BudgetExceeded before anything is written", () =>
    Effect.gen(function*() {
      const spec = looping(2).bind(1)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.strictEqual(report.handoffsTotal, 2)
      assert.strictEqual((yield* ledger(spec.pipelineId)).length, 2)
      const vs = yield* visitState(spec.pipelineId)
      assert.strictEqual(vs.handoffs, 2)
      // the refused third rewind left the judge's third visit failed, no third payload
      const artifacts = yield* Effect.flatMap(Store, (s) => s.listArtifacts(spec.pipelineId))
      assert.deepStrictEqual(artifacts.filter((x) => x.seq >= 2).map((x) => x.seq), [2, 3])
      const attempts = yield* attemptsOf(spec.pipelineId)
      const last = attempts[attempts.length - 1]!
      assert.strictEqual(last.errorType, "BudgetExceeded")
      assert.deepInclude(last.decision as object, { reason: "control_refused" })
      // the message names the budget and the one way to get a new one (it survives resume)
      const row = Option.getOrThrow(yield* Effect.flatMap(Store, (s) => s.getPipeline(spec.pipelineId)))
      assert.include(row.errorMessage ?? "", "after 2 of 2 transitions: the control budget is spent (maxHandoffs 2)")
      assert.include(row.errorMessage ?? "", "resume with --fresh-restart")
      // raising the declared limit is no way out: it is part of the pipeline's identity
      assert.include(row.errorMessage ?? "", "raising control.maxHandoffs does not give this pipeline more")
      assert.include(row.errorMessage ?? "", "a raised limit defines new pipelines")
      assert.notInclude(row.errorMessage ?? "", "raise run.maxHandoffs")
    }).pipe(Effect.provide(env())))

  it.effect("the run's maxHandoffs lowers the pipeline's budget, never raises it", () =>
    Effect.gen(function*() {
      const low = looping(5).bind(1)
      const report = yield* Runner.run([low], { maxHandoffs: 1 })
      assert.strictEqual(report.handoffsTotal, 1)
      // the refusal says where the effective budget comes from
      const row = Option.getOrThrow(yield* Effect.flatMap(Store, (s) => s.getPipeline(low.pipelineId)))
      assert.include(row.errorMessage ?? "", "(maxHandoffs: declared 5, capped to 1 by run.maxHandoffs)")
      assert.include(row.errorMessage ?? "", "or raise run.maxHandoffs (up to the declared 5) and resume")
    }).pipe(Effect.provide(env())))

  it.effect("end at the limit still completes", () =>
    Effect.gen(function*() {
      const gen = Task.sync("gen", (n: number, ctx) => n + ctx.visit)
      const judge = Task.sync("judge", (n: number, ctx) =>
        ctx.visit < 1 ? Handoff.rewind("gen", n, { reason: "once" }) : Handoff.end(n))
      const template = Pipeline.fromTasks("end-at-limit", [gen, judge, plusOne("after", [])], {
        control: { rewind: { judge: ["gen"] }, edges: { judge: ["end"] }, maxHandoffs: 1 }
      })
      const spec = template.bind(1)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.handoffsTotal, 2)
      assert.strictEqual((yield* visitState(spec.pipelineId)).handoffs, 1)
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: attempt numbers and recovery", () => {
  it.effect("a later station decodes an earlier, superseded draft by its address (Codec.getValueById)", () =>
    Effect.gen(function*() {
      class Draft extends HistoryArtifact.Class<Draft>("test/Draft") {}
      const registry = HistoryArtifact.register(CodecRegistry.default(), Draft)
      const seen: Array<unknown> = []
      const gen = Task.sync("gen", (_: unknown, ctx) => new Draft({ state: { text: `draft ${ctx.visit}` } }))
      const judge = Task.make("judge", (d: Draft, ctx) =>
        Effect.gen(function*() {
          if (ctx.visit === 0) return Handoff.rewind("gen", null)
          // the first draft (gen, visit 0) is history now, still readable and decodable
          const first = yield* Codec.getValueById(ctx.store.traversal!, registry, `${ctx.pipelineId}:0`)
          seen.push(Option.map(first, (v) => v instanceof Draft ? v.stateObject() : "not a Draft"))
          // without the registration: a typed error naming the codec, never a raw payload
          const bare = yield* Effect.flip(Codec.getValueById(ctx.store.traversal!, CodecRegistry.default(), `${ctx.pipelineId}:0`))
          seen.push([bare._tag, bare._tag === "ArtifactCodecError" ? bare.unregistered : null, bare.message])
          seen.push(yield* Codec.getValueById(ctx.store.traversal!, registry, `${ctx.pipelineId}:0#7`))
          return d.stateObject()
        }))
      const template = Pipeline.fromTasks("history-read", [gen, judge], { control: { rewind: { judge: ["gen"] }, maxHandoffs: 1 } })
      const report = yield* Runner.run([template.bind(1)], { registry })
      assert.strictEqual(report.stats.byState.succeeded, 1)
      expect(seen).toStrictEqual([
        Option.some({ text: "draft 0" }),
        ["ArtifactCodecError", true, `no codec named "history-v1" is registered (known: json, bytes)`],
        Option.none()
      ])
    }).pipe(Effect.provide(env())))

  it.effect("attempt numbers are reserved before the task runs: an interrupted attempt's number is never reused", () =>
    Effect.gen(function*() {
      const seen: Array<[number, number]> = []
      let hang = true
      const started = yield* Deferred.make<void>()
      const gen = Task.sync("gen", (n: number) => n)
      const slow = Task.make("slow", (n: number, ctx) =>
        Effect.suspend(() => {
          seen.push([ctx.visit, ctx.attempt])
          return hang && ctx.visit === 1 ? Effect.zipRight(Deferred.succeed(started, undefined), Effect.never) : Effect.succeed(n)
        }))
      const judge = Task.sync("judge", (n: number, ctx) => ctx.visit === 0 ? Handoff.rewind("slow", n) : n)
      const template = Pipeline.fromTasks("reserve", [gen, slow, judge], {
        control: { rewind: { judge: ["slow"] }, maxHandoffs: 3 }
      })
      const spec = template.bind(1)
      const runner = yield* Runner.Runner
      // first run: slow's revisit (visit 1, attempt 1) hangs; the run is cut off while it runs
      yield* Effect.scoped(Effect.gen(function*() {
        const handle = yield* runner.start([spec])
        const first = yield* Effect.raceFirst(
          Effect.as(Deferred.await(started), "started" as const),
          Effect.as(handle.await, "ended" as const)
        )
        assert.strictEqual(first, "started")
      }))
      assert.deepStrictEqual(seen, [[0, 1], [1, 1]])
      const before = yield* visitState(spec.pipelineId)
      assert.deepInclude(before.pending!, { seq: 1, visit: 1, attempts: 1 })
      // resume: the same visit continues with the next attempt number, reserved first
      hang = false
      const report = yield* runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(seen, [[0, 1], [1, 1], [1, 2]])
      const attempts = (yield* attemptsOf(spec.pipelineId)).filter((x) => x.taskName === "slow")
      // attempt 1 of visit 1 was cut off: recorded once, cancelled by the interruption (in the
      // commit that marked its task interrupted), and its number never reused
      assert.deepStrictEqual(attempts.map((x) => [x.visit, x.attemptNo, x.outcome, x.errorType]), [
        [0, 1, "succeeded", null],
        [1, 1, "cancelled", "Interrupted"],
        [1, 2, "succeeded", null]
      ])
    }).pipe(Effect.provide(env())))

  it.effect("a retried failure is written durably with the next reservation", () =>
    Effect.gen(function*() {
      const flaky = Task.make(
        "flaky",
        { retry: { maxAttempts: 3, base: "1 second", jitter: "none" } },
        (n: number, ctx) => ctx.attempt < 2 ? Effect.fail(new RetryableError({ message: "busy" })) : Effect.succeed(n)
      )
      const template = Pipeline.fromTasks("retry-durable", [flaky, plusOne("b", [])], {
        control: { edges: { flaky: ["end"] } }
      })
      const spec = template.bind(1)
      const fiber = yield* Effect.fork(Runner.run([spec]))
      yield* TestClock.adjust("500 millis")
      // during the delay the failed attempt is durable and attempt 2 is reserved
      const mid = yield* visitState(spec.pipelineId)
      assert.deepInclude(mid.pending!, { seq: 0, attempts: 2 })
      assert.strictEqual((yield* attemptsOf(spec.pipelineId)).length, 1)
      yield* TestClock.adjust("1 second")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 1)
    }).pipe(Effect.provide(env())))

  it.effect("failed: a resume continues at the exact persisted visit, entry, budget and attempt numbers", () =>
    Effect.gen(function*() {
      let broken = true
      const inputs: Array<[unknown, number, number]> = []
      const gen = Task.sync("gen", (n: number, ctx) => n * 10 + ctx.visit)
      const fragile = Task.make("fragile", (n: unknown, ctx) =>
        Effect.suspend(() => {
          inputs.push([n, ctx.visit, ctx.attempt])
          return broken && ctx.visit === 1 ? Effect.fail(new FatalError({ message: "broken" })) : Effect.succeed(n)
        }))
      const judge = Task.sync("judge", (n: unknown, ctx) => ctx.visit === 0 ? Handoff.rewind("fragile", "again") : n)
      const template = Pipeline.fromTasks("resume-failed", [gen, fragile, judge], {
        control: { rewind: { judge: ["fragile"] }, maxHandoffs: 3 }
      })
      const spec = template.bind(1)
      const first = yield* Runner.run([spec])
      assert.strictEqual(first.stats.byState.failed, 1)
      broken = false
      const second = yield* Runner.run([spec])
      assert.strictEqual(second.stats.byState.succeeded, 1)
      assert.deepStrictEqual(inputs, [[10, 0, 1], ["again", 1, 1], ["again", 1, 2]])
      const vs = yield* visitState(spec.pipelineId)
      assert.strictEqual(vs.handoffs, 1)
      assert.deepStrictEqual(vs.counters, [1, 2, 2])
    }).pipe(Effect.provide(env())))

  it.effect("a pending payload this program cannot decode (registration left out) is refused, never replaced by the seed", () =>
    Effect.gen(function*() {
      class Feedback extends HistoryArtifact.Class<Feedback>("test/Feedback") {}
      const registry = HistoryArtifact.register(CodecRegistry.default(), Feedback)
      let broken = true
      const inputs: Array<[unknown, number]> = []
      const gen = Task.make("gen", (row: unknown, ctx) =>
        Effect.suspend(() => {
          inputs.push([row instanceof Feedback ? row.stateObject() : row, ctx.visit])
          return broken && ctx.visit === 1 ? Effect.fail(new FatalError({ message: "broken" })) : Effect.succeed(ctx.visit)
        }))
      const judge = Task.sync("judge", (v: number) =>
        v === 0 ? Handoff.rewind("gen", new Feedback({ state: { feedback: "warmer" } })) : v)
      const template = Pipeline.fromTasks("undecodable", [gen, judge], {
        control: { rewind: { judge: ["gen"] }, maxHandoffs: 2 }
      })
      const spec = template.bind({ prompt: "p" })
      const pid = spec.pipelineId
      assert.strictEqual((yield* Runner.run([spec], { registry })).stats.byState.failed, 1)
      const before = yield* visitState(pid)
      broken = false
      // resumed without the registration: refused, and accounted as a failure of this run (the
      // summary, the report, the exit code and onPipelineFinished), the traversal untouched
      const finished: Array<PipelineRecord> = []
      const second = yield* Runner.run([spec], { onPipelineFinished: (r) => Effect.sync(() => finished.push(r)) })
      assert.strictEqual(second.stats.byState.succeeded ?? 0, 0)
      assert.strictEqual(second.stats.byState.failed, 1)
      assert.strictEqual(second.stats.pipelines, 1)
      assert.deepStrictEqual(finished.map((r) => [r.state, r.runId, r.errorType]), [["failed", second.runId, "ArtifactCodecError"]])
      assert.include(finished[0]!.errorMessage ?? "", "no codec named \"history-v1\"")
      assert.include(finished[0]!.errorMessage ?? "", "fix: register the payload's codec")
      const refused = yield* eventsOf(pid, "pipeline.checkpoint_undecodable")
      assert.strictEqual(refused.length, 1)
      assert.include(JSON.stringify(refused[0]!.data), "history-v1")
      assert.strictEqual((yield* eventsOf(pid, "pipeline.checkpoint_missing")).length, 0)
      assert.deepStrictEqual(yield* visitState(pid), before)
      // with it: the same visit continues from the author's payload
      assert.strictEqual((yield* Runner.run([spec], { registry })).stats.byState.succeeded, 1)
      assert.deepStrictEqual(inputs, [[{ prompt: "p" }, 0], [{ feedback: "warmer" }, 1], [{ feedback: "warmer" }, 1]])
    }).pipe(Effect.provide(env())))

  it.effect("running, owned by another run: skipped as owned_by_another_run; with resume: continued", () =>
    Effect.gen(function*() {
      let broken = true
      const a = Task.make("a", (n: number) => broken ? Effect.fail(new FatalError({ message: "x" })) : Effect.succeed(n))
      const template = Pipeline.fromTasks("owned", [a, plusOne("b", [])], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(1)
      yield* Runner.run([spec])
      const store = yield* Store
      // the row now looks owned by a run that is still marked running (silent, no resume)
      yield* store.updatePipeline(spec.pipelineId, { state: "running", runId: "other-run" as never, updatedAt: 0 })
      broken = false
      const skipped = yield* Runner.run([spec])
      assert.strictEqual(skipped.skipped, 1)
      const events = yield* eventsOf(spec.pipelineId, "pipeline.skipped")
      assert.deepStrictEqual(events[0]!.data, { reason: "owned_by_another_run", owner: "other-run" })
      const resumed = yield* Runner.run([spec], { resume: true })
      assert.strictEqual(resumed.stats.byState.succeeded, 1)
      // the pending entry's reserved attempt (1) already has its row (it failed for good before
      // the row was set running): nothing was in flight, so nothing is recorded as abandoned;
      // the claimed run's own attempt takes the next number
      const attempts = yield* attemptsOf(spec.pipelineId)
      assert.deepStrictEqual(
        attempts.map((x) => [x.taskName, x.visit, x.attemptNo, x.outcome, x.errorType]),
        [["a", 0, 1, "failed", "FatalError"], ["a", 0, 2, "succeeded", null], ["b", 0, 1, "succeeded", null]]
      )
    }).pipe(Effect.provide(env())))

  it.effect("claimed from a dead run at a revisit: no attempt row is invented; the pipeline.abandoned event names the pending visit and its reserved number", () =>
    Effect.gen(function*() {
      let broken = true
      const gen = Task.sync("gen", (n: number, ctx) => n + ctx.visit)
      // a retryable failure: the next number (2) is reserved with it, then the run is stopped
      // before attempt 2 begins (its retry waits a minute)
      const check = Task.make("check", { retry: { maxAttempts: 3, base: "1 minute", jitter: "none" } }, (n: number, ctx) =>
        ctx.visit === 1 && broken ? Effect.fail(new RetryableError({ message: "x", errorClass: "upstream" })) : Effect.succeed(n))
      const judge = Task.sync("judge", (n: number, ctx) => ctx.visit === 0 ? Handoff.rewind("check", n) : n)
      const template = Pipeline.fromTasks("abandoned-visit", [gen, check, judge], {
        control: { rewind: { judge: ["check"] }, maxHandoffs: 2 }
      })
      const spec = template.bind(1)
      const fiber = yield* Effect.fork(Runner.run([spec], { stopAfter: "2 seconds", grace: "1 second" }))
      for (let i = 0; i < 6; i++) {
        yield* Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })
        yield* TestClock.adjust("500 millis")
      }
      assert.strictEqual((yield* Fiber.join(fiber)).stats.byState.interrupted, 1)
      const store = yield* Store
      yield* store.updatePipeline(spec.pipelineId, { state: "running", runId: "dead-run" as never, updatedAt: 0 })
      broken = false
      assert.strictEqual((yield* Runner.run([spec], { resume: true })).stats.byState.succeeded, 1)
      const checks = (yield* attemptsOf(spec.pipelineId)).filter((x) => x.taskName === "check")
      // the reserved number (2) is skipped, never reused; nothing says it ran
      assert.deepStrictEqual(checks.map((x) => [x.visit, x.attemptNo, x.errorType]), [
        [0, 1, null],
        [1, 1, "RetryableError"],
        [1, 3, null]
      ])
      const abandoned = yield* eventsOf(spec.pipelineId, "pipeline.abandoned")
      assert.deepStrictEqual(abandoned.map((e) => e.data), [{ run: "dead-run", task: "check", seq: 1, visit: 1, attemptNo: 2 }])
    }).pipe(Effect.provide(env())))

  it.effect("a row whose traversal state is missing is refused (corrupt visit checkpoint); freshRestart fixes it", () => {
    const faults = faultsNone()
    return Effect.gen(function*() {
      let broken = true
      const a = Task.make("a", (n: number) => broken ? Effect.fail(new FatalError({ message: "x" })) : Effect.succeed(n))
      const template = Pipeline.fromTasks("lost", [a, plusOne("b", [])], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(1)
      yield* Runner.run([spec])
      broken = false
      faults.hideState = true
      const finished: Array<PipelineRecord> = []
      const refused = yield* Runner.run([spec], { onPipelineFinished: (r) => Effect.sync(() => finished.push(r)) })
      assert.strictEqual(refused.stats.byState.succeeded ?? 0, 0)
      // accounted as this run's failure, with the cause and the fix, like any failed pipeline
      assert.strictEqual(refused.stats.byState.failed, 1)
      assert.deepStrictEqual(finished.map((r) => [r.state, r.runId, r.errorType]), [["failed", refused.runId, "CorruptCheckpoint"]])
      assert.include(finished[0]!.errorMessage ?? "", "corrupt visit checkpoint: missing traversal state; fix: resume with --fresh-restart")
      const events = yield* eventsOf(spec.pipelineId, "pipeline.corrupt_checkpoint")
      assert.include((events[0]!.data as { error: string }).error, "corrupt visit checkpoint: missing traversal state")
      assert.include((events[0]!.data as { fix: string }).fix, "--fresh-restart")
      const fresh = yield* Runner.run([spec], { freshRestart: true })
      assert.strictEqual(fresh.stats.byState.succeeded, 1)
    }).pipe(Effect.provide(env({}, faults)))
  })

  it.effect("a missing pending payload replays the seed, keeping budget and counters", () => {
    const faults = faultsNone()
    return Effect.gen(function*() {
      let broken = true
      const seen: Array<[unknown, number]> = []
      const gen = Task.sync("gen", (n: unknown, ctx) => {
        seen.push([n, ctx.visit])
        return n
      })
      const fragile = Task.make("fragile", (n: unknown, ctx) =>
        broken && ctx.visit === 1 ? Effect.fail(new FatalError({ message: "x" })) : Effect.succeed(n))
      const judge = Task.sync("judge", (n: unknown, ctx) => ctx.visit === 0 ? Handoff.rewind("fragile", "payload") : n)
      const template = Pipeline.fromTasks("replay", [gen, fragile, judge], {
        control: { rewind: { judge: ["fragile"] }, maxHandoffs: 3 }
      })
      const spec = template.bind(7)
      const pid = spec.pipelineId
      yield* Runner.run([spec])
      broken = false
      const before = yield* visitState(pid)
      faults.hideArtifacts = new Set([before.pending!.input])
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      const missing = yield* eventsOf(pid, "pipeline.checkpoint_missing")
      assert.strictEqual(missing.length, 1)
      assert.deepStrictEqual(seen, [[7, 0], [7, 1]])
      const vs = yield* visitState(pid)
      assert.strictEqual(vs.handoffs, 1)
      assert.deepStrictEqual(vs.counters, [2, 3, 2])
    }).pipe(Effect.provide(env({}, faults)))
  })

  it.effect("freshRestart: pipeline.restarted with the dropped cursor, new budget, counters and audit kept", () =>
    Effect.gen(function*() {
      const spec = (() => {
        const gen = Task.sync("gen", (n: number, ctx) => n + ctx.visit)
        const judge = Task.sync("judge", (n: number) => Handoff.rewind("gen", n))
        return Pipeline.fromTasks("fresh", [gen, judge], { control: { rewind: { judge: ["gen"] }, maxHandoffs: 2 } })
      })().bind(1)
      const pid = spec.pipelineId
      yield* Runner.run([spec])
      const spent = yield* visitState(pid)
      assert.strictEqual(spent.handoffs, 2)
      const report = yield* Runner.run([spec], { freshRestart: true })
      assert.strictEqual(report.handoffsTotal, 2)
      const restarted = yield* eventsOf(pid, "pipeline.restarted")
      assert.strictEqual(restarted.length, 1)
      assert.property(restarted[0]!.data as object, "discardedCursor")
      const vs = yield* visitState(pid)
      assert.strictEqual(vs.handoffs, 2)
      // visits continued from the kept counters: 3 entries per run of gen
      assert.strictEqual(vs.counters[0], 6)
      assert.strictEqual((yield* ledger(pid)).length, 4)
    }).pipe(Effect.provide(env())))

  it.effect("succeeded + retrySucceeded restarts from the seed with a fresh budget", () =>
    Effect.gen(function*() {
      const gen = Task.sync("gen", (n: number, ctx) => n + ctx.visit)
      const judge = Task.sync("judge", (n: number, ctx) => ctx.visit % 2 === 0 ? Handoff.rewind("gen", n) : n)
      const template = Pipeline.fromTasks("again", [gen, judge], { control: { rewind: { judge: ["gen"] }, maxHandoffs: 1 } })
      const spec = template.bind(1)
      const first = yield* Runner.run([spec])
      assert.strictEqual(first.stats.byState.succeeded, 1)
      const skipped = yield* Runner.run([spec])
      assert.strictEqual(skipped.skipped, 1)
      const again = yield* Runner.run([spec], { retrySucceeded: true })
      assert.strictEqual(again.stats.byState.succeeded, 1)
      assert.strictEqual(again.handoffsTotal, 1)
      assert.strictEqual((yield* visitState(spec.pipelineId)).handoffs, 1)
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: torn completion and big outputs", () => {
  it.effect("a complete traversal under a row left failed is settled succeeded without running anything", () =>
    Effect.gen(function*() {
      const runs: Array<unknown> = []
      const a = Task.sync("a", (n: number) => Handoff.end(n + 1))
      const template = Pipeline.fromTasks("torn", [a, plusOne("b", runs)], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(1)
      yield* Runner.run([spec])
      const store = yield* Store
      // the row no longer says what the traversal says (a torn final write)
      yield* store.updatePipeline(spec.pipelineId, { state: "failed", updatedAt: 0 })
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.handoffsTotal, 0)
      assert.strictEqual((yield* eventsOf(spec.pipelineId, "pipeline.terminal_repaired")).length, 1)
      assert.strictEqual((yield* pipelineRow(spec.pipelineId)).state, "succeeded")
      assert.deepStrictEqual(runs, [])
      assert.strictEqual((yield* ledger(spec.pipelineId)).length, 1)
    }).pipe(Effect.provide(env())))

  it.effect("a big output (>= 256 KiB) on a control pipeline is checkpointed at its occurrence", () =>
    Effect.gen(function*() {
      const big = Task.sync("big", (n: number) => "x".repeat(300 * 1024 + n))
      const judge = Task.sync("judge", (s: string, ctx) => ctx.visit === 0 ? Handoff.rewind("big", 1) : s.length)
      const template = Pipeline.fromTasks("big", [big, judge], { control: { rewind: { judge: ["big"] }, maxHandoffs: 1 } })
      const spec = template.bind(0)
      const outputs: Array<unknown> = []
      const report = yield* Runner.run([spec], {
        concurrency: 1,
        onPipelineFinished: (_r, out) => Effect.sync(() => outputs.push(Option.getOrNull(out)))
      })
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(outputs, [300 * 1024 + 1])
      assert.strictEqual(((yield* decodeAt(`${spec.pipelineId}:0#1`)) as string).length, 300 * 1024 + 1)
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: store capability and plain pipelines", () => {
  it.effect("a store without the traversal capability refuses a control pipeline before writing it", () => {
    const faults = { ...faultsNone(), noTraversal: true }
    return Effect.gen(function*() {
      const a = Task.sync("a", (n: number) => Handoff.end(n))
      const template = Pipeline.fromTasks("no-cap", [a, plusOne("b", [])], { control: { edges: { a: ["end"] } } })
      const spec = template.bind(1)
      const exit = yield* Effect.exit(Runner.run([spec]))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
        assert.strictEqual((error as { _tag?: string })._tag, "ConfigError")
        assert.include((error as { message: string }).message, "traversal")
      }
      const row = yield* Effect.flatMap(Store, (s) => s.getPipeline(spec.pipelineId))
      assert.isTrue(Option.isNone(row))
    }).pipe(Effect.provide(env({}, faults)))
  })

  it.effect("plain pipelines keep their ids, seeds and rows (visit 0, no traversal state)", () =>
    Effect.gen(function*() {
      const seeds: Array<number> = []
      const a = Task.sync("a", (n: number, ctx) => {
        seeds.push(ctx.seed)
        assert.strictEqual(ctx.visit, 0)
        return n + 1
      })
      const template = Pipeline.make("plain", a)
      const spec = template.bind(1)
      yield* Runner.run([spec])
      assert.deepStrictEqual(seeds, [Number.parseInt(digest(`${spec.pipelineId}:0:1`).slice(0, 8), 16) >>> 0])
      const t = yield* traversalOf
      assert.isTrue(Option.isNone(yield* t.visitState(spec.pipelineId)))
      const tasks = yield* tasksOf(spec.pipelineId)
      assert.deepStrictEqual(tasks.map((x) => [x.state, x.visit]), [["succeeded", 0]])
    }).pipe(Effect.provide(env())))
})

describe("Runner with control on SqliteStore", () => {
  it.effect("synchronous tasks that rewind and end in one commit: history inactive, the stored state the last, ledger whole", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const file = path.join(dir, "one-commit.db")
      const a = Task.sync("a", (n: number) => n + 1)
      const b = Task.sync("b", (n: number, ctx) => n * 10 + ctx.visit)
      const c = Task.sync("c", (n: number, ctx) => ctx.visit === 0 ? Handoff.rewind("b", n) : Handoff.end({ n }))
      const d = Task.sync("d", (n: number) => n)
      const template = Pipeline.fromTasks("one-commit", [a, b, c, d], {
        control: { rewind: { c: ["b"] }, edges: { c: ["end"] }, maxHandoffs: 1 }
      })
      const specs = [template.bind(1), template.bind(2)]
      const sqlite = () =>
        Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([])))
      const report = yield* Runner.run(specs).pipe(Effect.provide(sqlite()))
      assert.strictEqual(report.stats.byState.succeeded, 2)
      // read back from a fresh open: only what was committed
      yield* Effect.gen(function*() {
        const store = yield* Store
        for (const spec of specs) {
          const pid = spec.pipelineId
          const tasks = Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: pid })))
            .sort((x, y) => x.visit - y.visit || x.seq - y.seq)
          // everything from b up to the rewind is history; the revisit's rows are active
          assert.deepStrictEqual(tasks.map((t) => [t.seq, t.visit, t.state, t.active]), [
            [0, 0, "succeeded", true],
            [1, 0, "succeeded", false],
            [2, 0, "handed_off", false],
            [1, 1, "succeeded", true],
            [2, 1, "handed_off", true]
          ])
          const artifacts = (yield* store.listArtifacts(pid)).map((x) => [x.seq, x.visit, x.active, x.isFinal])
          assert.deepStrictEqual(artifacts.sort((x, y) => (x[0] as number) - (y[0] as number) || (x[1] as number) - (y[1] as number)), [
            [-1, 0, true, false],
            [0, 0, true, false],
            [1, 0, false, false],
            [1, 1, true, false],
            [4, 0, true, false],
            [5, 0, true, true]
          ])
          const vs = Option.getOrThrow(yield* store.traversal!.visitState(pid))
          assert.deepStrictEqual([vs.pending, vs.cursor, vs.counters, vs.handoffs, vs.ledger, vs.payloads, vs.version], [
            null,
            4,
            [1, 2, 2, 0],
            1,
            2,
            2,
            5
          ])
          const ledger = yield* store.traversal!.handoffs({ pipelineId: pid })
          assert.deepStrictEqual(ledger.map((h) => [h.operation, h.fromSeq, h.toSeq]), [["rewind", 2, 1], ["end", 2, null]])
        }
      }).pipe(Effect.provide(SqliteStore.layer({ filename: file })))
      // a second run finds both finished
      const again = yield* Runner.run(specs).pipe(Effect.provide(sqlite()))
      assert.strictEqual(again.skipped, 2)
    }))

  it.effect("exactly one final artifact: an end's payload, the last task's output, and after retrySucceeded in the same store", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const file = path.join(dir, "finals.db")
      const gen = Task.sync("gen", (n: number) => n)
      // odd seeds end at the judge with a payload, even ones go on to the report
      const judge = Task.sync("judge", (n: number) => n % 2 === 1 ? Handoff.end({ n }) : n)
      const report = Task.sync("report", (n: number) => n * 100)
      const template = Pipeline.fromTasks("finals", [gen, judge, report], { control: { edges: { judge: ["end"] } } })
      const [odd, even] = [template.bind(1), template.bind(2)]
      const finals = (pid: string) =>
        Effect.map(
          Effect.flatMap(Store, (s) => s.listArtifacts(pid as never)),
          (as) => as.filter((x) => x.isFinal).map((x) => [x.seq, x.visit])
        )
      yield* Effect.gen(function*() {
        // new pipelines: the end payload (seq 3, the first payload) or the report's output
        yield* Runner.run([odd, even])
        assert.deepStrictEqual(yield* finals(odd.pipelineId), [[3, 0]])
        assert.deepStrictEqual(yield* finals(even.pipelineId), [[2, 0]])
        // a restart in the same store: the new final replaces the old one
        yield* Runner.run([odd, even], { retrySucceeded: true })
        assert.deepStrictEqual(yield* finals(odd.pipelineId), [[4, 0]])
        assert.deepStrictEqual(yield* finals(even.pipelineId), [[2, 1]])
      }).pipe(Effect.provide(
        Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([])))
      ))
    }))

  it.effect("a rewind, a failure at the revisit, and a resume in a second process-like open continue the visit", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const file = path.join(dir, "control.db")
      let broken = true
      const inputs: Array<[unknown, number, number]> = []
      const gen = Task.sync("gen", (n: number, ctx) => n * 10 + ctx.visit)
      const fragile = Task.make("fragile", (n: unknown, ctx) =>
        Effect.suspend(() => {
          inputs.push([n, ctx.visit, ctx.attempt])
          return broken && ctx.visit === 1 ? Effect.fail(new FatalError({ message: "broken" })) : Effect.succeed(n)
        }))
      const judge = Task.sync("judge", (n: unknown, ctx) =>
        ctx.visit === 0 ? Handoff.rewind("fragile", { again: true }, { reason: "retry" }) : n)
      const template = Pipeline.fromTasks("sqlite-control", [gen, fragile, judge], {
        control: { rewind: { judge: ["fragile"] }, maxHandoffs: 3 }
      })
      const spec = template.bind(1)
      const pid = spec.pipelineId
      // each run opens the file afresh: nothing survives but what was committed
      const sqlite = () =>
        Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([])))
      const first = yield* Runner.run([spec]).pipe(Effect.provide(sqlite()))
      assert.strictEqual(first.stats.byState.failed, 1)
      assert.strictEqual(first.handoffsTotal, 1)
      broken = false
      const second = yield* Effect.gen(function*() {
        const report = yield* Runner.run([spec])
        const vs = Option.getOrThrow(yield* (yield* traversalOf).visitState(pid))
        const rows = yield* ledger(pid)
        const payload = yield* decodeAt(`${pid}:3`)
        const tasks = (yield* tasksOf(pid)).sort((x, y) => x.visit - y.visit || x.seq - y.seq)
        return { report, vs, rows, payload, tasks }
      }).pipe(Effect.provide(sqlite()))
      assert.strictEqual(second.report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(inputs, [[10, 0, 1], [{ again: true }, 1, 1], [{ again: true }, 1, 2]])
      assert.strictEqual(second.vs.handoffs, 1)
      assert.deepStrictEqual(second.vs.counters, [1, 2, 2])
      assert.strictEqual(second.rows.length, 1)
      assert.deepStrictEqual(second.payload, { again: true })
      assert.deepStrictEqual(
        second.tasks.filter((t) => t.state !== "failed").map((t) => [t.seq, t.visit, t.state]),
        [[0, 0, "succeeded"], [1, 0, "succeeded"], [2, 0, "handed_off"], [1, 1, "succeeded"], [2, 1, "succeeded"]]
      )
      fs.rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("Runner with control: handoff payloads use every task's codecs (tester13h finding 1)", () => {
  class Draft extends HistoryArtifact.Class<Draft>("test/HandoffDraft") {}
  /** generate declares Draft as its output; validate rewinds to it with a new Draft once. */
  const draftPipeline = (declare: boolean, hang?: { readonly on: boolean; readonly started: Deferred.Deferred<void> }) => {
    const seen: Array<[number, unknown]> = []
    const generate = Task.make("generate", declare ? { output: Draft } : {}, (input: unknown, ctx) =>
      Effect.suspend(() => {
        const d = input instanceof Draft ? input : new Draft({ state: { id: input as number, temp: 0 } })
        seen.push([ctx.visit, d.stateObject()])
        if (hang?.on === true && ctx.visit === 1) return Effect.zipRight(Deferred.succeed(hang.started, undefined), Effect.never)
        return Effect.succeed(d.checkpoint(`v${ctx.visit}`))
      }))
    const validate = Task.sync("validate", (d: Draft) =>
      d.stateObject().temp === 1
        ? { final: d.stateObject() }
        : Handoff.rewind("generate", d.withState({ ...d.stateObject(), temp: 1 }), { reason: "cold" }))
    const template = Pipeline.fromTasks("handoff-draft", [generate, validate], {
      control: { rewind: { validate: ["generate"] }, maxHandoffs: 2 }
    })
    return { seen, spec: template.bind(1) }
  }

  it.effect("the generator's output Schema is enough for the validator's rewind payload (no registry given)", () =>
    Effect.gen(function*() {
      const { seen, spec } = draftPipeline(true)
      const outputs: Array<unknown> = []
      const report = yield* Runner.run([spec], {
        onPipelineFinished: (_r, out) => Effect.sync(() => outputs.push(Option.getOrNull(out)))
      })
      assert.strictEqual(report.stats.byState.succeeded, 1, (yield* pipelineRow(spec.pipelineId)).errorMessage ?? "")
      assert.deepStrictEqual(outputs, [{ final: { id: 1, temp: 1 } }])
      assert.deepStrictEqual(seen, [[0, { id: 1, temp: 0 }], [1, { id: 1, temp: 1 }]])
    }).pipe(Effect.provide(env())))

  it.effect("a resume decodes the pending rewind payload with the generator's output Schema", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const hang = { on: true, started }
      const { seen, spec } = draftPipeline(true, hang)
      const runner = yield* Runner.Runner
      // first run: cut off while generate's revisit (entry: validate's payload) runs
      yield* Effect.scoped(Effect.gen(function*() {
        const handle = yield* runner.start([spec])
        const first = yield* Effect.raceFirst(
          Effect.as(Deferred.await(started), "started" as const),
          Effect.as(handle.await, "ended" as const)
        )
        assert.strictEqual(first, "started")
      }))
      hang.on = false
      const report = yield* runner.run([spec])
      assert.strictEqual(report.stats.byState.succeeded, 1, (yield* pipelineRow(spec.pipelineId)).errorMessage ?? "")
      assert.deepStrictEqual(yield* eventsOf(spec.pipelineId, "pipeline.checkpoint_undecodable"), [])
      // the revisit ran again on the decoded payload, not on a replayed seed
      assert.deepStrictEqual(seen.slice(-1), [[1, { id: 1, temp: 1 }]])
    }).pipe(Effect.provide(env())))

  it.effect("when no task declares the payload's class, the failure names the task and says handoff payload", () =>
    Effect.gen(function*() {
      const { spec } = draftPipeline(false)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.failed, 1)
      const attempts = yield* attemptsOf(spec.pipelineId)
      const message = attempts.find((a) => a.errorMessage !== null && a.errorMessage !== undefined)?.errorMessage ?? ""
      assert.include(message, "the output of task generate: Draft has its own codec")
    }).pipe(Effect.provide(env())))

  it.effect("a payload class no task declares: the failure names the source task, the target and says handoff payload", () =>
    Effect.gen(function*() {
      const generate = Task.sync("generate", (n: unknown) => (typeof n === "number" ? { n } : n))
      const validate = Task.sync("validate", (_: unknown, ctx) =>
        ctx.visit === 0 ? Handoff.rewind("generate", new Draft({ state: { n: 1 } })) : "done")
      const spec = Pipeline.fromTasks("handoff-undeclared", [generate, validate], {
        control: { rewind: { validate: ["generate"] }, maxHandoffs: 1 }
      }).bind(1)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.failed, 1)
      const attempts = yield* attemptsOf(spec.pipelineId)
      const message = attempts.find((a) => a.errorMessage !== null && a.errorMessage !== undefined)?.errorMessage ?? ""
      assert.include(message, "the handoff payload task validate sent to generate: Draft has its own codec")
      assert.include(message, "for a handoff payload: of any task of the pipeline")
    }).pipe(Effect.provide(env())))
})

describe("Runner with control: Handoff mistakes from untyped code (tester13h finding 9)", () => {
  it.effect("options with an unknown key (`{ reasn }`) are refused, fatal, naming the key", () =>
    Effect.gen(function*() {
      const a = Task.sync("a", (n: number) => Handoff.to("c", n, { reasn: "typo" } as unknown as Handoff.HandoffOptions))
      const spec = Pipeline.fromTasks("bad-options", [a, plusOne("b", []), plusOne("c", [])], {
        control: { edges: { a: ["c"] } }
      }).bind(1)
      const report = yield* Runner.run([spec])
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.deepStrictEqual(yield* ledger(spec.pipelineId), [])
      const attempts = yield* attemptsOf(spec.pipelineId)
      assert.strictEqual(attempts.length, 1)
      assert.strictEqual(attempts[0]!.errorType, "HandoffRefused")
      assert.include(attempts[0]!.errorMessage!, `with unknown option "reasn": the only option is "reason"`)
    }).pipe(Effect.provide(env())))

  it.effect("a directive inside a returned value: the message says it must be the whole return value", () =>
    Effect.gen(function*() {
      // with control, and in a plain pipeline (the two paths encode outputs apart)
      const nested = Task.sync("a", (n: number) => ({ n, next: [Handoff.to("c")] }))
      const controlled = Pipeline.fromTasks("nested-ctl", [nested, plusOne("b", []), plusOne("c", [])], {
        control: { edges: { a: ["c"] } }
      }).bind(1)
      const plain = Pipeline.fromTasks("nested-plain", [nested, plusOne("b", [])]).bind(1)
      const report = yield* Runner.run([controlled, plain])
      assert.strictEqual(report.stats.byState.failed, 2)
      for (const spec of [controlled, plain]) {
        const attempts = yield* attemptsOf(spec.pipelineId)
        const message = attempts[0]!.errorMessage ?? ""
        assert.include(message, "the output of task a: a Handoff directive (Handoff.to \"c\") was found inside the value, at $.next[0]")
        assert.include(message, "must be the task's whole return value")
      }
    }).pipe(Effect.provide(env())))
})
