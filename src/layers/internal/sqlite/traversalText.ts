/**
 * How the SQLite driver stores a pipeline's traversal state (`pipelines.traversal`, TEXT).
 *
 * A state is written in a compact positional form, a JSON array of numbers:
 *
 * `[version, cursor, pending, active, counters, handoffs, payloads, ledger, floor]`
 *
 * - `pending`: `null`, or `[seq, visit, inputSeq, inputVisit, attempts]` (the input is the
 *   occurrence `pipelineId:inputSeq[#inputVisit]`, the seed being `inputSeq = -1`);
 * - `active`: the slots flattened, `[seq0, visit0, seq1, visit1, …]` (each slot's artifact is
 *   the occurrence `pipelineId:seq[#visit]`);
 * - the seed is `pipelineId:-1`.
 *
 * Every address in a state names an occurrence of the state's own pipeline, so the pipeline
 * id (32 characters, repeated up to five times) is not stored: a state of a few hundred bytes
 * takes about forty. That matters because the row is rewritten at every step of the
 * traversal: the pages of the pipelines in flight are written again by each group commit
 * (measured with `bench/runner.ts`, case `sqlite_rewind_once`: the pipelines table of a
 * rewinding run was 2.9 times the size of a plain run's with the object form).
 *
 * A state that does not have this shape (an address of another pipeline, a slot whose artifact
 * is not its own occurrence) is written as the JSON object of `Traversal.VisitState`, the form
 * stores of earlier builds wrote; {@link decode} reads both (an object starts with `{`).
 *
 * @since 0.1.0
 */
import * as Traversal from "../../../domain/Traversal.js"

/** Where {@link occurrence} leaves the seq and visit it read (one scratch pair: no allocation per call). */
const scratch: [number, number] = [0, 0]

/** The end of the decimal {@link readDigits} read last (its value is in {@link scratch}). */
let digitsAt = 0

/**
 * Reads a canonical decimal (no sign, no leading zero, at most 15 digits) at `from` into
 * `scratch[slot]`, leaving its end in {@link digitsAt}; `false` when there is none.
 */
const readDigits = (text: string, from: number, slot: 0 | 1): boolean => {
  let i = from
  let value = 0
  while (i < text.length) {
    const c = text.charCodeAt(i)
    if (c < 48 || c > 57) break
    value = value * 10 + (c - 48)
    i++
  }
  if (i === from || i - from > 15 || (text.charCodeAt(from) === 48 && i - from > 1)) return false
  scratch[slot] = value
  digitsAt = i
  return true
}

/**
 * Whether `address` is an occurrence of `pipelineId` spelled canonically (as
 * `Traversal.address` writes it: `pipelineId:seq`, `pipelineId:seq#visit` with visit ≥ 1, the
 * seed `pipelineId:-1`); its seq and visit are left in {@link scratch}. Reads character codes
 * only (no substring, no number parsing): the encoder runs at every step of every control
 * pipeline.
 */
const occurrence = (pipelineId: string, address: string): boolean => {
  const n = pipelineId.length
  if (address.length < n + 2 || address.charCodeAt(n) !== 58 || !address.startsWith(pipelineId)) return false
  scratch[1] = 0
  if (address.charCodeAt(n + 1) === 45) {
    scratch[0] = -1
    return address.length === n + 3 && address.charCodeAt(n + 2) === 49
  }
  if (!readDigits(address, n + 1, 0)) return false
  if (digitsAt === address.length) return true
  if (address.charCodeAt(digitsAt) !== 35 || address.charCodeAt(digitsAt + 1) === 48) return false
  return readDigits(address, digitsAt + 1, 1) && digitsAt === address.length
}

/**
 * The stored text of `state`, a state of pipeline `pipelineId`: the compact form, or the JSON
 * object when the state does not fit it (see the module docs).
 *
 * @param pipelineId - the pipeline the state belongs to.
 * @param state - the traversal state.
 * @returns the text for `pipelines.traversal`.
 *
 * @since 0.1.0
 * @category codec
 */
export const encode = (pipelineId: string, state: Traversal.VisitState): string => {
  if (!occurrence(pipelineId, state.seed) || scratch[0] !== -1) return JSON.stringify(state)
  const p = state.pending
  let pending: ReadonlyArray<number> | null = null
  if (p !== null) {
    if (!occurrence(pipelineId, p.input)) return JSON.stringify(state)
    pending = [p.seq, p.visit, scratch[0], scratch[1], p.attempts]
  }
  const active: Array<number> = []
  for (const a of state.active) {
    if (!occurrence(pipelineId, a.artifact) || scratch[0] !== a.seq || scratch[1] !== a.visit) return JSON.stringify(state)
    active.push(a.seq, a.visit)
  }
  // (JSON.stringify of numbers and arrays: faster than concatenating the text)
  return JSON.stringify([
    state.version,
    state.cursor,
    pending,
    active,
    state.counters,
    state.handoffs,
    state.payloads,
    state.ledger,
    state.floor
  ])
}

/** `value` when it is an array of `n` elements, else `undefined`. */
const arrayOf = (value: unknown, n?: number): ReadonlyArray<unknown> | undefined =>
  Array.isArray(value) && (n === undefined || value.length === n) ? value : undefined

/**
 * The traversal state stored as `text` for pipeline `pipelineId`, as an unvalidated value in
 * the shape of `Traversal.VisitState` (validate it with that Schema): the compact form is
 * expanded, the object form (earlier builds) parsed as is. A text that is neither comes back
 * as what `JSON.parse` made of it (the Schema refuses it).
 *
 * @param pipelineId - the pipeline the row belongs to (names every address).
 * @param text - the stored text.
 * @returns the state's fields.
 * @throws SyntaxError when `text` is not JSON.
 *
 * @since 0.1.0
 * @category codec
 */
export const decode = (pipelineId: string, text: string): unknown => {
  const value: unknown = JSON.parse(text)
  const row = arrayOf(value, 9)
  if (row === undefined) return value
  const [version, cursor, pendingRaw, activeRaw, counters, handoffs, payloads, ledger, floor] = row
  const at = (seq: unknown, visit: unknown): unknown =>
    typeof seq === "number" && typeof visit === "number" ? Traversal.address(pipelineId, seq, visit) : null
  const p = arrayOf(pendingRaw, 5)
  const pending = p === undefined ? pendingRaw : { seq: p[0], visit: p[1], input: at(p[2], p[3]), attempts: p[4] }
  const flat = arrayOf(activeRaw)
  const active: Array<unknown> | unknown = flat === undefined || flat.length % 2 !== 0 ? activeRaw : []
  if (Array.isArray(active) && flat !== undefined) {
    for (let i = 0; i < flat.length; i += 2) active.push({ seq: flat[i], visit: flat[i + 1], artifact: at(flat[i], flat[i + 1]) })
  }
  return {
    seed: Traversal.address(pipelineId, -1, 0),
    version,
    cursor,
    pending,
    active,
    counters,
    handoffs,
    payloads,
    ledger,
    floor
  }
}

/**
 * The version of a stored state, without expanding it (`null` when the text has none).
 *
 * @param text - the stored text.
 * @returns the state's `version`, or `null`.
 * @throws SyntaxError when `text` is not JSON.
 *
 * @since 0.1.0
 * @category codec
 */
export const versionOf = (text: string): number | null => {
  const value: unknown = JSON.parse(text)
  const v = Array.isArray(value) ? value[0] : (value as { readonly version?: unknown } | null)?.version
  return typeof v === "number" ? v : null
}
