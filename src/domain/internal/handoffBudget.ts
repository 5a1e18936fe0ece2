/**
 * The one message for a wrong `maxHandoffs` value, wherever it is written: the pipeline's
 * loop budget (`pipeline.control.maxHandoffs`) and the run's ceiling (`run.maxHandoffs`). It
 * names what was given, because a quoted `"3"` and `true` read as numbers to a person, not to
 * the schema. (A float literal such as `3.0` in a config text gets its own message from the
 * loader, see `config/internal/literals.ts`.)
 *
 * @internal
 */

/** A value as the message shows it: `null`, `3`, `a list`, `object`. */
const shown = (u: unknown): string =>
  u === null || typeof u === "number" || typeof u === "boolean" ? String(u) :
  typeof u === "string" ? JSON.stringify(u) :
  Array.isArray(u) ? "a list" :
  typeof u

/**
 * The message for `actual`, a value that is not a positive integer: what is expected and
 * what was given (a numeric string gets the hint to drop its quotes).
 *
 * @internal
 */
export const handoffBudgetMessage = (actual: unknown): string =>
  `maxHandoffs must be a positive integer (an unquoted number such as 3), got ${
    typeof actual === "string"
      ? `the string ${JSON.stringify(actual)}${
        /^\s*[1-9][0-9]*\s*$/.test(actual) ? ` (write ${actual.trim()} without quotes)` : ""
      }`
      : typeof actual === "boolean"
      ? `the boolean ${actual}`
      : shown(actual)
  }`
