/**
 * Writes the seed file of the spam evaluation's config (`experiment.yaml`): a stratified,
 * seeded sample of the SpamAssassin corpus as JSON Lines, one {@link EmailSeed} per line
 * (`{ id, group, label, file }`, `file` relative to the corpus package's `data/` folder).
 *
 * Run: `npx tsx examples/spam-eval/sample.ts [--size 1000] [--seed 0] [--out FILE]` (default
 * `runs/spam-eval/sample.jsonl` at the repository root, from any working directory).
 * The same size and seed always give the same file (so the same pipeline ids: a second run
 * resumes the first).
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Console, Effect, Option, Schema } from "effect"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { corpusDirectory, loadIndex, sampleStratified } from "./corpus.js"
import { seedOf } from "./pipeline.js"

/**
 * The default sample file: `runs/spam-eval/sample.jsonl` at the repository root (where
 * `experiment.yaml` reads it when `SPAM_EVAL_SAMPLE_FILE` is not set).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultSamplePath: string = NodePath.resolve(
  NodePath.dirname(fileURLToPath(import.meta.url)),
  "../../runs/spam-eval/sample.jsonl"
)

/**
 * Options of {@link writeSample}: sample `size` (default 1,000; the corpus has 6,046 emails),
 * `seed` (default 0) and the output file `out` (default {@link defaultSamplePath}; a relative
 * `out` is resolved against the working directory).
 *
 * @since 0.1.0
 * @category models
 */
export interface WriteSampleOptions {
  readonly size?: number | undefined
  readonly seed?: number | undefined
  readonly out?: string | undefined
}

/**
 * What {@link writeSample} wrote: the absolute path, the number of emails and how many of
 * each gold label.
 *
 * @since 0.1.0
 * @category models
 */
export interface SampleSummary {
  readonly path: string
  readonly emails: number
  readonly spam: number
  readonly ham: number
}

/**
 * Writes the sample file (creating its directory; written to a temp file and renamed, so a
 * reader never sees half a file). Fails with the corpus' `CorpusError` or a `PlatformError`.
 *
 * @since 0.1.0
 * @category program
 */
export const writeSample = (options: WriteSampleOptions = {}) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const out = NodePath.resolve(options.out ?? defaultSamplePath)
    const dataDir = yield* corpusDirectory
    const entries = sampleStratified(yield* loadIndex, { size: options.size ?? 1000, seed: options.seed ?? 0 })
    const seeds = entries.map((e) => seedOf(e, dataDir))
    yield* fs.makeDirectory(NodePath.dirname(out), { recursive: true })
    const tmp = `${out}.tmp-${process.pid}`
    yield* fs.writeFileString(tmp, seeds.map((s) => JSON.stringify(s)).join("\n") + (seeds.length > 0 ? "\n" : ""))
    yield* fs.rename(tmp, out)
    const spam = seeds.filter((s) => s.label === "spam").length
    return { path: out, emails: seeds.length, spam, ham: seeds.length - spam } satisfies SampleSummary
  })

const size = Options.integer("size").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.between(0, 6046))),
  Options.withDefault(1000),
  Options.withDescription("Number of emails (stratified by corpus folder; the corpus has 6,046).")
)
const seed = Options.integer("seed").pipe(Options.withDefault(0), Options.withDescription("Seed of the sample."))
const out = Options.file("out").pipe(
  Options.optional,
  Options.withDescription("Output JSON Lines file (default: runs/spam-eval/sample.jsonl at the repository root).")
)

const command = Command.make("sample", { size, seed, out }, (o) =>
  Effect.flatMap(
    writeSample({ size: o.size, seed: o.seed, out: Option.getOrUndefined(o.out) }),
    (s) => Console.log(`wrote ${s.emails} emails (${s.spam} spam, ${s.ham} ham) to ${s.path}`)
  ))

if (process.argv[1] !== undefined && import.meta.url === `file://${NodePath.resolve(process.argv[1])}`) {
  Command.run(command, { name: "spam-eval sample", version: "0.1.0" })(process.argv).pipe(
    Effect.provide(NodeContext.layer),
    NodeRuntime.runMain
  )
}
