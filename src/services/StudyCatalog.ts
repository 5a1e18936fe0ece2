/**
 * The study catalog: what a study's suite root records about the study beyond its trials'
 * pipelines (see `Study.ts`). The `SuiteStore` layer implements it on the catalog database of
 * the root (tables of migration 0009: `studies`, `study_protocol_versions`, `study_trials`,
 * `study_stop_requests`); {@link layerMemory} is an in-memory one for tests and embedders.
 *
 * - **protocol versions**: the protocol is frozen by its digest when the study first runs
 *   (version 1); running a changed protocol under the same study id is refused (`ConfigError`
 *   naming the changed parts) unless a new version is asked for, which starts version N+1;
 * - **trials**: one row per trial of a version with its variant, repeat, settled status and
 *   reason, usage so far (summed across resumes) and metrics at settlement;
 * - **the trial ledger** ({@link TrialLedger}): the persistence port of the running study's
 *   control (usage per trial, the stop that fired, manual stop requests).
 *
 * @since 0.6.0
 */
import { Context, Effect, Layer, Option, Ref } from "effect"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import { canonicalJsonUnsafe, digest, type Json } from "../domain/Json.js"
import * as Words from "../domain/internal/words.js"
import { comparableParts, type PreviousProtocol, protocolMatches, type StudyStatus, type TrialStatus } from "../domain/Study.js"
import { addUsage, type StopFired, type TrialLedger, type TrialUsage } from "./StudyControl.js"

// ---------------------------------------------------------------------------------------------
// Statuses (the values of `domain/Study.ts`; a study row may also be `interrupted`)
// ---------------------------------------------------------------------------------------------

/**
 * What a study row may hold: a {@link StudyStatus}, or `interrupted` (its last process was
 * stopped by a signal or died before settling: `assay study resume` continues it).
 *
 * @since 0.6.0
 * @category models
 */
export type StudyRecordStatus = StudyStatus | "interrupted"

/**
 * The trial statuses a later run of the same version does not run again: the trial's outcome
 * is a fact about its variant (`succeeded`, `failed`) or its budget is spent
 * (`budget_exhausted`). The others (`pending`, `running`, `cancelled`, `incomplete`,
 * `not_started`) are run (resumed from their checkpoints) by the next `run` or `resume`.
 *
 * @since 0.6.0
 * @category models
 */
export const FINAL_TRIAL_STATUSES: ReadonlySet<TrialStatus> = new Set(["succeeded", "failed", "budget_exhausted"])

export type {
  /**
   * A study's status (see `Study.StudyStatus` of the domain).
   *
   * @since 0.6.0
   * @category models
   */
  StudyStatus,
  /**
   * A trial's status (see `Study.TrialStatus` of the domain).
   *
   * @since 0.6.0
   * @category models
   */
  TrialStatus
} from "../domain/Study.js"

// ---------------------------------------------------------------------------------------------
// The ledger port (`StudyControl.ts`)
// ---------------------------------------------------------------------------------------------

export type {
  /**
   * A fired stop condition (see `StudyControl.StopFired`).
   *
   * @since 0.6.0
   * @category models
   */
  StopFired,
  /**
   * The persistence port of a running study's control (see `StudyControl.TrialLedger`):
   * `catalog.ledger(studyId)` implements it on the study tables.
   *
   * @since 0.6.0
   * @category models
   */
  TrialLedger,
  /**
   * A trial's usage (see `StudyControl.TrialUsage`).
   *
   * @since 0.6.0
   * @category models
   */
  TrialUsage
} from "./StudyControl.js"

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

/**
 * One study row.
 *
 * - `currentVersion`: the latest protocol version (trials of other versions are never
 *   compared with its trials);
 * - `stopReason`, `stopCondition`, `stoppedAt`: the stop condition that fired in the current
 *   version's last run (`null` when none fired);
 * - times in epoch ms.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyRecord {
  readonly studyId: string
  readonly question: string
  readonly type: string
  readonly createdAt: number
  readonly currentVersion: number
  readonly status: StudyRecordStatus
  readonly stopReason: string | null
  readonly stopCondition: Json | null
  readonly stoppedAt: number | null
  readonly updatedAt: number
}

/**
 * One frozen protocol version: its digest, its parts (part name -> short digest or value:
 * `experiment`, `variables`, `baseline`, `repeats`, `budget`, `stop`, `objectives`) and the
 * protocol's description (JSON).
 *
 * @since 0.6.0
 * @category models
 */
export interface ProtocolVersionRecord {
  readonly studyId: string
  readonly version: number
  readonly protocolDigest: string
  readonly protocolParts: Readonly<Record<string, string>>
  readonly protocol: Json
  readonly createdAt: number
}

/**
 * A trial to register: its id (`p<version>-<variant>-r<repeat>`), version, variant (id, key,
 * JSON of its assignment), repeat (1-based) and whether its pipelines are seedable (a trial
 * whose tasks cannot be seeded is not fully reproducible).
 *
 * @since 0.6.0
 * @category models
 */
export interface NewTrial {
  readonly trialId: string
  readonly version: number
  readonly variantId: string
  readonly variantKey: string
  readonly variant: Json
  readonly repeat: number
  readonly seedable: boolean
}

/**
 * One trial row: {@link NewTrial} plus its status and reason (the sentence a settlement
 * gives, `null` while pending), its usage so far, its metrics at settlement (`null` before),
 * when it first started and when it was settled (`null` until then), epoch ms.
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialRecord extends NewTrial {
  readonly studyId: string
  readonly status: TrialStatus
  readonly reason: string | null
  readonly usage: TrialUsage
  readonly metrics: Readonly<Record<string, number>> | null
  readonly startedAt: number | null
  readonly endedAt: number | null
  readonly updatedAt: number
  /** What its last settlement counted beside its metrics (absent: never settled, or settled before schema version 15; since 0.13.0). */
  readonly settled?: Settled | undefined
}

/**
 * A trial's settlement (see `Study.settleTrial`): status and reason, the metrics it was
 * judged on, when it started (kept if already set) and ended (`null`: not ended).
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialSettlement {
  readonly trialId: string
  readonly status: TrialStatus
  readonly reason: string | null
  readonly metrics: Readonly<Record<string, number>> | null
  readonly startedAt: number | null
  readonly endedAt: number | null
  /** What the settlement counted beside its metrics (see {@link Settled}; since 0.13.0). */
  readonly settled?: Settled | undefined
}

/**
 * What a trial's settlement counted beside its metrics (schema version 15; absent in rows
 * settled before): `metricsOver`, the pipelines its metrics cover (`succeeded` of `planned`,
 * `null` when the source cannot be counted), and `judgeCostUsd`, the part of its `costUsd` (US
 * dollars) the calls of its evaluator tasks (`judge`) made, when it has any.
 *
 * @since 0.13.0
 * @category models
 */
export interface Settled {
  readonly metricsOver?: { readonly succeeded: number; readonly planned: number | null } | undefined
  readonly judgeCostUsd?: number | undefined
}

/**
 * A manual stop request (`assay study stop`): when (epoch ms), how running trials end, who
 * asked (`pid N on HOST`), and when the running process took it (`null` until then).
 *
 * @since 0.6.0
 * @category models
 */
export interface StopRequest {
  readonly id: number
  readonly studyId: string
  readonly at: number
  readonly running: "drain" | "cancel"
  readonly by: string
  readonly handledAt: number | null
}

/**
 * What {@link StudyCatalogService.freeze} is given: the study's identity and its protocol as
 * loaded now; `newVersion`: start a new version when the protocol changed (`--new-version`).
 *
 * @since 0.6.0
 * @category models
 */
export interface FreezeInput {
  readonly studyId: string
  readonly question: string
  readonly type: string
  readonly protocolDigest: string
  readonly protocolParts: Readonly<Record<string, string>>
  readonly protocol: Json
  /**
   * The digests and parts earlier builds gave this protocol (default none): a version frozen
   * with one of them matches, and its record is upgraded to `protocolDigest`.
   */
  readonly previousProtocols?: ReadonlyArray<PreviousProtocol> | undefined
  readonly newVersion: boolean
  /** Continue this existing version (its protocol must be the file's): `--protocol-version N`. */
  readonly version?: number | undefined
}

/**
 * What {@link StudyCatalogService.freeze} decided: the version to run and whether it was
 * created now (`false`: the protocol matches the current version); `upgraded`: the version
 * had been frozen with a previous digest of the protocol (`FreezeInput.previousProtocols`)
 * and its record now holds the current digest, parts and description.
 *
 * @since 0.6.0
 * @category models
 */
export interface Frozen {
  readonly version: number
  readonly created: boolean
  readonly upgraded?: boolean | undefined
}

/**
 * The study catalog service. Every method has `R = never`; writes fail with
 * `StoreUnavailable` on a read-only root.
 *
 * - `study`: the study's row, if any;
 * - `versions`: the frozen protocol versions, oldest first;
 * - `freeze`: see {@link decideFreeze} (the rules); records the study row and the new version
 *   in one transaction;
 * - `registerTrials`: inserts the trials not registered yet (a known trial keeps its row);
 * - `trials`: the trials of one version (or all), by trial id;
 * - `settle`: writes trial settlements (status, reason, metrics, start kept if set, end);
 * - `setStatus`: the study's status; `stop` given: the stop that fired (or `null` to clear it);
 * - `ledger`: the {@link TrialLedger} of the study;
 * - `requestStop`: writes a manual stop request (what `assay study stop` does from another
 *   process through the store file itself);
 * - `dropStopRequests`: marks every request not taken yet as taken (at `now`): a new run
 *   starts with none pending;
 * - `pipelineStates` (optional): the stored pipelines of a suite's members by state, member id
 *   -> state -> count, in one aggregate read (the SQLite catalog of a combined root, whose
 *   database holds the pipelines); absent, callers walk the pipelines themselves.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyCatalogService {
  readonly study: (studyId: string) => Effect.Effect<Option.Option<StudyRecord>, StoreUnavailable>
  readonly versions: (studyId: string) => Effect.Effect<ReadonlyArray<ProtocolVersionRecord>, StoreUnavailable>
  readonly freeze: (input: FreezeInput, now: number) => Effect.Effect<Frozen, ConfigError | StoreUnavailable>
  readonly registerTrials: (
    studyId: string,
    trials: ReadonlyArray<NewTrial>,
    now: number
  ) => Effect.Effect<void, StoreUnavailable>
  readonly trials: (studyId: string, version?: number) => Effect.Effect<ReadonlyArray<TrialRecord>, StoreUnavailable>
  readonly settle: (settlements: ReadonlyArray<TrialSettlement>, now: number) => Effect.Effect<void, StoreUnavailable>
  readonly setStatus: (
    studyId: string,
    status: StudyRecordStatus,
    stop: StopFired | null | undefined,
    now: number
  ) => Effect.Effect<void, StoreUnavailable>
  readonly ledger: (studyId: string) => TrialLedger
  readonly requestStop: (
    studyId: string,
    request: { readonly running: "drain" | "cancel"; readonly by: string },
    now: number
  ) => Effect.Effect<void, StoreUnavailable>
  readonly stopRequests: (studyId: string) => Effect.Effect<ReadonlyArray<StopRequest>, StoreUnavailable>
  readonly dropStopRequests: (studyId: string, now: number) => Effect.Effect<void, StoreUnavailable>
  readonly pipelineStates?:
    | ((suiteId: string) => Effect.Effect<ReadonlyMap<string, Readonly<Record<string, number>>>, StoreUnavailable>)
    | undefined
}

/**
 * The study catalog tag (see {@link StudyCatalogService}).
 *
 * @since 0.6.0
 * @category tags
 */
export class StudyCatalog extends Context.Tag("assay/StudyCatalog")<StudyCatalog, StudyCatalogService>() {}

// ---------------------------------------------------------------------------------------------
// Shared rules
// ---------------------------------------------------------------------------------------------

/**
 * Zero usage.
 *
 * @since 0.6.0
 * @category models
 */
export const ZERO_USAGE: TrialUsage = { calls: 0, tokens: 0, costUsd: 0, timeMs: 0 }

/**
 * The parts of a protocol that differ between two versions, one phrase each (`repeats: 1 ->
 * 3`), in part-name order; a part present on one side only reads `(none)` on the other.
 *
 * @param before the parts of the earlier version
 * @param after the parts of the later one
 * @returns the changed parts, described
 * @since 0.6.0
 * @category versions
 */
export const changedParts = (
  before: Readonly<Record<string, string>>,
  after: Readonly<Record<string, string>>
): ReadonlyArray<string> => {
  const names = Array.from(new Set([...Object.keys(before), ...Object.keys(after)])).sort()
  return names.flatMap((n) => before[n] === after[n] ? [] : [`${n}: ${before[n] ?? "(none)"} -> ${after[n] ?? "(none)"}`])
}

/** A JSON value as a record, else an empty one. */
const recordOf = (v: Json | undefined): Readonly<Record<string, Json>> =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? v as Record<string, Json> : {}

/** A JSON value in one short line (`(none)` when absent), cut at 100 characters. */
const shortJson = (v: Json | undefined): string => {
  if (v === undefined) return "(none)"
  const s = canonicalJsonUnsafe(v)
  return s.length > 100 ? `${s.slice(0, 97)}...` : s
}

/** A variant assignment in words: `prompt=terse, temperature=0.5`. */
const assignmentWords = (v: Json): string => {
  const r = recordOf(v)
  const pairs = Object.entries(r).map(([k, x]) => `${k}=${typeof x === "string" ? x : canonicalJsonUnsafe(x)}`)
  return pairs.length > 0 ? pairs.join(", ") : shortJson(v)
}

/** A variable declaration in words, without its name: `range 0..1 step 0.5`, `enum [a, b]`, `prompt {terse, long}`. */
const variableWords = (v: Json): string => {
  const r = recordOf(v)
  const values = r["values"]
  switch (r["type"]) {
    case "range":
      return `range ${String(r["start"])}..${String(r["end"])} step ${String(r["step"])}`
    case "boolean":
      return "boolean"
    case "prompt":
    case "model":
      return `${String(r["type"])} {${Object.keys(recordOf(values ?? null)).join(", ")}}`
    default:
      return `${String(r["type"])} ${shortJson(values)}`
  }
}

/**
 * What changed inside a variable whose type and value names did not: each named value whose
 * content changed, a prompt's as its text (`the text of 'terse' changed (digest 1a2b3c4d ->
 * 5e6f7a8b)`, digests of the text), a model profile's or any other's as short JSON; the
 * declaration as short JSON when no named value differs (a range's bounds are said by
 * `variableWords`).
 */
const changedValuesWords = (x: Json, y: Json): string => {
  const [rx, ry] = [recordOf(x), recordOf(y)]
  const [vx, vy] = [recordOf(rx["values"] ?? null), recordOf(ry["values"] ?? null)]
  const said = Object.keys(vx).flatMap((k) => {
    const [a, b] = [vx[k], vy[k]]
    if (a === undefined || b === undefined || canonicalJsonUnsafe(a) === canonicalJsonUnsafe(b)) return []
    if (rx["type"] === "prompt" && typeof a === "string" && typeof b === "string") {
      return [`the text of '${k}' changed (digest ${digest(a).slice(0, 8)} -> ${digest(b).slice(0, 8)})`]
    }
    return [`'${k}' changed (${shortJson(a)} -> ${shortJson(b)})`]
  })
  return said.length > 0 ? said.join(", ") : `${shortJson(x)} -> ${shortJson(y)}`
}

/**
 * One objective of a stored protocol in words: `accuracy ↑ (hard constraint >= 0.75)`; the
 * default weight (1, which the loaded protocol states on every objective) is not said.
 */
const objectiveWords = (o: Json): string => {
  const r = recordOf(o)
  const dir = r["direction"] === "maximize" ? "↑" : r["direction"] === "minimize" ? "↓" : `target ${JSON.stringify(r["target"] ?? null)}`
  const hc = recordOf(r["hardConstraint"])
  const extra = [
    ...(r["weight"] === undefined || r["weight"] === 1 ? [] : [`weight ${JSON.stringify(r["weight"])}`]),
    ...(hc["op"] === undefined ? [] : [`hard constraint ${String(hc["op"])} ${JSON.stringify(hc["value"] ?? null)}`])
  ]
  return `${String(r["metric"])} ${dir}${extra.length > 0 ? ` (${extra.join(", ")})` : ""}`
}

/** A number or string of a stored rubric as written (`1`, `'2b'`). */
const versionText = (v: Json | undefined): string => typeof v === "string" ? `'${v}'` : shortJson(v)

/** A criterion's scale in words: `0..1`. */
const scaleWords = (s: Json | undefined): string => {
  const r = recordOf(s)
  return `${String(r["min"])}..${String(r["max"])}`
}

/**
 * What changed in a rubric's criteria and instructions, one phrase each: `criterion 'clear'
 * added (scale 1..5)`, `criterion 'correct': scale 0..1 -> 1..5`, `weight 1 -> 0.5`, `its
 * description changed`, `instructions changed`.
 */
const rubricContentWords = (x: Json, y: Json): ReadonlyArray<string> => {
  const [rx, ry] = [recordOf(x), recordOf(y)]
  const byName = (v: Json | undefined) => new Map((Array.isArray(v) ? v : []).map((c) => [String(recordOf(c)["name"]), recordOf(c)]))
  const [cx, cy] = [byName(rx["criteria"]), byName(ry["criteria"])]
  const said = [...new Set([...cx.keys(), ...cy.keys()])].flatMap((n) => {
    const [a, b] = [cx.get(n), cy.get(n)]
    if (a === undefined) return [`criterion '${n}' added (scale ${scaleWords(b!["scale"])})`]
    if (b === undefined) return [`criterion '${n}' removed`]
    const what = [
      ...(canonicalJsonUnsafe(a["scale"] ?? null) === canonicalJsonUnsafe(b["scale"] ?? null) ? [] : [`scale ${scaleWords(a["scale"])} -> ${scaleWords(b["scale"])}`]),
      ...((a["weight"] ?? 1) === (b["weight"] ?? 1) ? [] : [`weight ${shortJson(a["weight"] ?? 1)} -> ${shortJson(b["weight"] ?? 1)}`]),
      ...((a["description"] ?? null) === (b["description"] ?? null) ? [] : ["description changed"])
    ]
    return what.length === 0 ? [] : [`criterion '${n}': ${what.join(", ")}`]
  })
  const order = (v: Json | undefined) => (Array.isArray(v) ? v : []).map((c) => String(recordOf(c)["name"])).join(",")
  if (said.length === 0 && order(rx["criteria"]) !== order(ry["criteria"])) said.push("criteria reordered")
  if ((rx["instructions"] ?? null) !== (ry["instructions"] ?? null)) said.push("instructions changed")
  return said
}

/**
 * The judges' changes between two stored descriptions' `judges` (see `LoadedStudy.describe`),
 * one phrase each: `rubric of judge 'quality': version 1 -> 2 (criterion 'clear' added
 * (scale 1..5))`, `rubric of judge 'quality': criterion 'correct': scale 0..1 -> 1..5, version
 * 1 unchanged`, `judge 'grade' added (rubric 'label' version 1)`; a judge is named by its task.
 * Empty when neither side records its judges (a version stored before 0.15.0) or none changed.
 */
const judgeWords = (before: Json | undefined, after: Json | undefined): ReadonlyArray<string> => {
  const [tb, ta] = [recordOf(before)["tasks"], recordOf(after)["tasks"]]
  if (!Array.isArray(tb) || !Array.isArray(ta)) return []
  const byTask = (list: ReadonlyArray<Json>) => new Map(list.map((j) => [String(recordOf(j)["task"]), recordOf(recordOf(j)["rubric"])]))
  const [rb, ra] = [byTask(tb), byTask(ta)]
  return [...new Set([...rb.keys(), ...ra.keys()])].flatMap((name) => {
    const [x, y] = [rb.get(name), ra.get(name)]
    if (x === undefined) return [`judge '${name}' added (rubric '${String(y!["id"])}' version ${versionText(y!["version"])})`]
    if (y === undefined) return [`judge '${name}' removed`]
    if (canonicalJsonUnsafe(x) === canonicalJsonUnsafe(y)) return []
    const content = rubricContentWords(x, y)
    const id = x["id"] === y["id"] ? [] : [`id '${String(x["id"])}' -> '${String(y["id"])}'`]
    const sameVersion = canonicalJsonUnsafe(x["version"] ?? null) === canonicalJsonUnsafe(y["version"] ?? null)
    if (!sameVersion) {
      return [`rubric of judge '${name}': ${[...id, `version ${versionText(x["version"])} -> ${versionText(y["version"])}`].join(", ")}${content.length > 0 ? ` (${content.join("; ")})` : ""}`]
    }
    // the content changed under the same version: said, with the version that did not move
    return [`rubric of judge '${name}': ${[...id, ...content].join("; ")}, version ${versionText(y["version"])} unchanged`]
  })
}

/** How many changed fields of the experiment document are named before "and N more". */
const FIELDS_SHOWN = 3

/** A stored field value (see `documentFields.fieldsOf`) in words. */
const fieldValueWords = (v: Json): string => {
  const r = recordOf(v)
  if (typeof r["secret"] === "string") return "(secret, not stored)"
  if (typeof r["chars"] === "number") return `(a text of ${r["chars"]} characters)`
  if (typeof r["items"] === "number") return `(${r["items"]} items)`
  return shortJson(v)
}

/**
 * The changed fields of the base experiment's document between two stored descriptions'
 * `experimentFields` (tester16g F11), one phrase each: `pipeline.tasks[0].options.temperature 0
 * -> 0.5`, `pools.llm.resources[0].options.apiKey (secret, not stored) -> "${OPENAI_API_KEY}"`, `…template:
 * text changed (84 -> 96 characters)`, `… added (…)`, `… removed`, and `its tasks' code
 * changed`; `undefined` when either side does not record them (a version frozen before
 * 0.16.0) or they show no change.
 */
const experimentFieldWords = (before: Json, after: Json): ReadonlyArray<string> | undefined => {
  const [xb, xa] = [recordOf(before)["experimentFields"], recordOf(after)["experimentFields"]]
  if (xb === undefined || xa === undefined) return undefined
  const [db, da] = [recordOf(recordOf(xb)["document"]), recordOf(recordOf(xa)["document"])]
  const paths = [...new Set([...Object.keys(da), ...Object.keys(db)])]
  const said = paths.flatMap((p) => {
    const [x, y] = [db[p], da[p]]
    if (x === undefined) return [`${p} added (${fieldValueWords(y!)})`]
    if (y === undefined) return [`${p} removed`]
    if (canonicalJsonUnsafe(x) === canonicalJsonUnsafe(y)) return []
    const [rx, ry] = [recordOf(x), recordOf(y)]
    // (a secret is a marker on both sides, never a value: two markers are equal, so this is a
    // secret set or removed, e.g. an inline key replaced by a `${VAR}` reference)
    if (typeof rx["secret"] === "string" || typeof ry["secret"] === "string") return [`${p} ${fieldValueWords(x)} -> ${fieldValueWords(y)}`]
    if (typeof rx["chars"] === "number" && typeof ry["chars"] === "number") return [`${p}: text changed (${rx["chars"]} -> ${ry["chars"]} characters)`]
    return [`${p} ${fieldValueWords(x)} -> ${fieldValueWords(y)}`]
  })
  const shown = said.slice(0, FIELDS_SHOWN)
  if (said.length > FIELDS_SHOWN) shown.push(`and ${said.length - FIELDS_SHOWN} more`)
  if (recordOf(xb)["code"] !== recordOf(xa)["code"]) shown.push("its tasks' code changed")
  // every stored field equal and the same code, yet the document's digest moved: a secret's
  // value (stored as a marker only)
  if (shown.length === 0 && Object.values(da).some((v) => typeof recordOf(v)["secret"] === "string")) {
    return ["a secret value changed (secret values are not stored, so which one is not said)"]
  }
  return shown.length === 0 ? undefined : shown
}

/**
 * A changed protocol part in words where digests say nothing to a reader (`parts` are the
 * `name: old -> new` phrases of {@link changedParts}): `objectives` as the old and the new
 * objective lists, `modules` as the code files whose content changed, appeared or went away,
 * `repeats` as the counts, `baseline` as the assignments, `variables` as each variable added,
 * removed or changed (its type and values), `budget`, `stop` and `metrics` as short JSON, and
 * `experiment` said in words (a judge's changed rubric is named, from the descriptions'
 * `judges`, since 0.15.0; the changed fields of the document, `pipeline.tasks[0].options.
 * temperature 0 -> 0.5`, the first 3 and "and N more", from the descriptions'
 * `experimentFields`, since 0.16.0; a version frozen before either keeps the digests),
 * read from the stored protocol description and the loaded one (`describe()`); a part either
 * side does not describe keeps its digests. Used by the freeze refusal, `assay study
 * versions` and `assay study confirm`.
 *
 * @param parts the phrases of {@link changedParts}
 * @param before the earlier protocol's description (a version's stored `protocol`)
 * @param after the later one (the next version's, or the loaded file's `describe()`)
 * @returns one phrase per part, in words where it can
 * @since 0.10.0
 * @category versions
 */
export const inWords = (parts: ReadonlyArray<string>, before: Json, after: Json): ReadonlyArray<string> =>
  parts.map((phrase) => {
    const name = phrase.slice(0, phrase.indexOf(":"))
    const b = recordOf(before)[name]
    const a = recordOf(after)[name]
    if (name === "objectives" && Array.isArray(b) && Array.isArray(a)) {
      return `objectives: [${b.map(objectiveWords).join(", ")}] -> [${a.map(objectiveWords).join(", ")}]`
    }
    if (name === "repeats" && typeof b === "number" && typeof a === "number") return `repeats: ${b} -> ${a}`
    if (name === "baseline" && b !== undefined && a !== undefined) {
      return `baseline: ${assignmentWords(recordOf(b)["assignment"] ?? b)} -> ${assignmentWords(recordOf(a)["assignment"] ?? a)}`
    }
    if (name === "variables" && Array.isArray(b) && Array.isArray(a)) {
      const byName = (list: ReadonlyArray<Json>) => new Map(list.map((v) => [String(recordOf(v)["name"]), v]))
      const [rb, ra] = [byName(b), byName(a)]
      const said = [...new Set([...rb.keys(), ...ra.keys()])].flatMap((n) => {
        const [x, y] = [rb.get(n), ra.get(n)]
        if (x === undefined) return [`${n} added (${variableWords(y!)})`]
        if (y === undefined) return [`${n} removed`]
        if (canonicalJsonUnsafe(x) === canonicalJsonUnsafe(y)) return []
        const [wx, wy] = [variableWords(x), variableWords(y)]
        // the same names: say which value changed, not `prompt {a, b} -> prompt {a, b}` (tester16c F7)
        return [`${n}: ${wx === wy ? changedValuesWords(x, y) : `${wx} -> ${wy}`}`]
      })
      return `variables: ${said.length > 0 ? said.join("; ") : "reordered"}`
    }
    if ((name === "budget" || name === "stop" || name === "metrics") && (b !== undefined || a !== undefined)) {
      return `${name}: ${shortJson(b)} -> ${shortJson(a)}`
    }
    if (name === "experiment") {
      const digests = phrase.slice(phrase.indexOf(":") + 2)
      // a judge's rubric named (tester16f F5), and whether anything else changed beside it
      const [jb, ja] = [recordOf(before)["judges"], recordOf(after)["judges"]]
      const judges = judgeWords(jb, ja)
      // the changed fields named, for a version frozen since 0.16.0 (tester16g F11)
      const fields = experimentFieldWords(before, after)
      if (judges.length > 0) {
        const otherwise = recordOf(jb)["experimentOtherwise"] === recordOf(ja)["experimentOtherwise"]
        if (otherwise) return `experiment: ${judges.join("; ")}`
        return `experiment: ${judges.join("; ")}; and ${fields === undefined ? `the rest of the base experiment's document or its tasks' code changed (${digests})` : fields.join(", ")}`
      }
      if (fields !== undefined) return `experiment: ${fields.join(", ")}`
      return `experiment: the base experiment's document or its tasks' code changed (${digests})`
    }
    if (name === "modules" && (b !== undefined || a !== undefined)) {
      const rb = recordOf(b)
      const ra = recordOf(a)
      const files = [...new Set([...Object.keys(rb), ...Object.keys(ra)])].sort()
      const said = files.flatMap((f) =>
        rb[f] === ra[f] ? [] : [rb[f] === undefined ? `${f} added` : ra[f] === undefined ? `${f} no longer loaded` : `${f} edited`]
      )
      if (b === undefined) return `code files: now digested (${files.join(", ")}; the version was frozen before their content was)`
      return `code files: ${said.length > 0 ? said.join(", ") : "changed"} (a task file's content is part of the protocol)`
    }
    return phrase
  })

/**
 * The freeze rule of a study's protocol, given the current version (if any):
 *
 * - no version yet: version 1 is created (`--new-version` changes nothing);
 * - the same digest as the current version: that version is run again (resumed) — asking for
 *   a new version of an unchanged protocol is refused (`ConfigError`, path `--new-version`);
 * - another digest: refused (`ConfigError`, path `protocol`, naming the changed parts and the
 *   way out) unless `newVersion`, which creates version N+1; when the digest is an earlier
 *   version's, the refusal names that version and `--protocol-version K`;
 * - `version` K given (`--protocol-version K`): version K is run again (resumed) when its protocol is the
 *   file's; refused (path `--protocol-version`) when K does not exist, differs, or with `newVersion`;
 * - "the same digest" is the current one or one of `previousProtocols` (`Study.protocolMatches`);
 *   a version matched by a previous digest is run with `upgraded` set (its record is to be
 *   rewritten with the current digest), and a change is described against the parts of the
 *   format it was frozen with (`Study.comparableParts`).
 *
 * @param current the latest version's record, if any
 * @param input the protocol as loaded now
 * @param all every version of the study (default: `current` only)
 * @returns the version to run and whether to create it, or the refusal
 * @since 0.6.0
 * @category versions
 */
export const decideFreeze = (
  current: ProtocolVersionRecord | undefined,
  input: FreezeInput,
  all: ReadonlyArray<ProtocolVersionRecord> = current === undefined ? [] : [current]
): { readonly _tag: "Run"; readonly frozen: Frozen } | { readonly _tag: "Refused"; readonly error: ConfigError } => {
  const upgradeOf = (v: ProtocolVersionRecord) => (v.protocolDigest === input.protocolDigest ? {} : { upgraded: true })
  const refuse = (path: string, message: string) =>
    ({ _tag: "Refused", error: new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] }) }) as const
  if (input.version !== undefined) {
    const wanted = all.find((v) => v.version === input.version)
    if (input.newVersion) return refuse("--protocol-version", "--protocol-version continues an existing version; --new-version starts one: give one of them")
    if (wanted === undefined) {
      return refuse(
        "--protocol-version",
        `study "${input.studyId}" has no version ${input.version} (${Words.noun(all.length, "version")}: ${all.map((v) => v.version).join(", ") || "none"})`
      )
    }
    if (!protocolMatches(wanted.protocolDigest, input)) {
      const parts = inWords(changedParts(wanted.protocolParts, comparableParts(wanted.protocolParts, input)), wanted.protocol, input.protocol)
      return refuse(
        "--protocol-version",
        `the file's protocol is not version ${wanted.version}'s (${parts.length > 0 ? parts.join(", ") : "digest differs"}): ` +
          `restore the file to version ${wanted.version}'s protocol to continue it`
      )
    }
    return { _tag: "Run", frozen: { version: wanted.version, created: false, ...upgradeOf(wanted) } }
  }
  if (current === undefined) return { _tag: "Run", frozen: { version: 1, created: true } }
  if (protocolMatches(current.protocolDigest, input)) {
    if (input.newVersion) {
      const message = `the protocol of study "${input.studyId}" is unchanged since version ${current.version}: ` +
        `--new-version needs a changed protocol (run without it to continue version ${current.version})`
      return { _tag: "Refused", error: new ConfigError({ message: `--new-version: ${message}`, issues: [{ path: "--new-version", message }] }) }
    }
    return { _tag: "Run", frozen: { version: current.version, created: false, ...upgradeOf(current) } }
  }
  if (input.newVersion) return { _tag: "Run", frozen: { version: current.version + 1, created: true } }
  const earlier = all.find((v) => v.version !== current.version && protocolMatches(v.protocolDigest, input))
  if (earlier !== undefined) {
    return refuse(
      "protocol",
      `the file's protocol is version ${earlier.version}'s, an earlier version of study "${input.studyId}" (the latest is ` +
        `version ${current.version}): run or resume with --protocol-version ${earlier.version} to continue version ${earlier.version}, ` +
        `or --new-version to start version ${current.version + 1} with it`
    )
  }
  const parts = inWords(changedParts(current.protocolParts, comparableParts(current.protocolParts, input)), current.protocol, input.protocol)
  const what = parts.length > 0 ? `changed ${parts.join(", ")}` : `changed (digest ${current.protocolDigest} -> ${input.protocolDigest})`
  const message = `the protocol of study "${input.studyId}" (version ${current.version}) ${what}; a protocol is frozen ` +
    `when the study first runs: run with --new-version to start version ${current.version + 1} beside the old trials ` +
    `(never compared with them), or restore the protocol`
  return { _tag: "Refused", error: new ConfigError({ message: `protocol: ${message}`, issues: [{ path: "protocol", message }] }) }
}

/**
 * The fired `manual` stop of a stop request. Its reason (`manual stop requested by WHO at
 * TIME; running trials drain|cancelled`) has no parentheses, as every trial reason quoting it.
 *
 * @since 0.6.0
 * @category ledger
 */
export const stopOfRequest = (r: StopRequest): StopFired => ({
  condition: { when: "manual", running: r.running },
  // no parentheses: a trial's reason quotes it, and its row prints the reason inside a pair
  reason: `manual stop requested by ${r.by} at ${new Date(r.at).toISOString()}; running trials ${
    r.running === "cancel" ? "cancelled" : "drain"
  }`,
  at: r.at,
  running: r.running
})

// ---------------------------------------------------------------------------------------------
// In memory
// ---------------------------------------------------------------------------------------------

interface MemoryState {
  readonly studies: Map<string, StudyRecord>
  readonly versions: Map<string, Array<ProtocolVersionRecord>>
  readonly trials: Map<string, TrialRecord>
  readonly requests: Array<StopRequest>
}

/**
 * An in-memory study catalog (tests, embedders with a `MemoryStore`): the same rules as the
 * SQLite one, nothing persisted.
 *
 * @since 0.6.0
 * @category constructors
 */
export const makeMemory: Effect.Effect<StudyCatalogService> = Effect.gen(function*() {
  const state = yield* Ref.make<MemoryState>({ studies: new Map(), versions: new Map(), trials: new Map(), requests: [] })
  const get = Ref.get(state)
  const ledger = (studyId: string): TrialLedger => ({
    usage: (ids) => Effect.map(get, (s) => new Map(ids.map((id) => [id, s.trials.get(id)?.usage ?? ZERO_USAGE]))),
    addUsage: (trialId, delta, now) =>
      Effect.map(get, (s) => {
        const t = s.trials.get(trialId)
        if (t !== undefined) s.trials.set(trialId, { ...t, usage: addUsage(t.usage, delta), updatedAt: now })
      }),
    // as the SQL ledger's: a trial's start and end in a run (a settled status stays)
    markTrial: (trialId, phase, at) =>
      Effect.map(get, (s) => {
        const t = s.trials.get(trialId)
        if (t === undefined) return
        s.trials.set(
          trialId,
          phase === "running"
            ? { ...t, status: FINAL_TRIAL_STATUSES.has(t.status) ? t.status : "running", startedAt: t.startedAt ?? at, endedAt: null, updatedAt: at }
            : { ...t, endedAt: at, updatedAt: at }
        )
      }),
    recordStop: (stop) =>
      Effect.map(get, (s) => {
        const st = s.studies.get(studyId)
        if (st !== undefined) {
          s.studies.set(studyId, {
            ...st,
            stopReason: stop.reason,
            stopCondition: stop.condition as Json,
            stoppedAt: stop.at,
            updatedAt: stop.at
          })
        }
        s.requests.forEach((r, i) => {
          if (r.studyId === studyId && r.handledAt === null) s.requests[i] = { ...r, handledAt: stop.at }
        })
      }),
    stopRequested: Effect.map(get, (s) => {
      const r = s.requests.find((x) => x.studyId === studyId && x.handledAt === null)
      return r === undefined ? null : stopOfRequest(r)
    })
  })
  const service: StudyCatalogService = {
    study: (id) => Effect.map(get, (s) => Option.fromNullable(s.studies.get(id))),
    versions: (id) => Effect.map(get, (s) => [...(s.versions.get(id) ?? [])]),
    freeze: (input, now) =>
      Effect.flatMap(get, (s) => {
        const list = s.versions.get(input.studyId) ?? []
        const decided = decideFreeze(list[list.length - 1], input, list)
        if (decided._tag === "Refused") return Effect.fail(decided.error)
        const { frozen } = decided
        if (frozen.created) {
          list.push({
            studyId: input.studyId,
            version: frozen.version,
            protocolDigest: input.protocolDigest,
            protocolParts: { ...input.protocolParts },
            protocol: input.protocol,
            createdAt: now
          })
          s.versions.set(input.studyId, list)
        }
        if (frozen.upgraded === true) {
          const i = list.findIndex((v) => v.version === frozen.version)
          list[i] = { ...list[i]!, protocolDigest: input.protocolDigest, protocolParts: { ...input.protocolParts }, protocol: input.protocol }
        }
        const prev = s.studies.get(input.studyId)
        s.studies.set(input.studyId, {
          studyId: input.studyId,
          question: input.question,
          type: input.type,
          createdAt: prev?.createdAt ?? now,
          currentVersion: frozen.version,
          status: prev === undefined || frozen.created ? "pending" : prev.status,
          stopReason: frozen.created ? null : prev?.stopReason ?? null,
          stopCondition: frozen.created ? null : prev?.stopCondition ?? null,
          stoppedAt: frozen.created ? null : prev?.stoppedAt ?? null,
          updatedAt: now
        })
        return Effect.succeed(frozen)
      }),
    registerTrials: (studyId, trials, now) =>
      Effect.map(get, (s) => {
        for (const t of trials) {
          if (s.trials.has(t.trialId)) continue
          s.trials.set(t.trialId, {
            ...t,
            studyId,
            status: "pending",
            reason: null,
            usage: ZERO_USAGE,
            metrics: null,
            startedAt: null,
            endedAt: null,
            updatedAt: now
          })
        }
      }),
    trials: (studyId, version) =>
      Effect.map(get, (s) =>
        [...s.trials.values()]
          .filter((t) => t.studyId === studyId && (version === undefined || t.version === version))
          .sort((a, b) => (a.trialId < b.trialId ? -1 : a.trialId > b.trialId ? 1 : 0))),
    settle: (settlements, now) =>
      Effect.map(get, (s) => {
        for (const x of settlements) {
          const t = s.trials.get(x.trialId)
          if (t === undefined) continue
          s.trials.set(x.trialId, {
            ...t,
            status: x.status,
            reason: x.reason,
            metrics: x.metrics,
            startedAt: t.startedAt ?? x.startedAt,
            endedAt: x.endedAt,
            updatedAt: now,
            settled: x.settled
          })
        }
      }),
    setStatus: (studyId, status, stop, now) =>
      Effect.map(get, (s) => {
        const st = s.studies.get(studyId)
        if (st === undefined) return
        s.studies.set(studyId, {
          ...st,
          status,
          ...(stop === undefined ? {} : {
            stopReason: stop?.reason ?? null,
            stopCondition: (stop?.condition ?? null) as Json | null,
            stoppedAt: stop?.at ?? null
          }),
          updatedAt: now
        })
      }),
    ledger,
    requestStop: (studyId, request, now) =>
      Effect.map(get, (s) => {
        s.requests.push({ id: s.requests.length + 1, studyId, at: now, running: request.running, by: request.by, handledAt: null })
      }),
    stopRequests: (studyId) => Effect.map(get, (s) => s.requests.filter((r) => r.studyId === studyId)),
    dropStopRequests: (studyId, now) =>
      Effect.map(get, (s) => {
        s.requests.forEach((r, i) => {
          if (r.studyId === studyId && r.handledAt === null) s.requests[i] = { ...r, handledAt: now }
        })
      })
  }
  return service
})

/**
 * {@link makeMemory} as a layer.
 *
 * @since 0.6.0
 * @category layers
 */
export const layerMemory: Layer.Layer<StudyCatalog> = Layer.effect(StudyCatalog, makeMemory)

