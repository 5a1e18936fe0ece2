/**
 * Store and artifact-backend specs: how assay tells a URI (`s3://bucket/runs.db`,
 * `file:///runs/qa.db`, `myblobs://prefix`) from a path or a built-in word. Pure parsing, used by
 * the store resolver, the export's output checks and the plugin loader alike.
 *
 * A spec is a URI only when it starts with `scheme://`, the scheme being a letter and at least
 * one more of `A-Z a-z 0-9 + . -` (RFC 3986 §3.1). So `:memory:`, `runs/qa.db`, `./x://y`,
 * `C:\runs\qa.db` and `C://runs` (a one-letter scheme is a Windows drive) are never URIs.
 * Schemes are compared lowercased, as RFC 3986 §3.1 asks.
 *
 * @since 0.1.0
 */

/**
 * What a store or backend spec is:
 * - `NotUri`: a path or a built-in word (the caller decides);
 * - `Uri`: `scheme` (lowercased) and the parsed `uri`;
 * - `Malformed`: it starts like a URI (`scheme://`) but `new URL` refuses it (`message`).
 *
 * @since 0.1.0
 * @category models
 */
export type ParsedSpec =
  | { readonly _tag: "NotUri" }
  | { readonly _tag: "Uri"; readonly scheme: string; readonly uri: URL }
  | { readonly _tag: "Malformed"; readonly scheme: string; readonly message: string }

const uriStart = /^([A-Za-z][A-Za-z0-9+.-]+):\/\//

/**
 * Classifies a spec (see the module docs for what counts as a URI). Pure.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parse = (spec: string): ParsedSpec => {
  const m = uriStart.exec(spec)
  if (m === null) return { _tag: "NotUri" }
  const scheme = m[1]!.toLowerCase()
  try {
    return { _tag: "Uri", scheme, uri: new URL(spec) }
  } catch (e) {
    return { _tag: "Malformed", scheme, message: e instanceof Error ? e.message : String(e) }
  }
}

/**
 * Whether a spec is written as a plugin URI (`scheme://...`, well-formed or not).
 *
 * @since 0.1.0
 * @category parsing
 */
export const isUri = (spec: string): boolean => uriStart.test(spec)
