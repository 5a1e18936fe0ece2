/**
 * @internal
 *
 * Did-you-mean suggestions shared by the declarations checked in the domain (`Control`) and
 * the config files (`config/internal/issues`, which re-exports them).
 */

/**
 * Edit distance between two strings with insertions, deletions, substitutions and swaps of
 * two adjacent characters each costing 1 (the "optimal string alignment" variant of the
 * Damerau–Levenshtein distance; F. J. Damerau 1964, V. I. Levenshtein 1966), so `dealy` is
 * one edit from `delay`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const levenshtein = (a: string, b: string): number => {
  const d: Array<Array<number>> = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)))
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1)
      d[i]![j] = v
    }
  }
  return d[a.length]![b.length]!
}

/** The length of the longest common prefix of two strings. */
const commonPrefix = (a: string, b: string): number => {
  let n = 0
  while (n < a.length && n < b.length && a[n] === b[n]) n++
  return n
}

/**
 * The closest candidate to `word`, if it is close enough to be a plausible slip; never `word`
 * itself (a word already written is no suggestion for itself). Two measures, case-insensitive:
 *
 * - a typo: the smallest {@link levenshtein} distance, at most `max(2, ⌊len/3⌋)` and below half
 *   the word's length (`maximise` → `maximize`, `compre` → `compare`);
 * - otherwise a shortened or extended form, which an edit distance counts as many edits: one
 *   of the two is a prefix of the other with at least 3 characters in common (`max` →
 *   `maximize`), or they share a prefix of at least 4 characters that leaves at most 2 of the
 *   shorter one over (`comparison` → `compare`, `minimum` → `minimize`); the longest common
 *   prefix wins, then the nearest length.
 *
 * @since 0.1.0
 * @category formatting
 */
export const closest = (word: string, candidates: Iterable<string>): string | undefined => {
  const w = word.toLowerCase()
  let best: string | undefined
  let bestD = Infinity
  let stem: string | undefined
  let stemP = 0
  let stemGap = Infinity
  for (const c of candidates) {
    if (c === word) continue
    const lc = c.toLowerCase()
    const d = levenshtein(w, lc)
    if (d < bestD) {
      best = c
      bestD = d
    }
    const p = commonPrefix(w, lc)
    const shorter = Math.min(w.length, lc.length)
    const extends_ = (p === shorter && p >= 3) || (p >= 4 && p >= shorter - 2)
    const gap = Math.abs(w.length - lc.length)
    if (extends_ && (p > stemP || (p === stemP && gap < stemGap))) {
      stem = c
      stemP = p
      stemGap = gap
    }
  }
  if (best !== undefined && bestD <= Math.max(2, Math.floor(word.length / 3)) && bestD < word.length / 2) return best
  return stem
}
