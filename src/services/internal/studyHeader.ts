/**
 * The study header of `assay report ROOT` on a study's output root: the root's suite view
 * shows the trials' pipelines (one member per trial), not the study; the header names the
 * study, its protocol version and status, its trials by status and the command that shows the
 * study itself (`assay study report FILE`), read from the root alone (the study file's path is
 * the one stored with the protocol version).
 *
 * @since 0.7.0
 */
import { statusWords } from "../../domain/internal/words.js"
import { Effect, Option } from "effect"
import type { StoreUnavailable } from "../../domain/Errors.js"
import type { StudyCatalogService } from "../StudyCatalog.js"

/**
 * What the header says of a study root:
 *
 * - `studyId`, `question`; `version`: the current protocol version, `versions`: how many exist;
 * - `protocolDigest`: the current version's digest (`null` when its row is missing);
 * - `status`: the study's status as stored, or `interrupted` for a `running` row no live
 *   process holds (a killed run); `stopReason`: the stop stored with the last run (`null`: none);
 * - `trials`: the current version's trials by status (status -> count, in first-seen order);
 * - `file`: the study file stored with the version (`null` when unknown); `command`: the
 *   command that reports the study (`assay study report FILE --output-root ROOT`, the root as
 *   given: the file may have been run into another root than its `output.root`), with
 *   `--database URL` for a root the cluster engine ran;
 * - `database`: for a root the cluster engine ran (its `cluster.json`), the Postgres store that
 *   holds the trials' pipelines, without its password (the root holds none of them); absent
 *   otherwise.
 *
 * @since 0.7.0
 * @category models
 */
export interface StudyHeader {
  readonly studyId: string
  readonly question: string
  readonly version: number
  readonly versions: number
  readonly protocolDigest: string | null
  readonly status: string
  readonly stopReason: string | null
  readonly trials: Readonly<Record<string, number>>
  readonly file: string | null
  readonly command: string
  readonly database?: string | undefined
}

const field = (u: unknown, ...path: ReadonlyArray<string>): unknown => {
  let at = u
  for (const k of path) {
    if (typeof at !== "object" || at === null || Array.isArray(at)) return undefined
    at = (at as Record<string, unknown>)[k]
  }
  return at
}

/** A shell word: as is when it has only safe characters, else single-quoted. */
const shellWord = (s: string): string => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`)

/**
 * The header of the study stored in a root, if the root holds one (its study id is the suite
 * id).
 *
 * @param study the root's study catalog
 * @param studyId the suite id of the root
 * @param root the root as the user gave it (printed in the command)
 * @param alive whether a process holds the root's writer lock now
 * @param database for a root the cluster engine ran: the Postgres store holding the trials'
 *   pipelines, without its password (put in the command, and said to hold them)
 * @returns the header, or none for a plain suite root
 * @since 0.7.0
 * @category reading
 */
export const studyHeaderOf = (
  study: StudyCatalogService,
  studyId: string,
  root: string,
  alive: boolean,
  database?: string | undefined
): Effect.Effect<Option.Option<StudyHeader>, StoreUnavailable> =>
  Effect.gen(function*() {
    const row = yield* study.study(studyId)
    if (Option.isNone(row)) return Option.none()
    const r = row.value
    const versions = yield* study.versions(studyId)
    const current = versions.find((v) => v.version === r.currentVersion)
    const trials: Record<string, number> = {}
    for (const t of yield* study.trials(studyId, r.currentVersion)) trials[t.status] = (trials[t.status] ?? 0) + 1
    const file = field(current?.protocol, "study", "file")
    const fileText = typeof file === "string" ? file : null
    // the root as given (the file's output.root may be another: `--output-root` is always right)
    const command = `assay study report ${fileText === null ? "FILE" : shellWord(fileText)} --output-root ${shellWord(root)}${
      database === undefined ? "" : ` --database ${shellWord(database)}`
    }`
    return Option.some({
      studyId,
      question: r.question,
      version: r.currentVersion,
      versions: versions.length,
      protocolDigest: current?.protocolDigest ?? null,
      status: r.status === "running" && !alive ? "interrupted" : r.status,
      stopReason: r.stopReason,
      trials,
      file: fileText,
      command,
      ...(database === undefined ? {} : { database })
    })
  })

/**
 * The header in text, printed above the suite view:
 *
 * ```text
 * Study spam-prompts (protocol version 2 of 2, digest 0a1b2c3d4e5f): stopped_with_results — stop: SIGINT received
 *   question: Which prompt classifies spam best?
 *   trials (version 2): succeeded 6 · not_started 2
 *   the study's comparison, trials and limitations: assay study report study.yaml --output-root runs/spam
 *   below: the suite view of the trials' pipelines (one member per trial)
 * ```
 *
 * @param h the header
 * @returns the lines, joined
 * @since 0.7.0
 * @category rendering
 */
export const renderStudyHeader = (h: StudyHeader): string => {
  const trials = Object.entries(h.trials).map(([s, n]) => `${statusWords(s)} ${n}`).join(" · ")
  return [
    `Study ${h.studyId} (protocol version ${h.version} of ${h.versions}${
      h.protocolDigest === null ? "" : `, digest ${h.protocolDigest.slice(0, 12)}`
    }): ${statusWords(h.status)}${h.stopReason === null ? "" : ` — stop: ${h.stopReason}`}`,
    `  question: ${h.question}`,
    `  trials (version ${h.version}): ${trials === "" ? "none" : trials}`,
    `  the study's comparison, trials and limitations: ${h.command}`,
    h.database === undefined
      ? "  below: the suite view of the trials' pipelines (one member per trial)"
      : `  its trials' pipelines ran on the cluster engine: they are in the Postgres store, not in this root: assay report ${
        shellWord(h.database)
      } (one suite member per trial)`
  ].join("\n")
}
