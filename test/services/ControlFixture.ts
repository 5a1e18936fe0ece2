/**
 * Test fixture: a real SQLite store written by the runner with control flow. Two pipelines of
 * `gen → validate → report` whose validator rewinds the generator once (with new state), and one
 * three plain pipelines of one task; what report, merge, export and serve read in their control tests.
 * And a second store (`writeBudgetEndStore`) whose two pipelines spend their whole budget
 * (`maxHandoffs: 2`) on two rewinds and then end: 6 transitions, 4 against the budgets, 2 ends.
 */
import { Effect, Layer } from "effect"
import * as Handoff from "../../src/domain/Handoff.js"
import type { PipelineId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"

interface Draft {
  readonly n: number
  readonly hint: string | null
  readonly visit: number
}

const generate = Task.sync("generate", (row: { readonly n: number; readonly hint?: string }, ctx): Draft => ({
  n: row.n,
  hint: row.hint ?? null,
  visit: ctx.visit
}))

const validate = Task.sync("validate", (draft: Draft, ctx) =>
  ctx.visit === 0 ? Handoff.rewind("generate", { n: draft.n, hint: "again" }, { reason: "first draft refused" }) : draft)

const report = Task.sync("report", (draft: Draft) => ({ ...draft, ok: true }))

/** The control template (rewind validate → generate, budget 2). */
export const controlTemplate = Pipeline.fromTasks("gen-check", [generate, validate, report], {
  control: { rewind: { validate: ["generate"] }, maxHandoffs: 2 }
})

/** The plain template (one task, no control). */
export const plainTemplate = Pipeline.fromTasks("plain", [Task.sync("double", (n: number) => n * 2)])

/** What the fixture wrote: the ids of the two control pipelines and of the three plain ones. */
export interface ControlStore {
  readonly control: ReadonlyArray<PipelineId>
  readonly plain: PipelineId
  readonly plains: ReadonlyArray<PipelineId>
}

/**
 * Runs the fixture's three pipelines into the SQLite file `file` (one run) and returns their
 * ids; the store is closed afterwards.
 */
export const writeControlStore = (file: string): Effect.Effect<ControlStore, unknown> =>
  Effect.gen(function*() {
    const specs = [controlTemplate.bind({ n: 1 }), controlTemplate.bind({ n: 2 })]
    const plains = [21, 22, 23].map((n) => plainTemplate.bind(n))
    yield* Runner.run([...specs, ...plains])
    return { control: specs.map((s) => s.pipelineId), plain: plains[0]!.pipelineId, plains: plains.map((s) => s.pipelineId) }
  }).pipe(
    Effect.provide(
      Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]))
      )
    )
  )

const draft = Task.sync("draft", (row: { readonly n: number }, ctx) => ({ n: row.n, visit: ctx.visit }))
/** Sends the draft back twice (the whole budget), then ends the pipeline. */
const judge = Task.sync("judge", (d: { readonly n: number; readonly visit: number }, ctx) =>
  ctx.visit < 2 ? Handoff.rewind("draft", { n: d.n }, { reason: "again" }) : Handoff.end(d, { reason: "good enough" }))
const publish = Task.sync("publish", (d: { readonly n: number }) => d)

/** The budget-end template: draft → judge → publish, judge rewinds twice then ends (budget 2). */
export const budgetEndTemplate = Pipeline.fromTasks("budget-end", [draft, judge, publish], {
  control: { edges: { judge: ["end"] }, rewind: { judge: ["draft"] }, maxHandoffs: 2 }
})

/** The budget-end store's two pipelines (6 transitions: 4 against maxHandoffs, 2 ends). */
export const budgetEndSpecs = [budgetEndTemplate.bind({ n: 1 }), budgetEndTemplate.bind({ n: 2 })]

/**
 * Runs {@link budgetEndSpecs} into the SQLite file `file` (one run) and returns the run's report;
 * the store is closed afterwards.
 */
export const writeBudgetEndStore = (file: string): Effect.Effect<Runner.RunReport, unknown> =>
  Runner.run(budgetEndSpecs).pipe(
    Effect.provide(
      Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]))
      )
    )
  )
