/**
 * Money for people.
 *
 * @internal
 */

/**
 * US dollars as people read them: `$0`; below a cent, two significant digits without an
 * exponent (`$0.00018`, `$0.000012`), so a study of cheap calls never shows `$0.0000`; from a
 * cent up, cents (`$0.05`, `$3.40`).
 *
 * @param usd an amount in US dollars (>= 0)
 * @internal
 */
export const formatUsd = (usd: number): string =>
  usd === 0 ? "$0" : usd < 0.01 ? `$${usd.toFixed(Math.min(20, 1 - Math.floor(Math.log10(usd))))}` : `$${usd.toFixed(2)}`
