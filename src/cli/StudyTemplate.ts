/**
 * `assay study template FILE --out PATH [--protocol-version N]`: writes a frozen protocol
 * version of a study as a reusable study file.
 *
 * The written file (YAML, or JSON when PATH ends in `.json`) has the version's study fields
 * (id, question, hypothesis, type), its variables, baseline, repeats, budgets, stop conditions,
 * objectives and declared metrics as the version froze them, the study's `limits`, `analysis`
 * and `run` (the run settings of FILE, such as `concurrency`, with the version's
 * `trialConcurrency`), `protocol.experiment` pointing at the base experiment file of
 * FILE (relative to PATH's folder) and `output.root` at the study's output root (relative too). Every
 * `$` of a string is written `$$`, so that the file's `${VAR}` expansion gives back exactly the
 * frozen text. Durations are written in milliseconds (`"600000 millis"`).
 *
 * Before anything is written, the file is loaded back (from a temporary file beside PATH) and
 * its protocol digest compared with the version's: only the same digest is kept, so loading the
 * template gives the same protocol version. The template references the base experiment file
 * instead of copying it (its tasks' relative paths must keep working): when that file changed
 * since the version froze, the digests differ and the command exits 1 naming the parts that
 * changed, writing nothing. Nothing is ever run or applied.
 *
 * Exit codes: 0; 2 for an invalid study file or flag, a study that never ran, an unknown
 * version; 1 when the root cannot be read, the protocol cannot be reproduced, or the file
 * cannot be written.
 *
 * @since 0.7.0
 */
import * as Words from "../domain/internal/words.js"
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import * as nodePath from "node:path"
import { Console, Data, Effect, Option } from "effect"
import * as YAML from "yaml"
import * as StudyConfig from "../config/Study.js"
import { ConfigError } from "../domain/Errors.js"
import * as DomainStudy from "../domain/Study.js"
import type { Json } from "../domain/Json.js"
import * as SuiteStore from "../layers/SuiteStore.js"

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * The template could not reproduce the version's protocol (exit 1): `changed` lists the parts
 * whose digests differ (usually `experiment`: the base experiment file changed since).
 *
 * @since 0.7.0
 * @category errors
 */
export class TemplateMismatch extends Data.TaggedError("TemplateMismatch")<{
  readonly version: number
  readonly changed: ReadonlyArray<string>
}> {
  override get message(): string {
    return `template: the file would not reproduce protocol version ${this.version} (changed: ${this.changed.join(", ")}); ` +
      `the template references the base experiment file, which must be as it was when the version froze; nothing written`
  }
}

/** A stored Duration (`{ _id: "Duration", ... }` once JSON) as a duration string. */
const durationOf = (u: Record<string, unknown>): string | undefined => {
  if (u["_id"] !== "Duration") return undefined
  if (u["_tag"] === "Millis" && typeof u["millis"] === "number") return `${u["millis"]} millis`
  if (u["_tag"] === "Nanos" && typeof u["hrtime"] === "string") return `${u["hrtime"]} nanos`
  return "infinity"
}

/**
 * A stored protocol value as study-file text: `$` doubled in every string, durations as
 * strings, object keys kept in order.
 *
 * @param u a JSON value of a stored protocol
 * @returns the value to write
 * @since 0.7.0
 * @category templates
 */
export const fileValue = (u: Json): Json => {
  if (typeof u === "string") return u.replaceAll("$", "$$$$")
  if (Array.isArray(u)) return u.map(fileValue)
  if (u !== null && typeof u === "object") {
    const d = durationOf(u as Record<string, unknown>)
    if (d !== undefined) return d
    return Object.fromEntries(Object.entries(u).map(([k, v]) => [k, fileValue(v as Json)]))
  }
  return u
}

const budgetSection = (figures: Json): Json => {
  const f = (figures ?? {}) as Record<string, number>
  const out: Record<string, Json> = {}
  for (const k of ["calls", "tokens", "costUsd"]) if (f[k] !== undefined) out[k] = f[k]!
  if (f["timeMs"] !== undefined) out["time"] = `${f["timeMs"]} millis`
  return out
}

/**
 * The study-file document of a stored protocol version (see the module docs).
 *
 * @param stored the version's stored protocol (`study_protocol_versions.protocol_json`)
 * @param paths `experiment` and `root`, written as given
 * @param run the study file's run settings (`run` without `trialConcurrency`; not part of the
 *   protocol), kept in the template (default none)
 * @returns the document
 * @since 0.7.0
 * @category templates
 */
export const templateOf = (
  stored: Record<string, Json>,
  paths: { readonly experiment: string; readonly root: string },
  run: Readonly<Record<string, Json>> = {}
): Record<string, Json> => {
  const study = stored["study"] as Record<string, Json>
  const budget = (stored["budget"] ?? {}) as Record<string, Json>
  const perTrial = budgetSection(budget["perTrial"] ?? {}), total = budgetSection(budget["total"] ?? {})
  const limits = Object.fromEntries(Object.entries((stored["limits"] ?? {}) as Record<string, Json>).filter(([, v]) => v !== null))
  const doc: Record<string, Json> = {
    study: {
      id: study["id"]!,
      question: fileValue(study["question"]!),
      ...(study["hypothesis"] === null || study["hypothesis"] === undefined ? {} : { hypothesis: fileValue(study["hypothesis"]) }),
      type: study["type"]!
    },
    protocol: { experiment: fileValue(paths.experiment) },
    output: { root: fileValue(paths.root) },
    ...(stored["trialConcurrency"] === undefined && Object.keys(run).length === 0
      ? {}
      : {
        run: {
          ...(fileValue(run as Json) as Record<string, Json>),
          ...(stored["trialConcurrency"] === undefined ? {} : { trialConcurrency: stored["trialConcurrency"] })
        }
      }),
    variables: fileValue(stored["variables"] ?? []),
    baseline: fileValue(((stored["baseline"] ?? {}) as Record<string, Json>)["assignment"] ?? {}),
    repeats: stored["repeats"] ?? 1,
    ...(Object.keys(perTrial as object).length + Object.keys(total as object).length === 0
      ? {}
      : { budget: { ...(Object.keys(perTrial as object).length > 0 ? { perTrial } : {}), ...(Object.keys(total as object).length > 0 ? { total } : {}) } }),
    ...(Object.keys(limits).length === 0 ? {} : { limits }),
    stop: fileValue(stored["stop"] ?? []),
    objectives: fileValue(stored["objectives"] ?? []),
    ...(stored["metrics"] === undefined ? {} : { metrics: fileValue(stored["metrics"]) }),
    ...(stored["analysis"] === undefined ? {} : { analysis: fileValue(stored["analysis"]) })
  }
  return doc
}

/**
 * `assay study template FILE --out PATH` (see the module docs).
 *
 * @since 0.7.0
 * @category commands
 */
export const template = (args: {
  readonly file: string
  readonly out: string
  readonly outputRoot: Option.Option<string>
  readonly version: Option.Option<number>
}): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const loaded = yield* StudyConfig.load(args.file, {
      allowOverCap: true,
      scanKeys: "none", // store-only: the data set is never read (it may have moved)
      ...(Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {})
    })
    const root = loaded.outputRoot
    if (!(yield* SuiteStore.isSuiteRoot(root))) {
      return yield* configError("study.id", `study "${loaded.id}" has never run in ${root}: no frozen protocol to write (run assay study run first)`)
    }
    const h = yield* SuiteStore.makeRead(root)
    const row = yield* h.study.study(loaded.id)
    if (Option.isNone(row)) return yield* configError("study.id", `study "${loaded.id}" has never run in ${root}`)
    const versions = yield* h.study.versions(loaded.id)
    const wanted = Option.getOrElse(args.version, () => row.value.currentVersion)
    const v = versions.find((x) => x.version === wanted)
    if (v === undefined) {
      return yield* configError("--protocol-version", `study "${loaded.id}" has no protocol version ${wanted} (${Words.noun(versions.length, "version")}: ${versions.map((x) => x.version).join(", ")})`)
    }
    const stored = v.protocol as Record<string, Json>
    const out = nodePath.resolve(args.out)
    const dir = nodePath.dirname(out)
    const rel = (p: string) => {
      const r = nodePath.relative(dir, p).split(nodePath.sep).join("/")
      return r.startsWith(".") ? r : `./${r}`
    }
    // the experiment file of the study file given (the stored path may be of a moved checkout)
    // the run settings of FILE (concurrency, retries…) are not protocol: kept as written
    const runSettings = JSON.parse(JSON.stringify(loaded.run ?? {})) as Record<string, Json>
    const doc = templateOf(stored, { experiment: rel(loaded.experimentFile), root: rel(root) }, runSettings)
    const json = out.endsWith(".json")
    const header = `# The protocol of study "${loaded.id}", version ${v.version} (digest ${v.protocolDigest}),\n# written by assay study template; loading this file gives the same protocol digest.\n`
    const text = json ? JSON.stringify(doc, null, 2) + "\n" : header + YAML.stringify(doc, { lineWidth: 0 })
    yield* fs.makeDirectory(dir, { recursive: true })
    const tmp = nodePath.join(dir, `.${nodePath.basename(out, nodePath.extname(out))}.tmp-${process.pid}${json ? ".json" : ".yaml"}`)
    yield* fs.writeFileString(tmp, text)
    const check = yield* StudyConfig.load(tmp, { allowOverCap: true, scanKeys: "none" }).pipe(
      Effect.ensuring(Effect.ignore(fs.remove(tmp)))
    )
    if (!DomainStudy.protocolMatches(v.protocolDigest, check)) {
      const theirs = DomainStudy.comparableParts(v.protocolParts, check)
      const changed = Object.keys({ ...v.protocolParts, ...theirs }).filter((k) => v.protocolParts[k] !== theirs[k])
      return yield* new TemplateMismatch({ version: v.version, changed })
    }
    yield* fs.writeFileString(out, text)
    yield* Console.error(`wrote ${out}: protocol version ${v.version} of study "${loaded.id}" (digest ${v.protocolDigest})`)
  }))

/**
 * The subcommand `template` of `assay study`.
 *
 * @since 0.7.0
 * @category commands
 */
export const subcommands = [
  Command.make("template", {
    file: Args.file({ name: "FILE", exists: "either" }).pipe(Args.withDescription("The study file (YAML, JSON, TOML or TypeScript).")),
    out: Options.text("out").pipe(Options.withDescription("Where to write the study file (.yaml, or .json).")),
    outputRoot: Options.text("output-root").pipe(
      Options.withDescription("The study's output root, relative to the working directory (overrides output.root)."),
      Options.optional
    ),
    version: Options.integer("protocol-version").pipe(Options.withDescription("The protocol version (default: the current one)."), Options.optional)
  }, (o) => template(o)).pipe(
    Command.withDescription("Write a frozen protocol version as a reusable study file (checked to load back with the same digest).")
  )
] as const
