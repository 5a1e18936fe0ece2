/**
 * @internal
 *
 * Duration text as users write it and as assay prints it. Effect's `Duration.decodeUnknown`
 * takes `"<number> <unit word>"` (`"2 seconds"`, `"500 millis"`); assay's messages print
 * durations with `Duration.format` (`"2s"`, `"1m 30s"`, `"1s 500ms"`). Both forms are
 * accepted wherever a duration is read (the CLI's duration flags, a file's duration fields),
 * so that a value copied from a message can be given back (tester17ad F11).
 */
import { Duration, Option } from "effect"

/** `Duration.format`'s unit symbols, and the words `Duration.decode` takes for them. */
const WORDS: Readonly<Record<string, string>> = {
  w: "weeks",
  d: "days",
  h: "hours",
  m: "minutes",
  s: "seconds",
  ms: "millis",
  us: "micros",
  "µs": "micros",
  ns: "nanos"
}

/** One `<number><symbol>` part of the compact form (`ms` before `m`, so `2ms` is millis). */
const PART = /(\d+(?:\.\d+)?)\s*(ms|µs|us|ns|w|d|h|m|s)(?![a-zµ])/gy

/**
 * The compact form alone (`"2s"`, `"1m 30s"`, `"1s 500ms"`, as `Duration.format` writes it):
 * the sum of its parts; `None` for any other text.
 */
const compact = (text: string): Option.Option<Duration.Duration> => {
  PART.lastIndex = 0
  let total = Duration.zero
  let parts = 0
  let at = 0
  while (at < text.length) {
    PART.lastIndex = at
    const m = PART.exec(text)
    if (m === null) return Option.none()
    const [, amount, symbol] = m
    // a fraction of a nano or micro has no Duration (they are whole bigints)
    if ((symbol === "ns" || symbol === "us" || symbol === "µs") && amount!.includes(".")) return Option.none()
    const part = Duration.decodeUnknown(`${amount} ${WORDS[symbol!]}`)
    if (Option.isNone(part)) return Option.none()
    total = Duration.sum(total, part.value)
    parts++
    at = PART.lastIndex
    while (at < text.length && text[at] === " ") at++
  }
  return parts === 0 ? Option.none() : Option.some(total)
}

/**
 * Reads a duration: `"<number> <unit>"` as Effect decodes it (`"2 seconds"`, `"500 millis"`,
 * `"1.5 minutes"`), or the compact form assay prints (`"2s"`, `"1m 30s"`, `"500ms"`; units
 * `w d h m s ms us/µs ns`). Surrounding spaces are ignored. `None` for anything else (a bare
 * number among them: `0.5` could mean seconds or millis). A negative amount is not refused
 * here (Effect clamps it to zero): callers that care check the text.
 *
 * @param text - the text as written
 * @returns the duration, or `None`
 * @since 0.12.0
 * @category durations
 */
export const decodeDurationText = (text: string): Option.Option<Duration.Duration> => {
  const trimmed = text.trim()
  return Option.orElse(Duration.decodeUnknown(trimmed), () => compact(trimmed))
}
