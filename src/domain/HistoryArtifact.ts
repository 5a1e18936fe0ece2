/**
 * HistoryArtifact: a payload that carries named, detached snapshots of application state.
 *
 * A task that sends work back (a validator rewinding a generator) often wants to hand back a
 * state the author chose, while the states the work went through stay inspectable. A
 * {@link HistoryArtifact} holds the current `state` (strict JSON) and a `history` of snapshots
 * (`{ id, label, state, metadata }`, oldest first). It is a value the task returns, not a store
 * record: nothing in the runner reads it to decide where to go next, and no snapshot is taken
 * automatically; persistence happens when the runner commits the task's output (or a control
 * transfer), like any other artifact.
 *
 * Rules (each enforced, each failure a thrown {@link HistoryArtifactError}):
 * - every operation returns a new value; the receiver never changes (the instance is frozen);
 * - state and metadata are strict JSON (see `Json.canonicalJson`), copied and deep-frozen on the
 *   way in, so changing the object you passed in never changes the artifact, and nothing read
 *   out of it (`state`, `history`, {@link HistoryArtifact.snapshot}) can be changed;
 * - snapshot ids count up from 0 and are never reused, not even after {@link HistoryArtifact.prune};
 * - labels are non-empty and unique; the prefix `snapshot:` is reserved for the stable id form
 *   (`"snapshot:3"` selects the snapshot with id 3);
 * - the selected snapshot (the one {@link HistoryArtifact.restore} chose last) cannot be pruned.
 *
 * Subtypes: an application extends {@link Class} with its own identifier and registers the
 * class in the pipeline's `CodecRegistry` with {@link register}. The versioned codec
 * ({@link codecName}, `"history-v1"`) records the subtype, and decoding returns an instance of
 * that subclass; a subtype the registry does not know fails to encode and to decode with an
 * `ArtifactCodecError`, it never comes back as a bare `HistoryArtifact`.
 *
 * @example
 * ```ts
 * import { Codec, HistoryArtifact } from "assay"
 *
 * class GenerationState extends HistoryArtifact.Class<GenerationState>("app/GenerationState") {}
 *
 * const registry = HistoryArtifact.register(Codec.CodecRegistry.default(), GenerationState)
 *
 * const first = new GenerationState({ state: { prompt: "Return JSON", temperature: 0.2 } })
 *   .checkpoint("before-generation")
 * const tried = first.withState({ ...first.stateObject(), answer: "invalid" }).checkpoint("after-generation")
 * const again = tried.restore("before-generation")   // selected; the later snapshot stays in history
 * // registry.dump(again) → { codec: "history-v1", typeName: "app/GenerationState", data }
 * ```
 *
 * @since 0.4.0
 */
import { Either, Equal, Hash, Predicate, Schema } from "effect"
import { type Codec, type CodecRegistry, SelfRegisteringId } from "./Codec.js"
import { ArtifactCodecError } from "./Errors.js"
import { canonicalJson, canonicalJsonBytes, type Json } from "./Json.js"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * Why a {@link HistoryArtifact} operation was refused.
 *
 * - `notJson`: a state or metadata value is not strict JSON (the message names the path);
 * - `invalidLabel`: a label that is not a non-empty string;
 * - `reservedLabel`: a label starting with `snapshot:`;
 * - `duplicateLabel`: a label already used by a snapshot in the history;
 * - `unknownSnapshot`: a selector that matches no snapshot (or is not a valid selector);
 * - `selectedSnapshot`: pruning the selected snapshot;
 * - `invalidHistory`: constructor input (or decoded data) that breaks an invariant (ids not
 *   increasing, an id at or above `nextSnapshot`, `selected` not in the history, …).
 *
 * @since 0.4.0
 * @category errors
 */
export const HistoryErrorReason = Schema.Literal(
  "notJson",
  "invalidLabel",
  "reservedLabel",
  "duplicateLabel",
  "unknownSnapshot",
  "selectedSnapshot",
  "invalidHistory"
)

/**
 * @since 0.4.0
 * @category errors
 */
export type HistoryErrorReason = typeof HistoryErrorReason.Type

/**
 * A {@link HistoryArtifact} operation was refused. Thrown (the operations are synchronous,
 * like `Codec`'s declarations); inside an Effect, wrap the call in `Effect.try` to get it as a
 * typed failure. A `Schema.TaggedError`, so a task failure carrying it round-trips through the
 * store.
 *
 * @since 0.4.0
 * @category errors
 */
export class HistoryArtifactError extends Schema.TaggedError<HistoryArtifactError>("assay/HistoryArtifactError")(
  "HistoryArtifactError",
  {
    reason: HistoryErrorReason,
    message: Schema.String
  }
) {}

const refuse = (reason: HistoryErrorReason, message: string): never => {
  throw new HistoryArtifactError({ reason, message })
}

// ---------------------------------------------------------------------------------------------
// Detached JSON
// ---------------------------------------------------------------------------------------------

/** Values this module copied and deep-froze itself: safe to share without another copy. */
const detachedValues = new WeakSet<object>()

const deepFreeze = (u: unknown): void => {
  if (u === null || typeof u !== "object") return
  Object.freeze(u)
  if (Array.isArray(u)) for (const x of u) deepFreeze(x)
  else for (const k in u) deepFreeze((u as Record<string, unknown>)[k])
}

/**
 * A detached, deep-frozen copy of a strict JSON value (keys in canonical order, `-0` as `0`,
 * `undefined` properties dropped), or a thrown `notJson` error naming `where` and the path.
 */
const detach = (u: unknown, where: string): Json => {
  if (u === null || typeof u !== "object") {
    // scalars are immutable; only the JSON check is needed
    return Either.match(canonicalJson(u), {
      onLeft: (e) => refuse("notJson", `${where} is not strict JSON: ${e.reason}`),
      onRight: () => (Object.is(u, -0) ? 0 : u) as Json
    })
  }
  if (detachedValues.has(u)) return u as Json
  const text = Either.getOrElse(
    canonicalJson(u),
    (e) => refuse("notJson", `${where}${e.path.slice(1)} is not strict JSON: ${e.reason}`)
  )
  const copy = JSON.parse(text) as Json
  deepFreeze(copy)
  detachedValues.add(copy as object)
  return copy
}

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * A strict JSON value as a Schema (a declaration checked with `Json.isStrictJson`; encoding and
 * decoding leave the value as it is).
 *
 * @since 0.4.0
 * @category schemas
 */
export const JsonValue: Schema.Schema<Json> = Schema.declare(
  (u): u is Json => Either.isRight(canonicalJson(u)),
  { identifier: "Json", description: "a strict JSON value" }
)

/**
 * One snapshot: its `id` (stable, never reused), its unique `label`, the `state` it captured
 * and the author's `metadata` (`null` when none was given). Always deep-frozen.
 *
 * @since 0.4.0
 * @category models
 */
export const Snapshot = Schema.Struct({
  id: Schema.NonNegativeInt,
  label: Schema.String,
  state: JsonValue,
  metadata: JsonValue
})

/**
 * @since 0.4.0
 * @category models
 */
export type Snapshot = typeof Snapshot.Type

/**
 * How a snapshot is chosen: a number is its id; a string `"snapshot:N"` is the id `N`; any
 * other string is a label.
 *
 * @since 0.4.0
 * @category models
 */
export type Selector = number | string

/**
 * The label prefix reserved for the stable id form of a selector (`"snapshot:0"`).
 *
 * @since 0.4.0
 * @category constants
 */
export const reservedPrefix = "snapshot:"

const STABLE_ID = /^snapshot:(0|[1-9][0-9]*)$/

const checkLabel = (label: unknown, where: string): string => {
  if (typeof label !== "string" || label === "") {
    return refuse("invalidLabel", `${where} must be a non-empty string, got ${JSON.stringify(label) ?? String(label)}`)
  }
  if (label.startsWith(reservedPrefix)) {
    return refuse(
      "reservedLabel",
      `${where} ${JSON.stringify(label)} is reserved: labels starting with "${reservedPrefix}" name snapshot ids`
    )
  }
  return label
}

const isId = (u: unknown): u is number => typeof u === "number" && Number.isSafeInteger(u) && u >= 0

/** The constructor input: `state` is required, the rest default to an empty history. */
interface Props {
  readonly state: Json
  readonly history?: ReadonlyArray<Snapshot> | undefined
  readonly selected?: number | null | undefined
  readonly nextSnapshot?: number | undefined
}

/**
 * Checks and detaches constructor input. Snapshot records already produced by this module
 * (frozen, in `detachedRecords`) are reused as they are.
 */
const detachedRecords = new WeakSet<object>()

const normalize = (props: Props): Required<{ [K in keyof Props]: Exclude<Props[K], undefined> }> => {
  if (!Predicate.isObject(props)) return refuse("invalidHistory", "HistoryArtifact: expected { state, history?, selected?, nextSnapshot? }")
  const state = detach(props.state, "state")
  const rawHistory = props.history ?? []
  if (!Array.isArray(rawHistory)) return refuse("invalidHistory", "history must be an array of snapshots")
  const history: Array<Snapshot> = []
  const labels = new Set<string>()
  let lastId = -1
  for (let i = 0; i < rawHistory.length; i++) {
    const raw = rawHistory[i] as Snapshot
    const where = `history[${i}]`
    if (!Predicate.isObject(raw)) return refuse("invalidHistory", `${where} must be a snapshot { id, label, state, metadata }`)
    if (!isId(raw.id)) return refuse("invalidHistory", `${where}.id must be a non-negative integer, got ${String(raw.id)}`)
    if (raw.id <= lastId) {
      return refuse("invalidHistory", `${where}.id ${raw.id} is not greater than the previous id ${lastId} (ids increase, oldest first)`)
    }
    lastId = raw.id
    const label = checkLabel(raw.label, `${where}.label`)
    if (labels.has(label)) return refuse("duplicateLabel", `${where}.label ${JSON.stringify(label)} is used twice`)
    labels.add(label)
    if (detachedRecords.has(raw)) history.push(raw)
    else {
      const record: Snapshot = Object.freeze({
        id: raw.id,
        label,
        state: detach(raw.state, `${where}.state`),
        metadata: raw.metadata === undefined ? null : detach(raw.metadata, `${where}.metadata`)
      })
      detachedRecords.add(record)
      history.push(record)
    }
  }
  const nextSnapshot = props.nextSnapshot ?? lastId + 1
  if (!isId(nextSnapshot)) return refuse("invalidHistory", `nextSnapshot must be a non-negative integer, got ${String(nextSnapshot)}`)
  if (nextSnapshot <= lastId) {
    return refuse("invalidHistory", `nextSnapshot ${nextSnapshot} must be greater than every snapshot id (the last is ${lastId})`)
  }
  const selected = props.selected ?? null
  if (selected !== null && !history.some((s) => s.id === selected)) {
    return refuse("invalidHistory", `selected ${String(selected)} is not the id of a snapshot in the history`)
  }
  return { state, history: Object.freeze(history), selected, nextSnapshot }
}

const describeSnapshots = (history: ReadonlyArray<Snapshot>): string =>
  history.length === 0 ? "the history is empty" : `snapshots: ${history.map((s) => `${s.id} ${JSON.stringify(s.label)}`).join(", ")}`

/** The canonical JSON identity of an artifact (for Equal/Hash), computed once per instance. */
const identities = new WeakMap<HistoryArtifact, string>()

const fields = {
  state: JsonValue,
  history: Schema.optionalWith(Schema.Array(Snapshot), { default: () => [] }),
  selected: Schema.optionalWith(Schema.NullOr(Schema.NonNegativeInt), { default: () => null }),
  nextSnapshot: Schema.optionalWith(Schema.NonNegativeInt, { default: () => 0 })
}

/**
 * A payload with named, detached snapshots of application state (see the module
 * documentation for the rules). A `Schema.Class`: `new HistoryArtifact({ state })` builds one,
 * and the class is a Schema whose encoded side is `{ state, history, selected, nextSnapshot }`.
 * Subclass it with {@link Class}.
 *
 * - `state`: the current state (strict JSON, deep-frozen);
 * - `history`: every snapshot, oldest first (deep-frozen);
 * - `selected`: the id {@link HistoryArtifact.restore} chose last, or `null`;
 * - `nextSnapshot`: the id the next {@link HistoryArtifact.checkpoint} takes (ids are never
 *   reused, so this only grows).
 *
 * The constructor throws {@link HistoryArtifactError} for input that breaks a rule (state not
 * JSON, decreasing ids, duplicate or reserved labels, a `selected` id not in the history, a
 * `nextSnapshot` not above every id). Equality (`Equal.equals`) is structural: same class and
 * same canonical JSON.
 *
 * @since 0.4.0
 * @category models
 */
export class HistoryArtifact extends Schema.Class<HistoryArtifact>("assay/HistoryArtifact")(fields) {
  // The one override of a Schema class constructor in assay, on purpose: it keeps the Schema
  // constructor's signature (decoding calls `new this(props, true)` and lands here too, which the
  // codec tests check), and it is the only place every construction path (`new`, decoding, the
  // operations' copies) passes through, so detachment, freezing and the invariants cannot be
  // skipped. Every invariant is checked here, so the Schema's validation of the same fields
  // would only repeat it.
  // @effect-diagnostics-next-line overriddenSchemaConstructor:off
  constructor(props: Props, options?: Schema.MakeOptions) {
    void options
    super(normalize(props), true)
    Object.freeze(this)
  }

  /**
   * Registers this class (the one it is called on, a subclass included) with the `history-v1`
   * codec: what `CodecRegistry.registerSchema` does for a HistoryArtifact class, so a task that
   * declares one as its output Schema gets the versioned codec without calling {@link register}.
   */
  static [SelfRegisteringId](this: HistoryClass, registry: CodecRegistry): CodecRegistry {
    return register(registry, this)
  }

  /**
   * A new value with a snapshot of the current state appended under `label` (with optional
   * JSON `metadata`, `null` when omitted). Throws {@link HistoryArtifactError}: a label that is
   * empty, reserved (`snapshot:` prefix) or already in the history; metadata that is not JSON.
   *
   * @since 0.4.0
   */
  checkpoint(label: string, metadata?: Json): this {
    checkLabel(label, "label")
    if (this.history.some((s) => s.label === label)) {
      return refuse("duplicateLabel", `label ${JSON.stringify(label)} is already used by a snapshot (labels are unique)`)
    }
    const record: Snapshot = Object.freeze({
      id: this.nextSnapshot,
      label,
      state: this.state,
      metadata: metadata === undefined ? null : detach(metadata, "metadata")
    })
    detachedRecords.add(record)
    return this.copy({ history: [...this.history, record], nextSnapshot: this.nextSnapshot + 1 })
  }

  /**
   * A new value whose current state is (a detached copy of) `state`; no snapshot is taken and
   * `selected` is kept. Throws {@link HistoryArtifactError} (`notJson`) for a non-JSON state.
   *
   * @since 0.4.0
   */
  withState(state: Json): this {
    return this.copy({ state })
  }

  /**
   * The snapshot a selector picks (a number is an id, `"snapshot:N"` the id `N`, any other
   * string a label). The record is deep-frozen, so it is detached from the artifact. Throws
   * {@link HistoryArtifactError} (`unknownSnapshot`) when no snapshot matches.
   *
   * @since 0.4.0
   */
  snapshot(selector: Selector): Snapshot {
    return this.history[this.indexOf(selector)]!
  }

  /**
   * Whether a selector picks a snapshot of this history (never throws).
   *
   * @since 0.4.0
   */
  has(selector: Selector): boolean {
    return this.find(selector) >= 0
  }

  /**
   * A new value whose state is the chosen snapshot's state and whose `selected` is its id. The
   * whole history stays, so later stages can still inspect the states that were left behind.
   * Throws {@link HistoryArtifactError} (`unknownSnapshot`).
   *
   * @since 0.4.0
   */
  restore(selector: Selector): this {
    const snap = this.snapshot(selector)
    return this.copy({ state: snap.state, selected: snap.id })
  }

  /**
   * A new value without the chosen snapshots. `nextSnapshot` is kept, so a pruned id is never
   * given to a later snapshot. Throws {@link HistoryArtifactError}: `unknownSnapshot` for a
   * selector that matches nothing, `selectedSnapshot` when a selector picks the selected
   * snapshot (restore another one first). Nothing is removed when any selector is refused.
   *
   * @since 0.4.0
   */
  prune(...selectors: ReadonlyArray<Selector>): this {
    if (selectors.length === 0) return this
    const drop = new Set<number>()
    for (const selector of selectors) {
      const snap = this.snapshot(selector)
      if (snap.id === this.selected) {
        return refuse(
          "selectedSnapshot",
          `snapshot ${snap.id} ${JSON.stringify(snap.label)} is the selected snapshot and cannot be pruned`
        )
      }
      drop.add(snap.id)
    }
    return this.copy({ history: this.history.filter((s) => !drop.has(s.id)) })
  }

  /**
   * The current state when it is a JSON object (a convenience for spreading:
   * `artifact.withState({ ...artifact.stateObject(), answer })`); throws
   * {@link HistoryArtifactError} (`invalidHistory`) when the state is not an object.
   *
   * @since 0.4.0
   */
  stateObject(): { readonly [key: string]: Json } {
    const s = this.state
    if (s === null || typeof s !== "object" || Array.isArray(s)) {
      return refuse("invalidHistory", `the current state is ${s === null ? "null" : Array.isArray(s) ? "an array" : typeof s}, not a JSON object`)
    }
    return s as { readonly [key: string]: Json }
  }

  /** @internal */
  [Equal.symbol](that: Equal.Equal): boolean {
    return that instanceof HistoryArtifact && that.constructor === this.constructor && identityOf(that) === identityOf(this)
  }

  /** @internal */
  [Hash.symbol](): number {
    // not Hash.cached: the instance is frozen, so nothing may be defined on it
    return Hash.string(identityOf(this))
  }

  private find(selector: Selector): number {
    let id: number | undefined
    if (typeof selector === "number") id = selector
    else if (typeof selector === "string") {
      const m = STABLE_ID.exec(selector)
      if (m !== null) id = Number(m[1])
      else return this.history.findIndex((s) => s.label === selector)
    } else return -1
    return this.history.findIndex((s) => s.id === id)
  }

  private indexOf(selector: Selector): number {
    const i = this.find(selector)
    if (i < 0) {
      const what = typeof selector === "number" || (typeof selector === "string" && STABLE_ID.test(selector))
        ? `id ${String(selector)}`
        : typeof selector === "string"
        ? `label ${JSON.stringify(selector)}`
        : `selector ${String(selector)} (use an id or a label)`
      return refuse("unknownSnapshot", `no snapshot with ${what} (${describeSnapshots(this.history)})`)
    }
    return i
  }

  private copy(change: Partial<Props>): this {
    const Ctor = this.constructor as new(props: Props, options?: Schema.MakeOptions) => this
    return new Ctor({
      state: this.state,
      history: this.history,
      selected: this.selected,
      nextSnapshot: this.nextSnapshot,
      ...change
    }, true)
  }
}

const identityOf = (a: HistoryArtifact): string => {
  let id = identities.get(a)
  if (id === undefined) {
    id = Either.getOrThrow(
      canonicalJson({ state: a.state, history: a.history, selected: a.selected, nextSnapshot: a.nextSnapshot })
    )
    identities.set(a, id)
  }
  return id
}

/**
 * Whether a value is a {@link HistoryArtifact} (of any subclass).
 *
 * @since 0.4.0
 * @category guards
 */
export const isHistoryArtifact = (u: unknown): u is HistoryArtifact => u instanceof HistoryArtifact

/**
 * The base class of an application's own history payload, with its own `identifier` (the
 * type name the codec records; keep it stable across releases, like a Schema class
 * identifier):
 *
 * ```ts
 * class GenerationState extends HistoryArtifact.Class<GenerationState>("app/GenerationState") {}
 * ```
 *
 * The subclass keeps the base constructor (application fields go in `state`) and every
 * operation returns a `GenerationState`. Register it with {@link register} so that the codec
 * can write and restore it.
 *
 * @since 0.4.0
 * @category constructors
 */
export const Class = <Self = never>(
  identifier: string
): [Self] extends [never] ? "Missing `Self` generic - use `class Self extends HistoryArtifact.Class<Self>(\"id\") {}`" : HistoryClassOf<Self> => {
  if (typeof identifier !== "string" || identifier === "") {
    return refuse("invalidLabel", "HistoryArtifact.Class: the identifier must be a non-empty string")
  }
  // a plain subclass (not `extend`): construction goes through HistoryArtifact's constructor,
  // so a subtype refuses bad input with the same HistoryArtifactError as the base; the class's
  // Schema (built per class from `this`) decodes into the subclass
  class HistoryArtifactSubtype extends HistoryArtifact {
    static override identifier = identifier
  }
  return HistoryArtifactSubtype as never
}

/**
 * The type of a class made by {@link Class}: a `Schema.Class` of `Self` with the fields of
 * {@link HistoryArtifact} and its constructor.
 *
 * @since 0.4.0
 * @category models
 */
export interface HistoryClassOf<Self> extends
  Schema.Class<
    Self,
    typeof fields,
    Schema.Struct.Encoded<typeof fields>,
    never,
    Schema.Struct.Constructor<typeof fields>,
    HistoryArtifact,
    {}
  >
{}

// ---------------------------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------------------------

/**
 * The codec name (and the `format` written inside every payload): `"history-v1"`. A payload
 * of another format is refused, never read as this one.
 *
 * @since 0.4.0
 * @category codecs
 */
export const codecName = "history-v1"

/**
 * A {@link HistoryArtifact} class the codec can write and restore: the base class or one made
 * with {@link Class} (or `HistoryArtifact.extend`).
 *
 * @since 0.4.0
 * @category models
 */
export type HistoryClass = (abstract new(...args: ReadonlyArray<any>) => HistoryArtifact) & {
  readonly identifier: string
}

/**
 * The history codec: `codec.types` maps each registered type name to its class.
 *
 * @since 0.4.0
 * @category codecs
 */
export interface HistoryCodec extends Codec {
  readonly name: typeof codecName
  readonly types: ReadonlyMap<string, HistoryClass>
}

/**
 * Whether a codec is a {@link HistoryCodec}.
 *
 * @since 0.4.0
 * @category guards
 */
export const isHistoryCodec = (codec: Codec): codec is HistoryCodec =>
  codec.name === codecName && Predicate.hasProperty(codec, "types") && codec.types instanceof Map

const decoder = new TextDecoder("utf-8", { fatal: true })

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e))

const makeCodec = (types: ReadonlyMap<string, HistoryClass>): HistoryCodec => {
  const byClass = new Map<unknown, string>()
  for (const [name, cls] of types) byClass.set(cls, name)
  const known = () => [...types.keys()].join(", ")
  const fail = (typeName: string, message: string) => new ArtifactCodecError({ codec: codecName, typeName, message })
  const unregistered = (name: string) =>
    `HistoryArtifact subtype ${name} is not registered in this CodecRegistry (registered: ${known()});` +
    ` add it with HistoryArtifact.register(registry, ${name.split("/").pop()})`
  return {
    name: codecName,
    types,
    canEncode: isHistoryArtifact,
    typeNameOf: (u) => {
      const ctor = Predicate.isObject(u) ? (u as { constructor?: unknown }).constructor : undefined
      return byClass.get(ctor) ?? (ctor as { identifier?: string } | undefined)?.identifier ?? "unknown"
    },
    encode: (u) => {
      const ctor = Predicate.isObject(u) ? (u as { constructor: HistoryClass }).constructor : undefined
      const typeName = byClass.get(ctor)
      if (!isHistoryArtifact(u) || ctor === undefined) return Either.left(fail("unknown", "not a HistoryArtifact"))
      if (typeName === undefined) {
        const name = typeof ctor.identifier === "string" ? ctor.identifier : ctor.name
        return Either.left(fail(name, unregistered(ctor.name !== "" ? ctor.name : name)))
      }
      return Either.flatMap(
        Either.mapLeft(
          Schema.encodeUnknownEither(ctor as unknown as Schema.Schema<HistoryArtifact, object>)(u),
          (e) => fail(typeName, `cannot encode: ${e.message}`)
        ),
        (body) =>
          Either.mapLeft(
            canonicalJsonBytes({ ...body, format: codecName, type: typeName }),
            (e) => fail(typeName, e.message)
          )
      )
    },
    decode: (data, typeName) => {
      let json: unknown
      try {
        json = JSON.parse(decoder.decode(data))
      } catch (e) {
        return Either.left(fail(typeName, `cannot decode ${data.byteLength} bytes as UTF-8 JSON: ${errorText(e)}`))
      }
      if (!Predicate.isRecord(json) || Array.isArray(json)) {
        return Either.left(fail(typeName, "not a HistoryArtifact payload (expected a JSON object)"))
      }
      const { format, type, ...body } = json
      if (format !== codecName) {
        return Either.left(
          fail(
            typeName,
            format === undefined
              ? `not a ${codecName} payload (no "format" field)`
              : `unsupported HistoryArtifact format ${JSON.stringify(format)} (this build reads ${codecName})`
          )
        )
      }
      if (type !== typeName) {
        return Either.left(
          fail(typeName, `the payload is of type ${JSON.stringify(type)} but was recorded as ${JSON.stringify(typeName)}`)
        )
      }
      const cls = types.get(typeName)
      if (cls === undefined) {
        return Either.left(
          new ArtifactCodecError({ codec: codecName, typeName, message: unregistered(typeName), unregistered: true })
        )
      }
      try {
        return Either.mapLeft(
          Schema.decodeUnknownEither(cls as unknown as Schema.Schema<HistoryArtifact, object>, {
            onExcessProperty: "error"
          })(body),
          (e) => fail(typeName, `cannot decode as ${typeName}: ${e.message}`)
        )
      } catch (e) {
        return Either.left(fail(typeName, `cannot decode as ${typeName}: ${errorText(e)}`))
      }
    }
  }
}

const probe = new HistoryArtifact({ state: null })

/**
 * The {@link HistoryCodec} a registry currently uses for history payloads, if any.
 *
 * @since 0.4.0
 * @category codecs
 */
export const codecOf = (registry: CodecRegistry): HistoryCodec | undefined => {
  const codec = registry.codecFor(probe)
  return isHistoryCodec(codec) ? codec : undefined
}

/**
 * A new registry that writes and restores {@link HistoryArtifact}s with the `"history-v1"`
 * codec and knows `classes` (the base class always included) in addition to the ones the
 * registry already knew. The codec is bound to the base class, so it handles every
 * HistoryArtifact ahead of other codecs (a Schema codec registered for the same class
 * included), and records the exact subclass: an instance of a class that is not registered
 * fails to encode, and a payload of an unregistered type name fails to decode, each with an
 * `ArtifactCodecError` naming the type.
 *
 * Throws {@link HistoryArtifactError} (`invalidHistory`), a declaration mistake, when a class
 * is not a HistoryArtifact class, or when two different classes claim one identifier (a plain
 * `class X extends GenerationState {}` keeps its parent's identifier: give it its own with
 * {@link Class}).
 *
 * @since 0.4.0
 * @category codecs
 */
export const register = (registry: CodecRegistry, ...classes: ReadonlyArray<HistoryClass>): CodecRegistry => {
  const current = codecOf(registry)
  const types = new Map<string, HistoryClass>(current?.types ?? [[HistoryArtifact.identifier, HistoryArtifact]])
  let changed = current === undefined
  for (const cls of classes) {
    if (typeof cls !== "function" || !(cls.prototype instanceof HistoryArtifact || cls === HistoryArtifact)) {
      return refuse("invalidHistory", `register: ${String((cls as { name?: unknown })?.name ?? cls)} is not a HistoryArtifact class`)
    }
    const name = cls.identifier
    const existing = types.get(name)
    if (existing === cls) continue
    if (existing !== undefined) {
      return refuse(
        "invalidHistory",
        `register: ${cls.name} and ${existing.name} share the identifier ${JSON.stringify(name)};` +
          ` give ${cls.name} its own with HistoryArtifact.Class<${cls.name}>("…")`
      )
    }
    types.set(name, cls)
    changed = true
  }
  return changed ? registry.register(makeCodec(types), { forTypes: [HistoryArtifact] }) : registry
}
