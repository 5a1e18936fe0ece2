/**
 * @internal
 *
 * Words that agree in number with what they count, shared by the study's renderers (report,
 * status, plan, confirm, the dashboard's Study page) and the CLI's messages: a label before a
 * list of ids is singular for one id and plural for several ("variant v01", "variants v01,
 * v02"), and a count names its noun in the matching number ("1 trial", "3 trials"), never
 * "trial(s)".
 */

/**
 * The noun in the number `n` asks for: `one` when `n` is 1, else `many` (default `one` + "s").
 *
 * @param n - how many
 * @param one - the singular noun ("trial", "paired case")
 * @param many - the plural, when not `one` + "s" ("analyses")
 * @returns the noun alone
 * @since 0.7.0
 * @category formatting
 */
export const noun = (n: number, one: string, many = `${one}s`): string => (n === 1 ? one : many)

/**
 * A number for people, as every study view prints it: integers as they are, from 10,000 up
 * rounded to an integer, others with 4 significant digits (`0.8333`, not
 * `0.8333333333333334`); `—` for null, undefined or NaN; a zero, or a figure that rounds to
 * one, never reads `-0`.
 *
 * @param x - the number
 * @returns the figure
 * @since 0.11.0
 * @category formatting
 */
export const figure = (x: number | null | undefined): string => {
  if (x === null || x === undefined || Number.isNaN(x)) return "—"
  // never "-0": a zero is 0 whatever its sign (fix16ac F6; a difference of float noise is made
  // 0 where it is computed: Statistics.difference)
  if (x === 0) return "0"
  // an integer up to float noise (-1.9999999999999998: a sum of halves) is that integer
  // (tester16g F4): it would read "-2.000" beside an exact "-2"
  const whole = Math.round(x)
  const y = whole !== x && Math.abs(whole - x) <= 1e-12 * Math.max(1, Math.abs(x)) ? whole : x
  if (y === 0) return "0"
  const text = Number.isInteger(y) ? String(y) : Math.abs(y) >= 1e4 ? y.toFixed(0) : y.toPrecision(4)
  return /^-0(?:\.0*)?$/.test(text) ? text.slice(1) : text
}

/**
 * An interval's two ends for people, `[lower, upper]`, each a {@link figure}, both written the
 * same way (tester16g F4): when one end is an integer and the other reads as that same number
 * to 4 significant digits (`2` and `2.0004`), the integer is written with the other's digits
 * too (`[2.000, 2.000]`, never `[2, 2.000]`).
 *
 * @param lower - the lower end
 * @param upper - the upper end
 * @returns `[a, b]`
 * @since 0.16.0
 * @category formatting
 */
export const range = (lower: number | null | undefined, upper: number | null | undefined): string => {
  let a = figure(lower)
  let b = figure(upper)
  const integral = (t: string) => /^-?\d+$/.test(t)
  const alike = (int: string, other: string) => integral(int) && !integral(other) && Number(other) === Number(int) && Math.abs(Number(int)) < 1e4
  const digitsOf = (int: string, other: string) => Number(int).toPrecision(Math.max(1, other.replace(/^-/, "").replace(".", "").replace(/^0+/, "").length))
  if (alike(a, b)) a = digitsOf(a, b)
  else if (alike(b, a)) b = digitsOf(b, a)
  return `[${a}, ${b}]`
}

/**
 * A count and its noun in agreement: `count(1, "trial")` is "1 trial", `count(3, "trial")` is
 * "3 trials" (numbers from 1,000 up with thousands separators).
 *
 * @param n - how many
 * @param one - the singular noun
 * @param many - the plural, when not `one` + "s"
 * @returns "N noun"
 * @since 0.7.0
 * @category formatting
 */
export const count = (n: number, one: string, many = `${one}s`): string =>
  `${Number.isInteger(n) && Math.abs(n) >= 1000 ? n.toLocaleString("en-US") : String(n)} ${noun(n, one, many)}`

/**
 * A label followed by its ids, the label in the ids' number: `labelled("variant", ["v01"])` is
 * "variant v01", `labelled("variant", ["v01", "v02"])` is "variants v01, v02". More than `max`
 * ids (default 8) are cut after `max`, then ", … (N in all)".
 *
 * @param one - the singular label ("variant", "trial", "objective metric")
 * @param ids - the ids, in the order shown (none gives the plural label and "none")
 * @param options - `many`: the plural label (default `one` + "s"); `max`: the most ids shown;
 *   `separator` between ids (default ", ")
 * @returns the label and the list
 * @since 0.7.0
 * @category formatting
 */
export const labelled = (
  one: string,
  ids: ReadonlyArray<string | number>,
  options: { readonly many?: string; readonly max?: number; readonly separator?: string } = {}
): string => {
  const label = noun(ids.length, one, options.many)
  if (ids.length === 0) return `${label} none`
  return `${label} ${listed(ids, options)}`
}

/**
 * The ids alone, cut as {@link labelled} cuts them: at most `max` (default 8), then
 * ", … (N in all)".
 *
 * @param ids - the ids, in the order shown
 * @param options - `max`: the most ids shown; `separator` between ids (default ", ")
 * @returns the list ("" for none)
 * @since 0.7.0
 * @category formatting
 */
export const listed = (
  ids: ReadonlyArray<string | number>,
  options: { readonly max?: number; readonly separator?: string } = {}
): string => {
  const max = Math.max(1, options.max ?? 8)
  const sep = options.separator ?? ", "
  const shown = ids.slice(0, max).map(String).join(sep)
  return ids.length > max ? `${shown}${sep}… (${count(ids.length, "in all", "in all")})` : shown
}

/**
 * A status code in words for text a person reads (`budget_exhausted` → "budget exhausted",
 * `stopped_with_results` → "stopped with results"); JSON and event data keep the code.
 *
 * @param code - a trial's or study's status code
 * @returns the words
 * @since 0.9.0
 * @category formatting
 */
export const statusWords = (code: string): string => code.replace(/_/g, " ")

/**
 * The reasons a `pipeline.skipped` event records (its `data.reason`), in words for the views a
 * person reads (the dashboard's event list); the event data and every JSON keep the code.
 *
 * @since 0.9.0
 * @category formatting
 */
export const SKIP_REASON_WORDS: Readonly<Record<string, string>> = {
  budget_exhausted: "budget exhausted: not started (left pending; a resume may start it)",
  stop_after_failures: "the member's failure budget (stopAfterFailures) was reached: not started (left pending)",
  owned_by_another_run: "another live run owns it: not run here",
  duplicate: "the same pipeline id came twice in this run: run once",
  succeeded: "already succeeded"
}

/**
 * The warning every command prints for a `${VAR}` left unset in a definition file (`run`,
 * `study plan`, `study run`, `validate -c STUDY`, a suite run): one wording, from this helper
 * only, so that a plan and the run it plans say the same thing.
 *
 * @param u - the variable's name and the field path it was read at
 * @returns the line (`warning: environment variable NAME is not set (at PATH); it expands to ""`)
 * @since 0.10.0
 * @category formatting
 */
export const unsetEnvWarning = (u: { readonly name: string; readonly path: string }): string =>
  `warning: environment variable ${u.name} is not set (at ${u.path}); it expands to ""`
