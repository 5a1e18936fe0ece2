/**
 * A compact, read-only set of pipeline ids, for admission's index of succeeded pipelines (see
 * `Store.SucceededIndex`). A content-addressed id is 32 lowercase hex characters (the first 16
 * bytes of a digest): those come packed as bytes, 16 per id, and are kept as four 32-bit
 * words each with an open-addressing table over their first word (the ids are digests, so
 * their first 32 bits are already spread evenly). Any other id is kept in a plain `Set`.
 *
 * Why: 200,000 ids read as strings cost the store one JavaScript string and array per row
 * (~0.15 s) and the set ~25 MB of old-generation objects that every later garbage collection
 * walks; packed, they arrive as one blob from one aggregate query and take ~5 MB. Lookups in
 * the order of the blob compare the next id of the blob first (see `has`): a resume's source
 * asks in that order when the blob is in the order the store wrote the rows.
 *
 * @since 0.6.0
 */

/**
 * A set of pipeline ids: `size` distinct ids; `has(id)` whether `id` is one of them (exact
 * string equality: `"AB…"` and `"ab…"` are different ids).
 *
 * @since 0.6.0
 * @category models
 */
export interface IdSet {
  readonly size: number
  readonly has: (id: string) => boolean
}

/** Nibble value of a lowercase hex character code (< 128), -1 for any other. */
const NIBBLE = (() => {
  const t = new Int8Array(128).fill(-1)
  for (let i = 0; i < 16; i++) t["0123456789abcdef".charCodeAt(i)] = i
  return t
})()

/**
 * Writes the four big-endian 32-bit words of `id` into `out`; `false` (and `out` unspecified)
 * when `id` is not exactly 32 lowercase hex characters.
 */
const parseHexId = (id: string, out: Uint32Array): boolean => {
  if (id.length !== 32) return false
  for (let k = 0; k < 4; k++) {
    let v = 0
    for (let j = k * 8, end = j + 8; j < end; j++) {
      const c = id.charCodeAt(j)
      const d = c < 128 ? NIBBLE[c]! : -1
      if (d < 0) return false
      v = (v << 4) | d
    }
    out[k] = v >>> 0
  }
  return true
}

/**
 * The set of the ids packed in `packed` (16 bytes each: the bytes of a 32-lowercase-hex id,
 * as SQL's `unhex` gives them) and the ids of `others` (any strings). `packed`'s length must
 * be a multiple of 16 (else a defect: the caller built it wrong). Duplicates count once.
 *
 * @param packed - the hex ids as bytes, 16 per id, in any order (in the order they will be
 *   asked for, lookups are cheaper: no table probe while each asked id is the next one)
 * @param others - the ids not in `packed` (usually none: explicit keys that are not 32
 *   lowercase hex characters)
 * @returns the set; memory ~16 bytes per packed id plus a table of 8–16 bytes per id
 * @since 0.6.0
 * @category constructors
 */
export const idSet = (packed: Uint8Array, others: Iterable<string>): IdSet => {
  if (packed.length % 16 !== 0) throw new RangeError(`packed ids: ${packed.length} bytes is not a multiple of 16`)
  const n = packed.length / 16
  const words = new Uint32Array(n * 4)
  const view = new DataView(packed.buffer, packed.byteOffset, packed.byteLength)
  for (let i = 0; i < words.length; i++) words[i] = view.getUint32(i * 4)
  let capacity = 8
  while (capacity < n * 2) capacity *= 2
  const mask = capacity - 1
  // slot → index of the id in `words` (-1: empty); load factor ≤ 1/2, linear probing
  const table = new Int32Array(capacity).fill(-1)
  const same = (i: number, w0: number, w1: number, w2: number, w3: number) => {
    const o = i * 4
    return words[o] === w0 && words[o + 1] === w1 && words[o + 2] === w2 && words[o + 3] === w3
  }
  /** The slot holding the id (w0..w3), or the empty slot where it would go (as `~slot`). */
  const find = (w0: number, w1: number, w2: number, w3: number): number => {
    let h = w0 & mask
    for (;;) {
      const i = table[h]!
      if (i === -1) return ~h
      if (same(i, w0, w1, w2, w3)) return h
      h = (h + 1) & mask
    }
  }
  let packedSize = 0
  for (let i = 0; i < n; i++) {
    const o = i * 4
    const slot = find(words[o]!, words[o + 1]!, words[o + 2]!, words[o + 3]!)
    if (slot < 0) {
      table[~slot] = i
      packedSize++
    }
  }
  const scratch = new Uint32Array(4)
  const rest = new Set<string>()
  for (const id of others) {
    if (!(n > 0 && parseHexId(id, scratch) && find(scratch[0]!, scratch[1]!, scratch[2]!, scratch[3]!) >= 0)) rest.add(id)
  }
  // The position in `packed` after the id last found: a resume asks for the ids in the order
  // the store wrote them (its source's order), which is the order of `packed` when it comes
  // from a scan in insertion order, so the next id asked is usually the one there. Comparing
  // it first reads `words` in sequence; the table (random slots, a cache miss each) is probed
  // only when it is not. The answer does not depend on it: a match at the hint is a member.
  let hint = 0
  const hasPacked = (id: string): boolean => {
    if (!parseHexId(id, scratch)) return false
    const w0 = scratch[0]!, w1 = scratch[1]!, w2 = scratch[2]!, w3 = scratch[3]!
    if (hint < n && same(hint, w0, w1, w2, w3)) {
      hint++
      return true
    }
    const slot = find(w0, w1, w2, w3)
    if (slot < 0) return false
    hint = table[slot]! + 1
    return true
  }
  return {
    size: packedSize + rest.size,
    has: (id) => (packedSize > 0 && hasPacked(id)) || (rest.size > 0 && rest.has(id))
  }
}
