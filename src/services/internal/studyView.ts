/**
 * The study behind `assay serve` on a study's output root: the comparison input rebuilt from
 * the protocol frozen in the root (no study file needed), and the {@link StudyCompare.Analysis}
 * cached per change of the study's rows (its study row and its trials), so that no request
 * recomputes a bootstrap while nothing changed.
 *
 * @since 0.7.0
 */
import { Effect, Option } from "effect"
import type { ConfigError, StoreUnavailable } from "../../domain/Errors.js"
import type { Json } from "../../domain/Json.js"
import type * as DomainStudy from "../../domain/Study.js"
import { StudyCatalog, type ProtocolVersionRecord, type StudyCatalogService, type StudyRecord } from "../StudyCatalog.js"
import * as StudyCompare from "../StudyCompare.js"
import { SuiteCatalog, type SuiteCatalogService } from "../SuiteCatalog.js"

/**
 * What the server reads of a study root: its study catalog, its suite catalog and the suite
 * id (the study id).
 *
 * @since 0.7.0
 * @category models
 */
export interface StudyReads {
  readonly study: StudyCatalogService
  readonly catalog: SuiteCatalogService
  readonly studyId: string
}

const obj = (x: unknown): Record<string, unknown> => (typeof x === "object" && x !== null && !Array.isArray(x) ? x as Record<string, unknown> : {})
const arr = (x: unknown): ReadonlyArray<unknown> => (Array.isArray(x) ? x : [])
const str = (x: unknown, fallback: string): string => (typeof x === "string" ? x : fallback)

/**
 * The comparison input of a study from the description frozen with one of its protocol
 * versions (`protocol_json`: the study's question and hypothesis, variables, variants,
 * baseline, repeats, budget, objectives, and the declared metrics and analysis when the file had
 * them). A version whose variants were not listed (too many to describe) gets its variants
 * from the trial rows.
 *
 * @param row the study row
 * @param version the protocol version record
 * @param trialVariants the variants of the version's trials (id and assignment), used when the description lists none
 * @since 0.7.0
 * @category constructors
 */
export const inputOf = (
  row: StudyRecord,
  version: ProtocolVersionRecord,
  trialVariants: ReadonlyArray<{ readonly id: string; readonly assignment: Readonly<Record<string, Json>> }>
): StudyCompare.CompareInput => {
  const p = obj(version.protocol)
  const study = obj(p["study"])
  const listed = arr(p["variants"]).map((v) => ({ id: str(obj(v)["id"], ""), assignment: obj(obj(v)["assignment"]) as Record<string, Json> }))
  const budget = obj(p["budget"])
  return {
    id: row.studyId,
    question: str(study["question"], row.question),
    hypothesis: typeof study["hypothesis"] === "string" ? study["hypothesis"] : null,
    type: str(study["type"], row.type),
    objectives: arr(p["objectives"]) as ReadonlyArray<StudyCompare.CompareObjective>,
    metrics: arr(p["metrics"]) as ReadonlyArray<DomainStudy.MetricDecl>,
    analysis: obj(p["analysis"]) as Partial<typeof DomainStudy.DEFAULT_ANALYSIS>,
    baseline: { id: str(obj(p["baseline"])["id"], listed[0]?.id ?? trialVariants[0]?.id ?? "") },
    variants: listed.length > 0 ? listed : trialVariants,
    variables: arr(p["variables"]).map((v) => ({ name: str(obj(v)["name"], ""), type: str(obj(v)["type"], "") })),
    repeats: typeof p["repeats"] === "number" ? p["repeats"] : undefined,
    budget: { perTrial: obj(budget["perTrial"]), total: obj(budget["total"]) }
  }
}

/**
 * A cache of a study root's analysis: `get` answers `None` for a root without a study, else
 * the analysis of the current protocol version, recomputed only when the study row or a
 * trial row changed since the last computation (status, reason, usage or settlement: each
 * write bumps the row's `updatedAt`); concurrent requests wait for one computation.
 *
 * @since 0.7.0
 * @category models
 */
export interface StudyCache {
  readonly get: Effect.Effect<Option.Option<StudyCompare.Analysis>, StoreUnavailable | ConfigError>
}

/**
 * Makes a {@link StudyCache} over a study root's reads (nothing is read until `get`).
 *
 * @since 0.7.0
 * @category constructors
 */
export const makeCache = (reads: StudyReads): StudyCache => {
    const lock = Effect.unsafeMakeSemaphore(1)
    let cached: { readonly key: string; readonly value: Option.Option<StudyCompare.Analysis> } | undefined
    const compute = Effect.gen(function*() {
      const row = yield* reads.study.study(reads.studyId)
      if (Option.isNone(row)) return { key: "none", value: Option.none<StudyCompare.Analysis>() }
      const trials = yield* reads.study.trials(reads.studyId, row.value.currentVersion)
      const key = JSON.stringify([
        row.value.currentVersion,
        row.value.status,
        row.value.updatedAt,
        trials.map((t) => [t.trialId, t.status, t.updatedAt])
      ])
      if (cached !== undefined && cached.key === key) return cached
      const versions = yield* reads.study.versions(reads.studyId)
      const version = versions.find((v) => v.version === row.value.currentVersion)
      if (version === undefined) return { key, value: Option.none<StudyCompare.Analysis>() }
      const seen = new Map<string, Readonly<Record<string, Json>>>()
      for (const t of trials) if (!seen.has(t.variantId)) seen.set(t.variantId, obj(t.variant) as Record<string, Json>)
      const input = inputOf(row.value, version, Array.from(seen, ([id, assignment]) => ({ id, assignment })))
      const analysis = yield* StudyCompare.analyse(input, { version: version.version }).pipe(
        Effect.provideService(StudyCatalog, reads.study),
        Effect.provideService(SuiteCatalog, reads.catalog)
      )
      return { key, value: Option.some(analysis) }
    })
    return {
      get: lock.withPermits(1)(Effect.map(compute, (c) => {
        cached = c
        return c.value
      }))
    }
  }
