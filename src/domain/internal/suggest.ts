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

/**
 * The closest candidate to `word` (case-insensitive {@link levenshtein}), if it is close enough to
 * be a plausible typo: distance at most `max(2, ⌊len/3⌋)` and below half the word's length.
 *
 * @since 0.1.0
 * @category formatting
 */
export const closest = (word: string, candidates: Iterable<string>): string | undefined => {
  let best: string | undefined
  let bestD = Infinity
  for (const c of candidates) {
    const d = levenshtein(word.toLowerCase(), c.toLowerCase())
    if (d < bestD) {
      best = c
      bestD = d
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(word.length / 3)) && bestD < word.length / 2 ? best : undefined
}
