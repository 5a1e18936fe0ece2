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

/** The seq and visit of `address` when it is an occurrence of `pipelineId` written canonically. */
const occurrence = (pipelineId: string, address: string): readonly [number, number] | undefined => {
  if (address.length <= pipelineId.length + 1 || !address.startsWith(pipelineId) || address[pipelineId.length] !== ":") {
    return undefined
  }
  const rest = address.slice(pipelineId.length + 1)
  const hash = rest.indexOf("#")
  const seq = Number(hash === -1 ? rest : rest.slice(0, hash))
  const visit = hash === -1 ? 0 : Number(rest.slice(hash + 1))
  if (!Number.isSafeInteger(seq) || !Number.isSafeInteger(visit)) return undefined
  // only the canonical spelling round-trips (no "+1", "01", "1#0", …)
  return Traversal.address(pipelineId, seq, visit) === address ? [seq, visit] : undefined
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
  if (state.seed !== Traversal.address(pipelineId, -1, 0)) return JSON.stringify(state)
  let pending = "null"
  const p = state.pending
  if (p !== null) {
    const input = occurrence(pipelineId, p.input)
    if (input === undefined) return JSON.stringify(state)
    pending = `[${p.seq},${p.visit},${input[0]},${input[1]},${p.attempts}]`
  }
  let active = ""
  for (const a of state.active) {
    if (a.artifact !== Traversal.address(pipelineId, a.seq, a.visit)) return JSON.stringify(state)
    active += active === "" ? `${a.seq},${a.visit}` : `,${a.seq},${a.visit}`
  }
  return `[${state.version},${state.cursor},${pending},[${active}],[${state.counters.join(",")}],${state.handoffs},${state.payloads},${state.ledger},${state.floor}]`
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
