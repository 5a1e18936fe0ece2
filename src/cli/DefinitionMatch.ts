/**
 * What `run`, `resume` and `validate` say before a run whose definition changed (C16): a
 * pipeline's id is content-addressed by its definition's spec digest (unless the source is
 * keyed), so after one task option changes (`temperature: 0.7`, a `delay`'s duration) none
 * of the stored pipelines is found again and every row starts from its seed. Said once on
 * stderr before anything runs, from one aggregate read of the store
 * (`Store.pipelinesBySpec`), never by walking the pipelines:
 *
 * ```
 * resume: 0 of 10 stored pipelines match this definition (spec 1a2b3c4d); 10 will start from
 * their seed; the store also holds 10 pipelines of another definition (spec 9f8e7d6c)
 * ```
 *
 * @since 0.1.0
 */
import * as nodePath from "node:path"
import { Effect } from "effect"
import type { StoreUnavailable } from "../domain/Errors.js"
import type { SpecCount, StoreService } from "../services/Store.js"

/**
 * How a store's pipelines relate to the definition about to run: `specDigest` (the
 * definition's), `matching` (stored pipelines of that definition), `stored` (all stored
 * pipelines) and `others` (the other definitions and their counts, most first).
 *
 * @since 0.1.0
 * @category models
 */
export interface DefinitionMatch {
  readonly specDigest: string
  readonly matching: number
  readonly stored: number
  readonly others: ReadonlyArray<SpecCount>
}

/**
 * {@link DefinitionMatch} from a store's counts by spec digest.
 *
 * @since 0.1.0
 * @category models
 */
export const matchOf = (counts: ReadonlyArray<SpecCount>, specDigest: string): DefinitionMatch => ({
  specDigest,
  matching: counts.find((c) => c.specDigest === specDigest)?.pipelines ?? 0,
  stored: counts.reduce((n, c) => n + c.pipelines, 0),
  others: counts.filter((c) => c.specDigest !== specDigest)
})

/**
 * Reads the {@link DefinitionMatch} of `specDigest` in `store` (one aggregate query).
 *
 * @since 0.1.0
 * @category reads
 */
export const read = (store: StoreService, specDigest: string): Effect.Effect<DefinitionMatch, StoreUnavailable> =>
  Effect.map(store.pipelinesBySpec, (counts) => matchOf(counts, specDigest))

/** A spec digest as messages show it: its first 8 hex digits. */
const short = (digest: string): string => digest.slice(0, 8)

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`

/**
 * The one-line notice, or `undefined` when there is nothing to say (an empty store, or one
 * whose pipelines are all of this definition: an ordinary resume). Parameters:
 *
 * - `command`: the word the line starts with (`run`, `resume`, `validate`);
 * - `total`: the pipelines the source yields (rows × repeats), `undefined` when unknown;
 * - `keyed`: whether the source names its pipelines (`source.keyField`): their ids do not
 *   change with the definition, so a stored key of another definition is an identity conflict
 *   (the run stops, exit 2) rather than a new pipeline;
 * - `store`: named in `validate`'s line (which does not run).
 *
 * Stored pipelines of this definition may include rows the source no longer has, so when some
 * match, the pipelines that will start from their seed are "at least" `total − matching`.
 *
 * @since 0.1.0
 * @category messages
 */
export const message = (
  m: DefinitionMatch,
  options: {
    readonly command: string
    readonly total: number | undefined
    readonly keyed: boolean
    readonly store?: string | undefined
  }
): string | undefined => {
  if (m.stored === 0 || m.others.length === 0) return undefined
  const other = m.others.reduce((n, c) => n + c.pipelines, 0)
  const where = options.store === undefined ? "" : ` in ${nodePath.basename(options.store)}`
  const head = `${options.command}: ${m.matching} of ${plural(m.stored, "stored pipeline")}${where} ` +
    `match${m.matching === 1 ? "es" : ""} this definition (spec ${short(m.specDigest)})`
  const would = options.command === "validate" ? "would " : "will "
  const fresh = options.keyed
    ? `a row whose key the store holds under another definition ${would}stop the run as an identity conflict (exit 2): ` +
      "give the new definition its own store (--store or run.store)"
    : options.total === undefined
    ? `the source's pipelines that are not among them ${would}start from their seed`
    : m.matching === 0
    ? `${options.total} ${would}start from their seed`
    : options.total > m.matching
    ? `at least ${options.total - m.matching} ${would}start from their seed`
    : `the source's pipelines that are not among them ${would}start from their seed`
  const definitions = m.others.length === 1
    ? `another definition (spec ${short(m.others[0]!.specDigest)})`
    : `${m.others.length} other definitions (${
      m.others.slice(0, 3).map((c) => `spec ${short(c.specDigest)}: ${c.pipelines}`).join(", ")
    }${m.others.length > 3 ? ", …" : ""})`
  return `${head}; ${fresh}; the store also holds ${plural(other, "pipeline")} of ${definitions}`
}
