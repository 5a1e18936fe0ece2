/**
 * How the SQLite driver stores the `data` of a `pipeline.handoff` event (`events.data`, TEXT)
 * and the entry address of a ledger row (`handoffs.entry_artifact_id`), from schema version 16.
 *
 * The runner writes one `pipeline.handoff` event per committed transition, with the same eleven
 * fields every time (`operation`, `fromSeq`, `fromTask`, `visit`, `toSeq`, `toTask`, `entry`,
 * `entryReused`, `reason`, `handoffs`, `limit`). As a JSON object that is ~185 bytes, more than
 * half of them key names and the pipeline id again (inside `entry`); this module stores it in a
 * positional form, a JSON array tagged `1`:
 *
 * `[1, operation, fromSeq, fromTask, visit, toSeq, toTask, entry, entryReused, reason, handoffs, limit]`
 *
 * where `entry` is the number `n` when the address is `<the event's pipeline id>:n` (the usual
 * case: a payload or the seed of the event's own pipeline) and the whole address otherwise:
 * ~45 bytes. Any other data of that kind (an event a user emitted with `emitEvent`) is stored
 * as its JSON, except an array, which is stored tagged `0` (`[0, data]`), so that a stored array
 * is always one of the two tagged forms; other kinds are stored as their JSON, as before.
 * {@link decodeEventData} gives back exactly what `JSON.parse` of the JSON would (the same keys
 * in the same order), so readers see no difference. A store written before version 16 has
 * only JSON; migration 0016 tags its arrays of that kind (see `MIGRATION_0016`), and a
 * read-only open of such a store decodes nothing (`compact` false).
 *
 * Measured on `bench/runner.ts`'s rewinding pipeline (two transitions): the `events` table from
 * ~589 to ~290 bytes per pipeline (see BENCHMARKS.md, perf13aa).
 *
 * The ledger's `entry_artifact_id` is stored as the empty string when it is
 * `<pipeline_id>:<entry_seq>` (what the row's own columns give back; an address is never empty),
 * in full otherwise.
 *
 * @since 0.15.0
 */

/** The event kind this module stores compactly. */
export const HANDOFF_EVENT_KIND = "pipeline.handoff"

/** The runner's fields of a `pipeline.handoff` event, in the order it writes them. */
const FIELDS = [
  "operation",
  "fromSeq",
  "fromTask",
  "visit",
  "toSeq",
  "toTask",
  "entry",
  "entryReused",
  "reason",
  "handoffs",
  "limit"
] as const
const ENTRY = FIELDS.indexOf("entry")

/** A value whose JSON text parses back to itself (a finite number, a string, a boolean, null). */
const isPlainScalar = (u: unknown): boolean =>
  u === null || typeof u === "string" || typeof u === "boolean" || (typeof u === "number" && Number.isFinite(u))

/** A canonical decimal seq (`-1` or a non-negative integer without a leading zero). */
const SEQ = /^(?:-1|0|[1-9][0-9]{0,14})$/

/**
 * The text to store for an event's `data` (`null` for `undefined`, as `JSON.stringify` would
 * not give one): the tagged positional form for the runner's `pipeline.handoff` data, `[0, data]`
 * for an array of that kind, JSON otherwise.
 *
 * @param kind - the event's kind.
 * @param pipelineId - the event's pipeline id (`null` for a run-level event).
 * @param data - the event's data.
 * @returns the `events.data` text, or `null`.
 *
 * @since 0.15.0
 * @category encoding
 */
export const encodeEventData = (kind: string, pipelineId: string | null, data: unknown): string | null => {
  if (data === undefined) return null
  if (kind !== HANDOFF_EVENT_KIND || data === null || typeof data !== "object") return JSON.stringify(data)
  if (Array.isArray(data)) return `[0,${JSON.stringify(data)}]`
  if (Object.getPrototypeOf(data) !== Object.prototype) return JSON.stringify(data)
  const d = data as Record<string, unknown>
  // exactly the runner's keys, in its order (no key list or value array allocated)
  let n = 0
  for (const k in d) {
    if (k !== FIELDS[n]) return JSON.stringify(data)
    n++
  }
  if (n !== FIELDS.length) return JSON.stringify(data)
  let text = "[1"
  for (let i = 0; i < FIELDS.length; i++) {
    const v = d[FIELDS[i]!]
    if (!isPlainScalar(v)) return JSON.stringify(data)
    if (i === ENTRY) {
      if (typeof v !== "string") return JSON.stringify(data)
      text += `,${entryText(pipelineId, v)}`
    } else text += typeof v === "string" ? `,${JSON.stringify(v)}` : `,${String(v)}`
  }
  return `${text}]`
}

/** The stored entry of the event data: its seq when it is `<pipelineId>:<seq>`, its JSON string otherwise. */
const entryText = (pipelineId: string | null, entry: string): string => {
  if (pipelineId !== null && entry.length > pipelineId.length + 1 && entry.startsWith(pipelineId) && entry[pipelineId.length] === ":") {
    const rest = entry.slice(pipelineId.length + 1)
    if (SEQ.test(rest)) return rest
  }
  return JSON.stringify(entry)
}

/**
 * The `data` of a stored event: the inverse of {@link encodeEventData} on a store of schema
 * version 16 or later (`compact`), `JSON.parse` of the text otherwise; `null` for no text.
 *
 * @param kind - the row's `kind`.
 * @param pipelineId - the row's `pipeline_id` (`null` for a run-level event).
 * @param text - the row's `data` (TEXT or `NULL`).
 * @param compact - whether the store may hold the tagged forms (schema version ≥ 16).
 * @returns the event's data, as `JSON.parse` of its JSON gives it.
 *
 * @since 0.15.0
 * @category decoding
 */
export const decodeEventData = (kind: string, pipelineId: string | null, text: unknown, compact: boolean): unknown => {
  if (typeof text !== "string") return null
  const parsed: unknown = JSON.parse(text)
  if (!compact || kind !== HANDOFF_EVENT_KIND || !Array.isArray(parsed)) return parsed
  if (parsed[0] === 0) return parsed[1]
  const out: Record<string, unknown> = {}
  for (let i = 0; i < FIELDS.length; i++) out[FIELDS[i]!] = parsed[i + 1]
  const entry = out.entry
  if (typeof entry === "number") out.entry = `${pipelineId}:${entry}`
  return out
}

/**
 * The text to store in `handoffs.entry_artifact_id`: `""` when the address is
 * `<pipelineId>:<entrySeq>`, the address otherwise.
 *
 * @param pipelineId - the ledger row's pipeline.
 * @param entrySeq - the ledger row's `entry_seq`.
 * @param address - the entry's occurrence address.
 * @returns the column's text.
 *
 * @since 0.15.0
 * @category encoding
 */
export const encodeEntry = (pipelineId: string, entrySeq: number, address: string): string =>
  address.length === pipelineId.length + 1 + String(entrySeq).length && address === `${pipelineId}:${entrySeq}` ? "" : address

/**
 * The entry address of a ledger row (the inverse of {@link encodeEntry}; a row written before
 * version 16 holds the address itself, never `""`).
 *
 * @param pipelineId - the row's `pipeline_id`.
 * @param entrySeq - the row's `entry_seq`.
 * @param stored - the row's `entry_artifact_id`.
 * @returns the entry's occurrence address.
 *
 * @since 0.15.0
 * @category decoding
 */
export const decodeEntry = (pipelineId: string, entrySeq: number, stored: string): string =>
  stored === "" ? `${pipelineId}:${entrySeq}` : stored
