/**
 * The identity of suites and their members, as pure functions: what a valid suite or member id
 * is, how a member's pipelines are named, and how a {@link PipelineSpec} is tagged with the
 * member it belongs to.
 *
 * A suite runs several experiments (its **members**) under one runner. Each member keeps its
 * own pipeline identities: a member's pipeline id is
 * `memberDigest(suiteId, experimentId) + "-" + digest(localKey)`, where the local key is the key
 * the pipeline has outside suites (its content address or its explicit key). So
 *
 * - the same sample in two members gives two pipelines (different prefixes);
 * - the id depends on nothing but the suite id, the member id and the local key: renaming a
 *   member's label or its template, reordering the members or adding one changes no existing
 *   id;
 * - the 12-hex prefix before the `-` names the member, so a store can route a pipeline's writes
 *   to the member's database from the id alone ({@link memberDigestOf}).
 *
 * Ids ({@link checkId}) are 1–80 ASCII letters, digits, `-` and `_`, starting with a letter or a
 * digit and not a Windows device name: they become directory names (`experiments/ID/`) in the
 * `byExperiment` layout, so they must be valid file names everywhere.
 *
 * Nothing in this module performs I/O.
 *
 * @since 0.5.0
 */
import { Schema } from "effect"
import type { PipelineId } from "./Ids.js"
import { canonicalJsonUnsafe, digest, type Json } from "./Json.js"
import type { PipelineSpec } from "./Pipeline.js"

// ---------------------------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------------------------

/**
 * How a suite's output root is laid out:
 *
 * - `"combined"` (the default): one `state.db` (and `artifacts/`) for every member;
 * - `"byExperiment"`: a catalog `suite.db` and one `experiments/ID/state.db` (and
 *   `artifacts/`) per member.
 *
 * @since 0.5.0
 * @category schemas
 */
export const SuiteLayout = Schema.Literal("combined", "byExperiment").annotations({
  identifier: "SuiteLayout",
  description: "combined: one state.db for every member; byExperiment: suite.db + experiments/ID/state.db"
})

/**
 * A suite layout: `"combined"` or `"byExperiment"` (see {@link SuiteLayout}).
 *
 * @since 0.5.0
 * @category models
 */
export type SuiteLayout = typeof SuiteLayout.Type

// ---------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------

/**
 * The longest suite or member id, in characters.
 *
 * @since 0.5.0
 * @category ids
 */
export const MAX_ID_LENGTH = 80

const ID_CHARS = /^[A-Za-z0-9_-]*$/
const ID_START = /^[A-Za-z0-9]/

/**
 * The Windows reserved device names (Microsoft, "Naming Files, Paths, and Namespaces"): a file
 * named so (with or without an extension) cannot be created on Windows. Compared
 * case-insensitively. `COM0` and `LPT0` are listed by Microsoft's current page too.
 *
 * @since 0.5.0
 * @category ids
 */
export const RESERVED_NAMES: ReadonlyArray<string> = [
  "CON",
  "PRN",
  "AUX",
  "NUL",
  ...Array.from({ length: 10 }, (_, i) => `COM${i}`),
  ...Array.from({ length: 10 }, (_, i) => `LPT${i}`)
]

const RESERVED = new Set(RESERVED_NAMES)

/**
 * Checks a suite id or a member (experiment) id.
 *
 * @param text - the candidate id
 * @returns `undefined` when the id is valid, otherwise the reason it is not (a phrase to put
 *   after the field path, e.g. `"is longer than 80 characters (93)"`)
 *
 * Rules: 1–{@link MAX_ID_LENGTH} characters, only ASCII letters, digits, `-` and `_`, the first
 * a letter or a digit, and not one of {@link RESERVED_NAMES} (case-insensitive, also when
 * followed by an extension such as `con.txt`). Uniqueness among members is the caller's
 * (case-insensitive, see {@link idKey}).
 *
 * @since 0.5.0
 * @category ids
 */
export const checkId = (text: string): string | undefined => {
  if (typeof text !== "string") return "must be a string"
  if (text.length === 0) return "must not be empty"
  if (text.length > MAX_ID_LENGTH) return `is longer than ${MAX_ID_LENGTH} characters (${text.length})`
  if (!ID_CHARS.test(text)) {
    // every character that is not allowed, each once (`"bad study!"` names the space and `!`)
    const bad = [...new Set([...text].filter((c) => !/[A-Za-z0-9_-]/.test(c)))].map((c) => JSON.stringify(c))
    const listed = bad.length === 1 ? bad[0]! : `${bad.slice(0, -1).join(", ")} and ${bad[bad.length - 1]}`
    return `contains ${listed}: only ASCII letters, digits, "-" and "_" are allowed`
  }
  if (!ID_START.test(text)) return "must start with an ASCII letter or digit"
  const base = text.split(".")[0]!.toUpperCase()
  if (RESERVED.has(base)) return `is a reserved device name (${base}) on Windows`
  return undefined
}

/**
 * The key ids are compared by for uniqueness: two member ids that differ only in letter case
 * are the same member (they would be the same directory on a case-insensitive file system).
 *
 * @param id - a suite or member id
 * @returns the id in lower case
 *
 * @since 0.5.0
 * @category ids
 */
export const idKey = (id: string): string => id.toLowerCase()

/**
 * The field path of member `id` in a suite file, for error messages: `experiments.baseline`,
 * or `experiments["a.b"]` when the id holds a character that would make the path ambiguous (a
 * dot, a bracket, a quote, white space) or is empty; `rest` is appended (`.config`).
 *
 * @param id - a member id (valid or not)
 * @param rest - the rest of the path, starting with "." or "[" (default none)
 * @returns the path
 *
 * @since 0.5.0
 * @category ids
 */
export const memberPath = (id: string, rest = ""): string =>
  (id === "" || /[.\s[\]"'`]/.test(id) ? `experiments[${JSON.stringify(id)}]` : `experiments.${id}`) + rest

/**
 * A suite or member id as a Schema: a string that passes {@link checkId}; the failure message is
 * the reason {@link checkId} gives.
 *
 * @since 0.5.0
 * @category schemas
 */
export const Id = Schema.String.pipe(
  Schema.filter((s) => {
    const reason = checkId(s)
    return reason === undefined ? true : `${JSON.stringify(s)} ${reason}`
  }, {
    identifier: "SuiteId",
    description: "1-80 ASCII letters, digits, '-' or '_', starting with a letter or digit, not a device name",
    jsonSchema: { pattern: "^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$" }
  })
)

/**
 * The name a member's unbound local pool gets in the suite: `experiment:ID:NAME`. Two members
 * that both declare a pool `apis` without binding it get two independent pools; nothing is
 * merged by name.
 *
 * @param experimentId - the member id
 * @param name - the pool's name in the member's own configuration
 * @returns the suite-wide pool name
 *
 * @since 0.5.0
 * @category ids
 */
export const privatePoolName = (experimentId: string, name: string): string => `experiment:${experimentId}:${name}`

// ---------------------------------------------------------------------------------------------
// Member pipeline ids
// ---------------------------------------------------------------------------------------------

/**
 * The format marker digested with the suite and member ids; bumping it changes every member's
 * pipeline ids.
 *
 * @since 0.5.0
 * @category identity
 */
export const MEMBER_FORMAT = "assay-suite-member-v1"

const memberDigests = new Map<string, string>()

/**
 * The digest naming a member: the first 12 hex characters of `Json.digest` (BLAKE2b-512) of the
 * canonical JSON `["assay-suite-member-v1", suiteId, experimentId]`. Ids are digested as
 * given (case preserved).
 *
 * @param suiteId - the suite id
 * @param experimentId - the member id
 * @returns 12 lowercase hex characters
 *
 * @since 0.5.0
 * @category identity
 */
export const memberDigest = (suiteId: string, experimentId: string): string => {
  const k = `${suiteId.length}:${suiteId}:${experimentId}`
  let d = memberDigests.get(k)
  if (d === undefined) {
    d = digest(canonicalJsonUnsafe([MEMBER_FORMAT, suiteId, experimentId])).slice(0, 12)
    if (memberDigests.size >= 4096) memberDigests.clear()
    memberDigests.set(k, d)
  }
  return d
}

/**
 * A member pipeline's id: `${memberDigest(suiteId, experimentId)}-${digest(localKey)}`, i.e.
 * 12 hex characters, a `-`, and the 32-hex `Json.digest` of the local key's UTF-8 bytes. It is
 * stable (a function of these three strings only) and routable: the part before the `-` names
 * the member (see {@link memberDigestOf}).
 *
 * @param suiteId - the suite id
 * @param experimentId - the member id
 * @param localKey - the pipeline's key outside suites (its content address or explicit key)
 * @returns the pipeline id (45 characters)
 *
 * @since 0.5.0
 * @category identity
 */
export const memberPipelineId = (suiteId: string, experimentId: string, localKey: string): PipelineId =>
  `${memberDigest(suiteId, experimentId)}-${digest(localKey).slice(0, 32)}` as PipelineId

const MEMBER_ID = /^([0-9a-f]{12})-[0-9a-f]{32}$/

/**
 * The member digest of a suite-shaped pipeline id (see {@link memberPipelineId}).
 *
 * @param pipelineId - any pipeline id
 * @returns its 12-hex prefix when it has the member pipeline id's shape, otherwise `undefined`
 *   (an id outside suites; an explicit key that happens to have the same shape is not told
 *   apart, so route with it only inside a suite's store)
 *
 * @since 0.5.0
 * @category identity
 */
export const memberDigestOf = (pipelineId: string): string | undefined => MEMBER_ID.exec(pipelineId)?.[1]

// ---------------------------------------------------------------------------------------------
// Membership
// ---------------------------------------------------------------------------------------------

/**
 * Which suite member a pipeline belongs to (`PipelineSpec.member`; absent outside suites):
 *
 * - `suiteId`, `experimentId`: the suite and the member;
 * - `localKey`: the spec's key before it was tagged (its content address or its explicit key);
 * - `poolAliases`: the member's local pool name → the actual pool name in the suite (a shared
 *   pool it is bound to, or its private `experiment:ID:NAME`); a name absent here is used as is;
 * - `outputDir`: the absolute directory the member's files go to: the suite root (`combined`)
 *   or `ROOT/experiments/ID` (`byExperiment`); tasks see it as `ctx.outputDir`;
 * - `variables`: a study trial's variables (name → value), deeply frozen; tasks see them as
 *   `ctx.variables` (`{}` when absent).
 *
 * @since 0.5.0
 * @category models
 */
export interface Membership {
  readonly suiteId: string
  readonly experimentId: string
  readonly localKey: string
  readonly poolAliases: Readonly<Record<string, string>>
  readonly outputDir: string
  readonly variables?: Readonly<Record<string, Json>> | undefined
}

const frozenCopies = new WeakMap<object, Readonly<Record<string, Json>>>()

const deepFreeze = (value: Json): Json => {
  if (value === null || typeof value !== "object") return value
  if (Array.isArray(value)) return Object.freeze(value.map(deepFreeze))
  const out: Record<string, Json> = {}
  for (const [k, v] of Object.entries(value)) out[k] = deepFreeze(v as Json)
  return Object.freeze(out)
}

/**
 * A deeply frozen copy of a trial's variables (name → JSON value), made once per object given
 * (the same object gives the same copy back, so tagging every spec of a member costs one
 * lookup). A copy made here is its own copy: freezing it again gives it back unchanged. The
 * caller's object is never frozen or shared, so no trial can change what another one reads.
 *
 * @param variables - name → JSON value
 * @returns the frozen copy
 *
 * @since 0.6.0
 * @category constructors
 */
export const frozenVariables = (variables: Readonly<Record<string, Json>>): Readonly<Record<string, Json>> => {
  let copy = frozenCopies.get(variables)
  if (copy === undefined) {
    copy = deepFreeze(variables as Json) as Readonly<Record<string, Json>>
    frozenCopies.set(variables, copy)
    frozenCopies.set(copy, copy)
  }
  return copy
}

/**
 * Re-keys a spec into a suite member: `pipelineId` and `key` become
 * {@link memberPipelineId}`(suiteId, experimentId, localKey)` and `member` is set (its
 * `variables`, when given, as their {@link frozenVariables} copy). The seed, its digests,
 * `repeat`, `explicitKey` and the template are unchanged.
 *
 * The local key is the spec's `key`, or, for a spec that is already tagged, its
 * `member.localKey` (so tagging again, e.g. into another member, starts from the original key,
 * never from a member id).
 *
 * @param spec - the spec as bound outside suites
 * @param m - the membership, without `localKey` (taken from the spec)
 * @returns a new frozen spec of the same type
 *
 * @since 0.5.0
 * @category constructors
 */
export const tagSpec = <S extends PipelineSpec<any, any, any, any>>(spec: S, m: Omit<Membership, "localKey">): S => {
  const localKey = spec.member?.localKey ?? spec.key
  const pipelineId = memberPipelineId(m.suiteId, m.experimentId, localKey)
  const member: Membership = Object.freeze({
    suiteId: m.suiteId,
    experimentId: m.experimentId,
    localKey,
    poolAliases: Object.freeze({ ...m.poolAliases }),
    outputDir: m.outputDir,
    ...(m.variables === undefined ? {} : { variables: frozenVariables(m.variables) })
  })
  return Object.freeze({ ...spec, pipelineId, key: pipelineId, member })
}
