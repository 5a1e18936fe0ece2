/**
 * Shared flag declarations of the `assay` subcommands whose parse errors name the flag.
 *
 * @since 0.1.0
 */
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import { Effect } from "effect"

/**
 * An integer flag `--NAME` that must be at least `min`. A smaller value is refused (exit 2)
 * with `--NAME must be an integer >= MIN (got V)` instead of the schema's anonymous
 * refinement message. A non-integer is refused by `Options.integer` itself.
 *
 * @param name the flag name without dashes (`"limit"`)
 * @param min the smallest accepted value (inclusive)
 * @returns the required option (pipe `Options.optional` for an optional one)
 * @since 0.1.0
 * @category options
 */
export const integerAtLeast = (name: string, min: number): Options.Options<number> =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      Number.isInteger(n) && n >= min
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be an integer >= ${min} (got ${n})`)))
    )
  )
