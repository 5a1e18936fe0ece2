/**
 * Token and cost accounting of model calls: price tables, how a call is priced, and how its
 * tokens are estimated when the server reports none.
 *
 * **Prices** are US dollars per 1,000,000 tokens, input (prompt) and output (completion)
 * apart, the unit providers publish: `{ inputPer1M: 2.5, outputPer1M: 10 }`. An experiment's
 * top-level `pricing` maps model names to prices; a resource may carry its own `pricing`
 * (a price for every model it serves, or a table by model), which wins over the experiment's
 * for calls that resource answered (a gateway or a negotiated rate that differs).
 *
 * **A call's cost** ({@link costOf}) is `tokensIn × inputPer1M / 1e6 + tokensOut ×
 * outputPer1M / 1e6`, rounded to 1e-9 USD (so sums print without float noise). The price is
 * looked up ({@link priceFor}) for the model the server named in its answer, then the model
 * that was asked for: first in the resource's pricing, then in the table.
 *
 * **Configured prices win over a cost the server reports** (`usage.cost`, as OpenRouter and
 * the mock server send): the table is what the operator states they pay (discounts, contract
 * rates) and it prices every provider the same way, so figures stay comparable across
 * endpoints. A server's figure is used only for a call no configured price covers
 * ({@link priceCall}'s `source: "server"`); with neither, the call's cost is unknown (`null`),
 * never 0.
 *
 * **Estimated tokens**: when the server's answer has no `usage`, the tokens are estimated at
 * one token per 4 characters, rounded up ({@link estimateTokens}; OpenAI's published rule of
 * thumb for English text, "one token is about 4 characters"), over the messages' contents for
 * the input and the answer's content for the output, and the attempt is marked `estimated`.
 * No tokenizer is a dependency of assay: exact counts come from the server.
 *
 * @since 0.8.0
 */
import { Predicate, Schema } from "effect"
import type { ConfigIssue } from "./Errors.js"
import { closest } from "./internal/suggest.js"
import type { ResourceInfo } from "./Lease.js"

/**
 * The price of one model: US dollars per 1,000,000 input (prompt) tokens and per 1,000,000
 * output (completion) tokens, each a finite number >= 0.
 *
 * @since 0.8.0
 * @category models
 */
export interface ModelPrice {
  readonly inputPer1M: number
  readonly outputPer1M: number
}

/**
 * A price table: model name → {@link ModelPrice}.
 *
 * @since 0.8.0
 * @category models
 */
export type PriceTable = Readonly<Record<string, ModelPrice>>

const UsdPer1M = Schema.Number.pipe(Schema.finite(), Schema.nonNegative()).annotations({
  description: "US dollars per 1,000,000 tokens (a finite number >= 0)"
})

/**
 * The Schema of one {@link ModelPrice} (both fields required; unknown fields refused by the
 * config loader).
 *
 * @since 0.8.0
 * @category schemas
 */
export const ModelPriceSchema = Schema.Struct({ inputPer1M: UsdPer1M, outputPer1M: UsdPer1M }).annotations({
  identifier: "ModelPrice",
  description: "USD per 1,000,000 input and output tokens"
})

/**
 * The Schema of a {@link PriceTable} (the experiment's top-level `pricing`).
 *
 * @since 0.8.0
 * @category schemas
 */
export const PriceTableSchema = Schema.Record({ key: Schema.String, value: ModelPriceSchema }).annotations({
  identifier: "PriceTable",
  description: "model name → { inputPer1M, outputPer1M } in USD per 1,000,000 tokens",
  // what is expected in a user's words, not the schema's name (issue 18: "Expected PriceTable, actual 5");
  // a problem inside the table keeps its own message
  message: (issue) =>
    `expected a table of model name → { inputPer1M, outputPer1M } (USD per 1,000,000 tokens), got ${
      JSON.stringify(issue.actual) ?? String(issue.actual)
    }`
})

/**
 * The Schema of a resource's own `pricing`: one {@link ModelPrice} for every model the
 * resource serves, or a {@link PriceTable} by model.
 *
 * @since 0.8.0
 * @category schemas
 */
export const ResourcePricingSchema = Schema.Union(ModelPriceSchema, PriceTableSchema).annotations({
  identifier: "ResourcePricing",
  description: "{ inputPer1M, outputPer1M } for every model of the resource, or model name → price"
})

const PRICE_FIELDS = ["inputPer1M", "outputPer1M"] as const

const priceIssues = (u: unknown, path: string): Array<ConfigIssue> => {
  if (!Predicate.isObject(u) || Array.isArray(u)) {
    return [{ path, message: "a price must be an object { inputPer1M, outputPer1M } (USD per 1,000,000 tokens)" }]
  }
  const o = u as Record<string, unknown>
  const issues: Array<ConfigIssue> = []
  // a misspelt field (`outputPr1M`) is one problem: named once, as an unknown field with its
  // did-you-mean, not again as the missing field it stands for
  const meant = new Set<string>()
  for (const k of Object.keys(o)) {
    if (!(PRICE_FIELDS as ReadonlyArray<string>).includes(k)) {
      const near = PRICE_FIELDS.find((f) => f.toLowerCase() === k.toLowerCase()) ??
        closest(k, PRICE_FIELDS.filter((f) => !(f in o) && !meant.has(f)))
      if (near !== undefined && !(near in o)) meant.add(near)
      issues.push({
        path: `${path}.${k}`,
        message: `unknown key "${k}"`,
        suggestion: near !== undefined ? `did you mean ${near}?` : "a price has inputPer1M and outputPer1M"
      })
    }
  }
  for (const f of PRICE_FIELDS) {
    const v = o[f]
    if (v === undefined) {
      if (!meant.has(f)) issues.push({ path: `${path}.${f}`, message: `${f} is missing (USD per 1,000,000 tokens)` })
    } else if (typeof v !== "number" || !Number.isFinite(v)) {
      issues.push({ path: `${path}.${f}`, message: `${f} must be a finite number of USD per 1,000,000 tokens, got ${shown(v)}` })
    } else if (v < 0) issues.push({ path: `${path}.${f}`, message: `${f} must be >= 0, got ${v}` })
  }
  return issues
}

/** A value as an error message shows it: `NaN`, `Infinity`, `-Infinity` by name (JSON would say `null`). */
const shown = (v: unknown): string =>
  typeof v === "number" && !Number.isFinite(v) ? String(v) : JSON.stringify(v) ?? String(v)

/**
 * Whether a resource's `pricing` value is a single price (it has `inputPer1M` or
 * `outputPer1M`, or a number as a value) rather than a table by model.
 */
const isSinglePrice = (o: Record<string, unknown>): boolean =>
  "inputPer1M" in o || "outputPer1M" in o || Object.values(o).some((v) => !Predicate.isObject(v))

/**
 * The problems of a price table (an experiment's `pricing`), each with its field path under
 * `path` (`pricing.gpt-4o.inputPer1M`): not an object, a price that is not an object, a
 * missing field, a value that is not a finite number, a negative value, an unknown field.
 * Empty: valid.
 *
 * @since 0.8.0
 * @category validation
 */
export const tableIssues = (u: unknown, path = "pricing"): ReadonlyArray<ConfigIssue> => {
  if (u === undefined) return []
  if (!Predicate.isObject(u) || Array.isArray(u)) {
    return [{ path, message: "pricing must be an object: model name → { inputPer1M, outputPer1M }" }]
  }
  return Object.entries(u as Record<string, unknown>).flatMap(([model, price]) => priceIssues(price, `${path}.${model}`))
}

/**
 * The problems of a resource's `pricing` (a single price or a table by model; see
 * {@link ResourcePricingSchema}), with field paths under `path`.
 *
 * @since 0.8.0
 * @category validation
 */
export const resourcePricingIssues = (u: unknown, path: string): ReadonlyArray<ConfigIssue> => {
  if (u === undefined) return []
  if (!Predicate.isObject(u) || Array.isArray(u)) {
    return [{ path, message: "pricing must be { inputPer1M, outputPer1M } or model name → { inputPer1M, outputPer1M }" }]
  }
  const o = u as Record<string, unknown>
  return isSinglePrice(o) ? priceIssues(o, path) : tableIssues(o, path)
}

/**
 * The meta key under which a resource carries its own pricing (`Resource.make`'s `pricing`
 * option and a config resource's `pricing` are stored there, so that adding a price never
 * changes a resource's generated id).
 *
 * @since 0.8.0
 * @category constants
 */
export const RESOURCE_META_KEY = "pricing"

const asPrice = (u: unknown): ModelPrice | undefined => {
  if (!Predicate.isObject(u)) return undefined
  const o = u as Record<string, unknown>
  const i = o["inputPer1M"]
  const out = o["outputPer1M"]
  return typeof i === "number" && typeof out === "number" ? { inputPer1M: i, outputPer1M: out } : undefined
}

/**
 * The price of a call: `models` are the names to try in order (the model the server named,
 * then the one asked for; `undefined` entries skipped). The resource's own pricing
 * (`resource.meta.pricing`: a single price wins for every model, a table by model name) is
 * tried first, then `table`. `undefined`: no configured price.
 *
 * @since 0.8.0
 * @category pricing
 */
export const priceFor = (
  models: ReadonlyArray<string | undefined>,
  table: PriceTable | undefined,
  resource?: Pick<ResourceInfo, "meta"> | undefined
): ModelPrice | undefined => {
  const own = resource?.meta[RESOURCE_META_KEY]
  if (Predicate.isObject(own)) {
    const o = own as Record<string, unknown>
    if (isSinglePrice(o)) {
      const p = asPrice(o)
      if (p !== undefined) return p
    } else {
      for (const m of models) {
        if (m === undefined) continue
        const p = asPrice(o[m])
        if (p !== undefined) return p
      }
    }
  }
  if (table === undefined) return undefined
  for (const m of models) {
    if (m === undefined) continue
    const p = table[m]
    if (p !== undefined) return p
  }
  return undefined
}

/**
 * An amount of US dollars rounded to 1e-9 USD (a billionth of a dollar), the precision of
 * every cost assay produces: each call's cost ({@link costOf}) and every total of costs as it
 * leaves the program (reports, exports, `/stats`, the dashboard, study trial costs), so that a
 * sum of many calls prints `0.001458`, not `0.0014579999999999997` (binary floating-point
 * addition of decimal fractions).
 *
 * @param usd - an amount in US dollars (a finite number; others are returned as they are)
 * @returns the amount rounded to the nearest 1e-9 USD
 * @since 0.9.0
 * @category pricing
 */
export const roundUsd = (usd: number): number => (Number.isFinite(usd) ? Math.round(usd * 1e9) / 1e9 : usd)

/**
 * The cost in US dollars of `tokensIn` input and `tokensOut` output tokens at `price`:
 * `(tokensIn × inputPer1M + tokensOut × outputPer1M) / 1e6`, rounded to 1e-9 USD
 * ({@link roundUsd}).
 *
 * @since 0.8.0
 * @category pricing
 */
export const costOf = (price: ModelPrice, tokensIn: number, tokensOut: number): number =>
  roundUsd((tokensIn * price.inputPer1M + tokensOut * price.outputPer1M) / 1e6)

/**
 * How a call's cost was found: `pricing` (a configured price), `server` (the server's own
 * `usage.cost`, no configured price covering the call).
 *
 * @since 0.8.0
 * @category models
 */
export type CostSource = "pricing" | "server"

/**
 * Prices one call (see the module docs): with a configured price for one of `models`, the
 * tokens at that price (`source: "pricing"`); else the server's reported cost when it gave
 * one (`source: "server"`); else `undefined` (the cost is unknown).
 *
 * @since 0.8.0
 * @category pricing
 */
export const priceCall = (call: {
  readonly models: ReadonlyArray<string | undefined>
  readonly tokensIn: number
  readonly tokensOut: number
  readonly serverCostUsd?: number | undefined
  readonly table: PriceTable | undefined
  readonly resource?: Pick<ResourceInfo, "meta"> | undefined
}): { readonly costUsd: number; readonly source: CostSource } | undefined => {
  const price = priceFor(call.models, call.table, call.resource)
  if (price !== undefined) return { costUsd: costOf(price, call.tokensIn, call.tokensOut), source: "pricing" }
  const s = call.serverCostUsd
  if (s !== undefined && Number.isFinite(s) && s >= 0) return { costUsd: s, source: "server" }
  return undefined
}

/**
 * Characters per token of {@link estimateTokens} (4: OpenAI's rule of thumb for English).
 *
 * @since 0.8.0
 * @category constants
 */
export const CHARS_PER_TOKEN = 4

/**
 * An estimate of the tokens of a text when the server reports none: its length in UTF-16
 * code units divided by {@link CHARS_PER_TOKEN}, rounded up (`""` → 0).
 *
 * @since 0.8.0
 * @category estimation
 */
export const estimateTokens = (text: string): number => Math.ceil(text.length / CHARS_PER_TOKEN)
