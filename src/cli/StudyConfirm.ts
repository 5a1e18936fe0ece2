/**
 * `assay study confirm FILE VARIANT --repeats N`: runs N confirmation trials of one variant
 * under the study's current protocol version, and they count in the report.
 *
 * The confirmation trials continue the variant's repeat numbering: with `repeats: 3` and no
 * earlier confirmation, `confirm FILE v04 --repeats 2` runs `p1-v04-r4` and `p1-v04-r5`; a
 * second confirmation continues at `r6`. They are ordinary trials of the version (registered in
 * the study tables, isolated, settled like every trial), and `assay study report` compares every
 * succeeded trial of the version, so the variant's values, intervals and paired differences use
 * its confirmation repeats too (the other variants keep theirs; pairing is per repeat number, so
 * a repeat only the confirmed variant has is paired with nothing).
 *
 * The study file's protocol must be the current version's (the digest is compared): a
 * confirmation never starts a version and never mixes versions. Nothing is chosen or applied:
 * the report says what the new evidence shows.
 *
 * Exit codes: as `assay study run --trial` (0 when every confirmation trial succeeded; 1 when one
 * did not, saying so on stderr (`0 of 2 confirmation trials succeeded (p1-v06-r3 failed, ...):
 * exit 1`), or the store failed; 130 when interrupted); 2 for an invalid study file or flag, an
 * unknown variant, `--repeats` below 1, a study that never ran, a changed protocol.
 *
 * On the cluster engine (`--engine cluster --database URL`, a study root the cluster engine
 * ran): the confirmation trials are recorded in the cluster's database and the study's runners
 * serve them (a runner started before reads the record when it is asked for a pipeline it does
 * not know); docs/scale-out.md "Studies on the cluster engine".
 *
 * A later `assay study resume` or `run` of the version counts the confirmation trials as its
 * trials (`StudyRun.registeredTrials`: its tally is the report's) and resumes one that was
 * interrupted; `confirm` itself always adds new repeats.
 *
 * @since 0.7.0
 */
import * as Words from "../domain/internal/words.js"
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type * as FileSystem from "@effect/platform/FileSystem"
import * as nodePath from "node:path"
import { Effect, Option } from "effect"
import * as StudyConfig from "../config/Study.js"
import { ConfigError } from "../domain/Errors.js"
import * as DomainStudy from "../domain/Study.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import { changedParts, inWords } from "../services/StudyCatalog.js"
import * as StudyRun from "./StudyRun.js"

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * The confirmation trials to add: for `variant`, `count` repeats after the highest repeat the
 * version has for it (at least the declared `repeats`). Pure.
 *
 * @param declared the study's `repeats`
 * @param registered the (variant id, repeat) of every trial registered for the version
 * @param variant the confirmed variant's id
 * @param count how many trials to add (>= 1)
 * @returns the new repeat numbers, ascending
 * @since 0.7.0
 * @category confirmation
 */
export const nextRepeats = (
  declared: number,
  registered: ReadonlyArray<{ readonly variantId: string; readonly repeat: number }>,
  variant: string,
  count: number
): ReadonlyArray<number> => {
  const top = Math.max(declared, ...registered.filter((r) => r.variantId === variant).map((r) => r.repeat))
  return Array.from({ length: count }, (_, i) => top + 1 + i)
}

/**
 * `assay study confirm FILE VARIANT --repeats N` (see the module docs).
 *
 * @since 0.7.0
 * @category commands
 */
export const confirm = (args: {
  readonly file: string
  readonly variant: string
  readonly repeats: number
  readonly outputRoot: Option.Option<string>
  readonly json: boolean
  readonly quiet: boolean
  /** `--engine cluster` (since 0.15.0; default `local`): the confirmation trials run on `assay runner -c FILE` processes. */
  readonly engine?: "local" | "cluster" | undefined
  /** `--database URL` (with `--engine cluster` only). */
  readonly database?: Option.Option<string> | undefined
  /** `--max-admitted N` (with `--engine cluster` only). */
  readonly maxAdmitted?: Option.Option<number> | undefined
}): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    if (!Number.isSafeInteger(args.repeats) || args.repeats < 1) return yield* configError("--repeats", `must be an integer >= 1, got ${args.repeats}`)
    const rootOption = Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {}
    const base = yield* StudyConfig.load(args.file, rootOption)
    if (!base.variants.some((v) => v.id === args.variant)) {
      return yield* configError(
        "VARIANT",
        `unknown variant "${args.variant}" (the study's ${Words.labelled("variant", base.variants.map((v) => v.id))})`
      )
    }
    const registered = yield* Effect.scoped(Effect.gen(function*() {
      if (!(yield* SuiteStore.isSuiteRoot(base.outputRoot))) {
        return yield* configError("study.id", `study "${base.id}" has never run in ${base.outputRoot}: run it before confirming a variant`)
      }
      const h = yield* SuiteStore.makeRead(base.outputRoot)
      const row = yield* h.study.study(base.id)
      if (Option.isNone(row)) return yield* configError("study.id", `study "${base.id}" has never run in ${base.outputRoot}`)
      const version = row.value.currentVersion
      const frozen = (yield* h.study.versions(base.id)).find((v) => v.version === version)!
      if (!DomainStudy.protocolMatches(frozen.protocolDigest, base)) {
        // say what differs, in words (the code files by name, the objectives), not two digests
        const parts = inWords(changedParts(frozen.protocolParts, DomainStudy.comparableParts(frozen.protocolParts, base)), frozen.protocol, base.describe())
        return yield* configError(
          "protocol",
          `the study file's protocol is not the current version's (version ${version}): ${parts.length > 0 ? `changed ${parts.join(", ")}` : "its digest differs"}; ` +
            `a confirmation runs under the same protocol version: undo those changes in the file (or its code files) to confirm under version ${version}, ` +
            `or run the changed study with --new-version (its trials are never compared with version ${version}'s)`
        )
      }
      return { version, trials: (yield* h.study.trials(base.id, version)).map((t) => ({ variantId: t.variantId, repeat: t.repeat })) }
    }))
    const added = nextRepeats(base.repeats, registered.trials, args.variant, args.repeats)
    const extraTrials = [
      ...registered.trials.filter((t) => t.repeat > base.repeats),
      ...added.map((repeat) => ({ variantId: args.variant, repeat }))
    ]
    const trials = added.map((r) => `p${registered.version}-${args.variant}-r${r}`)
    yield* StudyRun.runStudy(
      { load: (file, options) => StudyConfig.load(file, { ...options, extraTrials }) },
      {
        file: args.file,
        resume: true,
        newVersion: false,
        outputRoot: args.outputRoot,
        trials,
        strictEnv: false,
        json: args.json,
        quiet: args.quiet,
        namedWhat: "confirmation trial",
        ...(args.engine === undefined ? {} : { engine: args.engine }),
        ...(args.database === undefined ? {} : { database: args.database }),
        ...(args.maxAdmitted === undefined ? {} : { maxAdmitted: args.maxAdmitted })
      }
    )
  })

/**
 * The subcommand `confirm` of `assay study`.
 *
 * @since 0.7.0
 * @category commands
 */
export const subcommands = [
  Command.make("confirm", {
    file: Args.file({ name: "FILE", exists: "either" }).pipe(Args.withDescription("The study file (YAML, JSON, TOML or TypeScript).")),
    variant: Args.text({ name: "VARIANT" }).pipe(Args.withDescription("The variant to confirm, e.g. v04.")),
    repeats: Options.integer("repeats").pipe(Options.withDescription("How many confirmation trials to run (>= 1).")),
    outputRoot: Options.text("output-root").pipe(
      Options.withDescription("The study's output root, relative to the working directory (overrides output.root)."),
      Options.optional
    ),
    json: Options.boolean("json").pipe(Options.withDescription("Print one JSON object.")),
    quiet: Options.boolean("quiet").pipe(Options.withAlias("q"), Options.withDescription("Print no plan or progress lines.")),
    ...StudyRun.clusterFlags
  }, (o) => confirm(o)).pipe(
    Command.withDescription("Run N confirmation trials of a variant under the current protocol version (repeats continue; they count in the report).")
  )
] as const
