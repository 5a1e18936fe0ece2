/**
 * A task's output Schema without an `identifier` annotation (a `Schema.Struct`, a union of
 * tagged structs): the runner registers it under a type name derived from the task's name and
 * the schema's structure (`Codec.outputTypeName`), so its checkpoints are written and read back
 * (a resume on the same store, by a runner that rebuilt the schema) instead of crashing the
 * worker; a schema whose structure changed since makes the checkpoint unusable (the pipeline
 * restarts from its seed), never a value of the wrong shape.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { derivedTypeName } from "../../src/domain/Codec.js"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"

/** A fresh runner over the SQLite file `file` (each call: a new store connection and runner). */
const envOf = (file: string) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false }),
    Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]), NodeContext.layer)
  )

/** The output Schema, built anew on each call (as another process would build it). */
const answerSchema = () => Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, label: Schema.optional(Schema.String) })

/** `answer` (Struct output) then `check`, which fails while `failing` holds; counts the runs of `answer`. */
const pipelineOf = (schema: Schema.Schema<{ readonly n: number; readonly correct: boolean }, any>, state: { answered: number; failing: boolean }) =>
  Pipeline.make(
    "answers",
    Task.sync("answer", { output: schema }, (n: number) => {
      state.answered++
      return { n, correct: n % 2 === 0 }
    }),
    Task.sync("check", (a: { readonly n: number; readonly correct: boolean }) => {
      if (state.failing) throw new FatalError({ message: "not yet" })
      // the value read back from the checkpoint has the shape the schema gives it
      if (typeof a.n !== "number" || typeof a.correct !== "boolean") throw new FatalError({ message: `bad shape ${JSON.stringify(a)}` })
      return a.correct
    })
  )

const tempFile = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-outschema-")), "s.db")

describe("Runner: an output Schema without an identifier", () => {
  it.effect("runs, records the derived type name, and a resume by a new runner reads the checkpoints back", () => {
    const file = tempFile()
    const state = { answered: 0, failing: true }
    const seeds = [1, 2, 3, 4]
    return Effect.gen(function*() {
      const first = yield* Runner.run(pipelineOf(answerSchema(), state).map(seeds)).pipe(Effect.provide(envOf(file)))
      // the worker did not crash: every pipeline ran its first task and failed at the second
      assert.strictEqual(first.stats.byState.failed, 4)
      assert.strictEqual(state.answered, 4)
      const stored = yield* Effect.gen(function*() {
        const store = yield* Store
        return yield* store.getArtifact(pipelineOf(answerSchema(), state).bind(1).pipelineId, 0)
      }).pipe(Effect.provide(envOf(file)))
      const artifact = Option.getOrThrow(stored).artifact
      assert.strictEqual(artifact.codec, "schema")
      assert.strictEqual(artifact.typeName, derivedTypeName("answer", answerSchema()))
      // a new runner, a newly built schema of the same structure: the checkpoints decode
      state.failing = false
      const second = yield* Runner.run(pipelineOf(answerSchema(), state).map(seeds), { resume: true }).pipe(
        Effect.provide(envOf(file))
      )
      assert.strictEqual(second.stats.byState.succeeded, 4)
      assert.strictEqual(state.answered, 4, "no `answer` ran again: its checkpoints were read back")
      const unusable = yield* Effect.flatMap(Store, (s) => s.events({ kind: "pipeline.checkpoint_unusable" })).pipe(
        Effect.provide(envOf(file))
      )
      assert.deepStrictEqual(unusable, [])
    })
  })

  it.effect("a resume whose schema's structure changed restarts from the seed (checkpoint unusable), not a wrong value", () => {
    const file = tempFile()
    const state = { answered: 0, failing: true }
    return Effect.gen(function*() {
      yield* Runner.run(pipelineOf(answerSchema(), state).map([1, 2])).pipe(Effect.provide(envOf(file)))
      assert.strictEqual(state.answered, 2)
      state.failing = false
      const changed = Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, score: Schema.optional(Schema.Number) })
      const second = yield* Runner.run(pipelineOf(changed, state).map([1, 2]), { resume: true }).pipe(Effect.provide(envOf(file)))
      assert.strictEqual(second.stats.byState.succeeded, 2)
      assert.strictEqual(state.answered, 4, "`answer` ran again under the changed schema")
      const unusable = yield* Effect.flatMap(Store, (s) => s.events({ kind: "pipeline.checkpoint_unusable" })).pipe(
        Effect.provide(envOf(file))
      )
      assert.strictEqual(unusable.length, 2)
      assert.include(JSON.stringify(unusable[0]!.data), "earlier structure of task answer's output Schema")
    })
  })

  it.effect("a union of tagged structs (no identifier) as output: encoded and decoded with the schema", () =>
    Effect.gen(function*() {
      const Out = Schema.Union(
        Schema.TaggedStruct("Hit", { at: Schema.NumberFromString }),
        Schema.TaggedStruct("Miss", { reason: Schema.String })
      )
      const seen: Array<unknown> = []
      const template = Pipeline.make(
        "tagged",
        Task.sync("find", { output: Out }, (n: number) => n > 1 ? { _tag: "Hit" as const, at: n } : { _tag: "Miss" as const, reason: "small" }),
        Task.sync("keep", (v: typeof Out.Type) => {
          seen.push(v)
          return v._tag
        })
      )
      const r = yield* Runner.run(template.map([1, 2])).pipe(Effect.provide(envOf(tempFile())))
      assert.strictEqual(r.stats.byState.succeeded, 2)
      assert.sameDeepMembers(seen, [{ _tag: "Miss", reason: "small" }, { _tag: "Hit", at: 2 }])
    }))
})
