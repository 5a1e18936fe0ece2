/**
 * `assay study export FILE --summary [--out PATH] [--include-content]`: a redacted JSON summary
 * of a study's comparison, to share or archive without its data.
 *
 * The summary ({@link StudySummary}) holds the study (id, question, hypothesis, type), the
 * protocol version compared with its digest and per-part digests, the variables, the metrics,
 * the objectives, the analysis settings, every variant's values with their intervals, its paired
 * differences against the baseline, its Pareto membership, rank and constraint breaches, the
 * trials behind it, and the conclusion (status, wording, candidates, limitations). It never
 * holds a prompt, an output or a case: a `prompt` variable's values are listed by name and
 * digest (the first 32 hex characters of the text's BLAKE3 digest, `Json.digest`), and case
 * keys and pipeline ids are left out. With `--include-content` the prompts' texts are added to
 * their variables and `content.cases` lists, for each variant and case-level metric, the worst
 * and best cases (5 each) with every stored output of their pipelines.
 *
 * The summary is printed on stdout, or written to `--out PATH` (created with its folders;
 * replaced when it exists). Nothing is applied anywhere: it is a document.
 *
 * Exit codes: 0; 2 for an invalid study file or flag (`--summary` is required: it is the only
 * kind of export), a study that never ran in its output root, an unknown version; 1 when the root
 * cannot be read or the file cannot be written.
 *
 * @since 0.7.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import * as nodePath from "node:path"
import { Console, Effect, Option } from "effect"
import * as StudyConfig from "../config/Study.js"
import { ConfigError } from "../domain/Errors.js"
import type { PipelineId } from "../domain/Ids.js"
import { digest, type Json } from "../domain/Json.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import { decodePayload } from "../services/internal/export.js"
import * as StudyCompare from "../services/StudyCompare.js"
import { StudyCatalog } from "../services/StudyCatalog.js"
import { SuiteCatalog } from "../services/SuiteCatalog.js"
import { frozenInputOf } from "./StudyReport.js"

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * The summary's format marker.
 *
 * @since 0.7.0
 * @category constants
 */
export const SUMMARY_FORMAT = "assay.study-summary/v1"

/**
 * A variable as the summary shows it: `values` as in the study file, except for a `prompt`
 * variable, whose values are `{ name, digest }` (and `text` only with `--include-content`).
 *
 * @since 0.7.0
 * @category models
 */
export interface SummaryVariable {
  readonly name: string
  readonly type: string
  readonly values: Json
}

/**
 * A worst or best case of a variant on a case-level metric, with its pipelines' stored outputs
 * (only with `--include-content`): `outputs` are the decoded active task outputs of each
 * pipeline, in task order.
 *
 * @since 0.7.0
 * @category models
 */
export interface SummaryCase {
  readonly variantId: string
  readonly metric: string
  readonly which: "worst" | "best"
  readonly caseKey: string
  readonly value: number
  readonly pipelines: ReadonlyArray<{ readonly pipelineId: string; readonly outputs: ReadonlyArray<unknown> }>
}

/**
 * The redacted summary `assay study export --summary` writes (see the module docs). Values,
 * intervals and paired differences are those of `StudyCompare.StudyComparison` (same names,
 * same meaning); `content` is present only with `--include-content`.
 *
 * @since 0.7.0
 * @category models
 */
export interface StudySummary {
  readonly format: typeof SUMMARY_FORMAT
  readonly study: { readonly id: string; readonly question: string; readonly hypothesis: string | null; readonly type: string }
  readonly protocol: { readonly version: number; readonly digest: string; readonly parts: Readonly<Record<string, string>> }
  readonly baseline: string
  readonly variables: ReadonlyArray<SummaryVariable>
  readonly metrics: StudyCompare.StudyComparison["metrics"]
  readonly objectives: StudyCompare.StudyComparison["objectives"]
  readonly analysis: { readonly seed: number; readonly level: number; readonly resamples: number; readonly minPairedCases: number; readonly minRepeats: number }
  readonly run: { readonly status: string | null; readonly stopReason: string | null; readonly trialsByStatus: Readonly<Record<string, number>> }
  readonly variants: ReadonlyArray<{
    readonly variantId: string
    readonly assignment: Readonly<Record<string, Json>>
    readonly isBaseline: boolean
    readonly trials: ReadonlyArray<{ readonly trialId: string; readonly repeat: number; readonly status: string; readonly compared: boolean }>
    readonly values: StudyCompare.VariantComparison["values"]
    readonly vsBaseline: StudyCompare.VariantComparison["vsBaseline"]
    readonly pareto: StudyCompare.VariantComparison["pareto"]
    readonly rank: number | null
    readonly breaches: ReadonlyArray<string>
  }>
  readonly weightedRanking: StudyCompare.StudyComparison["weightedRanking"]
  readonly conclusion: StudyCompare.StudyComparison["conclusion"]
  readonly content?: { readonly cases: ReadonlyArray<SummaryCase> }
}

/**
 * The summary's variables from a protocol's stored variables: prompt texts replaced by their
 * names and digests, kept beside them when `includeContent`.
 *
 * @param variables the protocol version's `variables` (as stored by `study run`)
 * @param includeContent whether the prompts' texts stay
 * @returns one {@link SummaryVariable} per variable, in order
 * @since 0.7.0
 * @category redaction
 */
export const redactVariables = (variables: ReadonlyArray<Json>, includeContent: boolean): ReadonlyArray<SummaryVariable> =>
  variables.map((raw) => {
    const v = raw as { readonly name: string; readonly type: string; readonly values?: Json } & Record<string, Json>
    const { name, type, ...rest } = v
    if (type !== "prompt") return { name, type, values: (rest.values ?? rest) as Json }
    const values = (v.values ?? {}) as Record<string, string>
    return {
      name,
      type,
      values: Object.entries(values).map(([n, text]) => includeContent ? { name: n, digest: digest(text), text } : { name: n, digest: digest(text) })
    }
  })

/**
 * Builds the summary from a comparison and its protocol version (pure; see the module docs).
 *
 * @param c the comparison (`StudyCompare.compare`)
 * @param protocol the compared version's number, digest, per-part digests and stored variables
 * @param study the study's type
 * @param content the worst and best cases, only with `--include-content`
 * @returns the {@link StudySummary}
 * @since 0.7.0
 * @category redaction
 */
export const summaryOf = (
  c: StudyCompare.StudyComparison,
  protocol: { readonly version: number; readonly digest: string; readonly parts: Readonly<Record<string, string>>; readonly variables: ReadonlyArray<Json> },
  study: { readonly type: string },
  content: ReadonlyArray<SummaryCase> | undefined
): StudySummary => ({
  format: SUMMARY_FORMAT,
  study: { id: c.studyId, question: c.question, hypothesis: c.hypothesis, type: study.type },
  protocol: { version: protocol.version, digest: protocol.digest, parts: protocol.parts },
  baseline: c.baseline,
  variables: redactVariables(protocol.variables, content !== undefined),
  metrics: c.metrics,
  objectives: c.objectives,
  analysis: { seed: c.seed, level: c.level, resamples: c.resamples, minPairedCases: c.minPairedCases, minRepeats: c.minRepeats },
  run: { status: c.run.status, stopReason: c.run.stopReason, trialsByStatus: c.run.trialsByStatus },
  variants: c.variants.map((v) => ({
    variantId: v.variantId,
    assignment: v.assignment,
    isBaseline: v.isBaseline,
    trials: v.trials.map((t) => ({ trialId: t.trialId, repeat: t.repeat, status: t.status, compared: t.compared })),
    values: v.values,
    vsBaseline: v.vsBaseline,
    pareto: v.pareto,
    rank: v.rank,
    breaches: v.breaches
  })),
  weightedRanking: c.weightedRanking,
  conclusion: c.conclusion,
  ...(content === undefined ? {} : { content: { cases: content } })
})

/** The worst and best cases of every variant on every case-level metric, with their outputs. */
const casesOf = (c: StudyCompare.StudyComparison) =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const store = yield* catalog.view()
    const caseLevel = new Set(c.metrics.filter((m) => m.level === "case").map((m) => m.name))
    const out: Array<SummaryCase> = []
    for (const v of c.variants) {
      for (const [metric, e] of Object.entries(v.evidence)) {
        if (!caseLevel.has(metric)) continue
        for (const [which, list] of [["worst", e.worstCases], ["best", e.bestCases]] as const) {
          for (const w of list) {
            const bundles = yield* store.loadBundles(w.pipelineIds as ReadonlyArray<PipelineId>, { payloads: "all", artifacts: "all", tasks: false })
            out.push({
              variantId: v.variantId,
              metric,
              which,
              caseKey: w.caseKey,
              value: w.value,
              pipelines: w.pipelineIds.map((id) => ({
                pipelineId: id,
                outputs: (bundles.get(id as PipelineId)?.artifacts ?? [])
                  .filter((a) => a.artifact.active && a.artifact.seq >= 0)
                  .map((a) => decodePayload(a.artifact, a.payload))
              }))
            })
          }
        }
      }
    }
    return out
  })

/**
 * `assay study export FILE --summary` (see the module docs).
 *
 * @since 0.7.0
 * @category commands
 */
export const exportSummary = (args: {
  readonly file: string
  readonly summary: boolean
  readonly out: Option.Option<string>
  readonly includeContent: boolean
  readonly outputRoot: Option.Option<string>
  readonly version: Option.Option<number>
  readonly seed: Option.Option<number>
}): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    if (!args.summary) return yield* configError("--summary", "assay study export writes the redacted summary only: pass --summary")
    const loaded = yield* StudyConfig.load(args.file, {
      allowOverCap: true,
      scanKeys: "none", // store-only: the data set is never read (it may have moved)
      ...(Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {})
    })
    const root = loaded.outputRoot
    if (!(yield* SuiteStore.isSuiteRoot(root))) {
      return yield* configError("study.id", `study "${loaded.id}" has never run in ${root}: nothing to export (run assay study run first)`)
    }
    const h = yield* SuiteStore.makeRead(root)
    if (h.catalog.suiteId !== loaded.id) {
      return yield* configError("study.id", `the output root ${root} belongs to "${h.catalog.suiteId}", not study "${loaded.id}"`)
    }
    const summary = yield* Effect.gen(function*() {
      const c = yield* StudyCompare.compare(
        yield* frozenInputOf(loaded, Option.getOrUndefined(args.version)),
        { version: Option.getOrUndefined(args.version), seed: Option.getOrUndefined(args.seed) }
      )
      const versions = yield* (yield* StudyCatalog).versions(loaded.id)
      const row = versions.find((v) => v.version === c.version)!
      const stored = row.protocol as { readonly variables?: ReadonlyArray<Json> }
      const content = args.includeContent ? yield* casesOf(c) : undefined
      return summaryOf(
        c,
        { version: row.version, digest: row.protocolDigest, parts: row.protocolParts, variables: stored.variables ?? [] },
        { type: loaded.type },
        content
      )
    }).pipe(Effect.provideService(StudyCatalog, h.study), Effect.provideService(SuiteCatalog, h.catalog))
    const text = JSON.stringify(summary, null, 2) + "\n"
    if (Option.isNone(args.out)) return yield* Console.log(text.trimEnd())
    const fs = yield* FileSystem.FileSystem
    const path = nodePath.resolve(args.out.value)
    yield* fs.makeDirectory(nodePath.dirname(path), { recursive: true })
    yield* fs.writeFileString(path, text)
    yield* Console.error(`wrote ${path}${args.includeContent ? " (with content: prompts and the worst and best cases' outputs)" : " (redacted: no prompts, outputs or cases)"}`)
  }))

const file = Args.file({ name: "FILE", exists: "either" }).pipe(Args.withDescription("The study file (YAML, JSON, TOML or TypeScript)."))

/**
 * The subcommand `export` of `assay study`.
 *
 * @since 0.7.0
 * @category commands
 */
export const subcommands = [
  Command.make("export", {
    file,
    summary: Options.boolean("summary").pipe(Options.withDescription("Write the redacted JSON summary (required).")),
    out: Options.text("out").pipe(Options.withDescription("Write to PATH instead of stdout."), Options.optional),
    includeContent: Options.boolean("include-content").pipe(
      Options.withDescription("Also include the prompts' texts and the worst and best cases' stored outputs.")
    ),
    outputRoot: Options.text("output-root").pipe(
      Options.withDescription("The study's output root, relative to the working directory (overrides output.root)."),
      Options.optional
    ),
    version: Options.integer("protocol-version").pipe(Options.withDescription("The protocol version (default: the current one)."), Options.optional),
    seed: Options.integer("seed").pipe(Options.withDescription("The bootstrap seed (default: analysis.seed of the study, else 1)."), Options.optional)
  }, (o) => exportSummary(o)).pipe(
    Command.withDescription("Write a redacted JSON summary of the study's comparison (no prompts, outputs or cases unless --include-content).")
  )
] as const
