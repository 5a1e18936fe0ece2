/**
 * Codecs: how task outputs (artifacts) become bytes and come back.
 *
 * A {@link Codec} turns values it claims into bytes and back. A {@link CodecRegistry} picks the
 * codec for a value and records, next to the bytes, the codec name and a type name, so that
 * {@link CodecRegistry.load} can restore the value later (on resume, in another process).
 *
 * Built-ins:
 * - {@link JsonCodec}: canonical JSON as UTF-8 (strict JSON only), type name `"json"`;
 * - {@link BytesCodec}: raw `Uint8Array` / `Buffer`, type name `"bytes"`;
 * - {@link SchemaCodec}: values of a Schema (typically a `Schema.Class`), encoded with the
 *   Schema then written as canonical JSON; decoding runs the Schema again, so a task that
 *   declares an output class gets an instance of that class back from a checkpoint.
 *
 * Nothing here does I/O. Failures are {@link ArtifactCodecError}s in an `Either`; a codec never
 * returns a silently wrong value.
 *
 * @since 0.1.0
 */
import { Effect, Either, Option, Predicate, Schema, SchemaAST } from "effect"
import { ArtifactCodecError, type StoreUnavailable } from "./Errors.js"
import type { TraversalStore } from "./TaskStore.js"
import { canonicalJsonBytes, digest, isStrictJson } from "./Json.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * An encoded payload: the bytes, the name of the codec that wrote them and the recorded type
 * name the codec needs to restore the value (for {@link SchemaCodec}, the schema's name).
 *
 * @since 0.1.0
 * @category models
 */
export const Encoded = Schema.Struct({
  typeName: Schema.String,
  codec: Schema.String,
  data: Schema.Uint8ArrayFromSelf
})

/**
 * @since 0.1.0
 * @category models
 */
export type Encoded = typeof Encoded.Type

/**
 * A codec.
 *
 * - `name`: recorded with every payload it writes; {@link CodecRegistry.load} finds the codec
 *   by this name, so it must be stable across releases;
 * - `canEncode(u)`: whether the codec claims this value;
 * - `encode(u)`: the bytes, or an {@link ArtifactCodecError};
 * - `decode(data, typeName)`: the value, or an {@link ArtifactCodecError} (bytes it cannot
 *   read, a type name it does not know);
 * - `typeNameOf(u)` (optional): the type name to record; without it the registry records the
 *   value's constructor name (or its `typeof`).
 *
 * Codecs may throw; the registry turns a thrown exception into an {@link ArtifactCodecError}.
 *
 * @since 0.1.0
 * @category models
 */
export interface Codec {
  readonly name: string
  readonly canEncode: (u: unknown) => boolean
  readonly encode: (u: unknown) => Either.Either<Uint8Array, ArtifactCodecError>
  readonly decode: (data: Uint8Array, typeName: string) => Either.Either<unknown, ArtifactCodecError>
  readonly typeNameOf?: ((u: unknown) => string) | undefined
}

// ---------------------------------------------------------------------------------------------
// Built-in codecs
// ---------------------------------------------------------------------------------------------

const decoder = new TextDecoder("utf-8", { fatal: true })

/**
 * UTF-8 bytes of a string as a plain `Uint8Array` (a view over `Buffer.from`'s memory, which is
 * several times cheaper than `TextEncoder` for the small strings artifacts usually are).
 */
export const utf8 = (s: string): Uint8Array => {
  const b = Buffer.from(s, "utf8")
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength)
}

const parseJsonBytes = (
  data: Uint8Array,
  codec: string,
  typeName: string
): Either.Either<unknown, ArtifactCodecError> => {
  try {
    return Either.right(JSON.parse(decoder.decode(data)) as unknown)
  } catch (e) {
    return Either.left(
      new ArtifactCodecError({
        codec,
        typeName,
        message: `cannot decode ${data.byteLength} bytes as UTF-8 JSON: ${e instanceof Error ? e.message : String(e)}`
      })
    )
  }
}

/** Canonical JSON straight to bytes (big strings are not copied into an intermediate JSON text). */
const jsonBytes = (value: unknown, codec: string, typeName: string): Either.Either<Uint8Array, ArtifactCodecError> =>
  Either.mapLeft(canonicalJsonBytes(value), (e) => new ArtifactCodecError({ codec, typeName, message: e.message }))

/**
 * The JSON codec (name `"json"`, type name `"json"`): canonical JSON (see `canonicalJson`) as
 * UTF-8 bytes. It claims strict JSON values only; encoding anything else fails with an
 * {@link ArtifactCodecError} whose message names the path of the offending value
 * (`$.rows[2].at`). It is the registry's fallback.
 *
 * @since 0.1.0
 * @category codecs
 */
export const JsonCodec: Codec = {
  name: "json",
  canEncode: isStrictJson,
  encode: (u) => jsonBytes(u, "json", "json"),
  decode: (data, typeName) => parseJsonBytes(data, "json", typeName),
  typeNameOf: () => "json"
}

/**
 * The bytes codec (name `"bytes"`, type name `"bytes"`): a `Uint8Array` (a Node `Buffer`
 * included) stored as is. Decoding returns a fresh `Uint8Array` copy of the bytes.
 *
 * @since 0.1.0
 * @category codecs
 */
export const BytesCodec: Codec = {
  name: "bytes",
  canEncode: (u) => u instanceof Uint8Array,
  encode: (u) =>
    u instanceof Uint8Array
      ? Either.right(new Uint8Array(u.buffer, u.byteOffset, u.byteLength))
      : Either.left(new ArtifactCodecError({ codec: "bytes", typeName: "bytes", message: "not a Uint8Array" })),
  decode: (data) => Either.right(Uint8Array.from(data)),
  typeNameOf: () => "bytes"
}

/**
 * The codec name recorded by every {@link SchemaCodec}; the type name tells which schema.
 *
 * @since 0.1.0
 * @category constants
 */
export const schemaCodecName = "schema"

/**
 * A codec for the values of one Schema, built by {@link SchemaCodec}. `typeName` is the name
 * recorded with its payloads; `schema` is the Schema it was built from.
 *
 * @since 0.1.0
 * @category models
 */
export interface SchemaCodec extends Codec {
  readonly name: typeof schemaCodecName
  readonly typeName: string
  readonly schema: Schema.Schema<any, any, never>
}

/**
 * Whether a codec was built by {@link SchemaCodec}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isSchemaCodec = (codec: Codec): codec is SchemaCodec =>
  codec.name === schemaCodecName && Predicate.hasProperty(codec, "schema") &&
  Predicate.hasProperty(codec, "typeName") && typeof codec.typeName === "string"

/**
 * The type name recorded for a schema: its `identifier` annotation (for a `Schema.Class`,
 * the identifier given to `Schema.Class<A>("…")`), else the identifier of its type side, else
 * the class name of a schema class. `undefined` when the schema has no name.
 *
 * @since 0.1.0
 * @category codecs
 */
export const schemaTypeName = (schema: Schema.Schema.Any): string | undefined => {
  const own = (schema as { readonly identifier?: unknown }).identifier
  if (typeof own === "string" && own !== "") return own
  const annotated = SchemaAST.getIdentifierAnnotation(schema.ast).pipe(
    Option.orElse(() => SchemaAST.getIdentifierAnnotation(SchemaAST.typeAST(schema.ast)))
  )
  if (Option.isSome(annotated)) return annotated.value
  return undefined
}

const jsonText = (u: unknown): string => {
  try {
    return JSON.stringify(u, (_k, v: unknown) => typeof v === "bigint" ? `${v}n` : typeof v === "symbol" ? String(v) : v) ??
      "?"
  } catch {
    return "?"
  }
}

/**
 * A canonical text of a schema's structure, for {@link derivedTypeName}: the node kinds,
 * property names and their optionality, literals, enums, tuple elements, union members and,
 * for a refinement, its schema id and JSON Schema annotation (a custom `Schema.filter` reads
 * as `filter`). A node with an `identifier` annotation (a `Schema.Class`, `Schema.Date`, a
 * named schema) reads as that name, without its inside; a recursive reference reads as the
 * depth of the node it points back to. Other annotations (titles, descriptions, messages)
 * are left out, so a reworded description does not rename the type.
 *
 * Pure and deterministic: the same schema definition gives the same text in every process.
 *
 * @param schema - any schema.
 * @returns the text (not meant to be parsed).
 * @since 0.1.0
 * @category codecs
 */
export const schemaStructure = (schema: Schema.Schema.Any): string => {
  const open = new Map<SchemaAST.AST, number>()
  const go = (ast: SchemaAST.AST): string => {
    const named = SchemaAST.getIdentifierAnnotation(ast)
    if (Option.isSome(named)) return `#${jsonText(named.value)}`
    const back = open.get(ast)
    if (back !== undefined) return `^${back}`
    open.set(ast, open.size)
    try {
      return node(ast)
    } finally {
      open.delete(ast)
    }
  }
  const node = (ast: SchemaAST.AST): string => {
    switch (ast._tag) {
      case "Declaration":
        return `declare(${Option.getOrElse(SchemaAST.getTitleAnnotation(ast), () => "?")};${ast.typeParameters.map(go).join(",")})`
      case "Literal":
        return `lit(${jsonText(ast.literal)})`
      case "UniqueSymbol":
        return `sym(${String(ast.symbol)})`
      case "Enums":
        return `enums(${jsonText(ast.enums)})`
      case "TemplateLiteral":
        return `tpl(${jsonText(ast.head)};${ast.spans.map((s) => `${go(s.type)}:${jsonText(s.literal)}`).join(",")})`
      case "Refinement": {
        const id = Option.getOrElse(Option.map(SchemaAST.getSchemaIdAnnotation(ast), (x) => String(x)), () => "filter")
        const json = Option.getOrUndefined(SchemaAST.getJSONSchemaAnnotation(ast))
        return `refine(${go(ast.from)};${id}${json === undefined ? "" : `;${jsonText(json)}`})`
      }
      case "TupleType":
        return `tuple(${ast.elements.map((e) => `${go(e.type)}${e.isOptional ? "?" : ""}`).join(",")};${
          ast.rest.map((r) => go(r.type)).join(",")
        })`
      case "TypeLiteral":
        return `{${
          ast.propertySignatures.map((p) => `${jsonText(p.name)}${p.isOptional ? "?" : ""}:${go(p.type)}`).join(",")
        };${ast.indexSignatures.map((i) => `[${go(i.parameter)}]:${go(i.type)}`).join(",")}}`
      case "Union":
        return `(${ast.types.map(go).join("|")})`
      case "Suspend":
        return go(ast.f())
      case "Transformation": {
        const t = ast.transformation
        const detail = t._tag === "TypeLiteralTransformation"
          ? `;${t.propertySignatureTransformations.map((p) => `${jsonText(p.from)}>${jsonText(p.to)}`).join(",")}`
          : ""
        return `(${go(ast.from)}<->${go(ast.to)};${t._tag}${detail})`
      }
      default:
        return ast._tag
    }
  }
  return go(schema.ast)
}

/**
 * The type name derived for a schema that has no `identifier` (a `Schema.Struct`, a
 * `Schema.Union` of classes, …) declared as the output of the task named `owner`:
 * `OWNER:output:HASH`, where HASH is the first 12 hex characters of the {@link digest} of
 * {@link schemaStructure}. Stable across processes (a resumed run reads its checkpoints back
 * under the same name); it changes when the task is renamed or the schema's structure
 * changes, and a checkpoint written under the old name then reads as unusable (a linear
 * pipeline restarts from its seed), never as a value of the wrong shape.
 *
 * @param owner - the task's name.
 * @param schema - the task's output schema.
 * @returns the derived type name.
 * @since 0.1.0
 * @category codecs
 */
export const derivedTypeName = (owner: string, schema: Schema.Schema.Any): string =>
  `${owner}:output:${digest(schemaStructure(schema)).slice(0, 12)}`

const DERIVED = /:output:[0-9a-f]{12}$/

/**
 * Whether a recorded type name has the shape of a {@link derivedTypeName}.
 *
 * @since 0.1.0
 * @category codecs
 */
export const isDerivedTypeName = (typeName: string): boolean => DERIVED.test(typeName)

/**
 * The type name recorded for the outputs of the task named `taskName` whose output Schema is
 * `schema`: the schema's own name ({@link schemaTypeName}) when it has one, else
 * {@link derivedTypeName}. What the runner registers every task's output Schema under.
 *
 * @param taskName - the task's name.
 * @param schema - the task's output schema.
 * @returns the type name.
 * @since 0.1.0
 * @category codecs
 */
export const outputTypeName = (taskName: string, schema: Schema.Schema.Any): string =>
  schemaTypeName(schema) ?? derivedTypeName(taskName, schema)

/**
 * Builds a codec for the values of `schema` (requirements must be `never`).
 *
 * - claims a value when `Schema.is(schema)` accepts it with no excess properties (for a
 *   `Schema.Class`, an instance), so a struct schema never trims a richer value;
 * - encodes with `Schema.encodeUnknownEither(schema)` and writes the encoded form as
 *   canonical JSON (so the encoded side must be strict JSON);
 * - decodes the JSON and runs `Schema.decodeUnknownEither(schema)`, returning the class
 *   instance again;
 * - records `options.typeName`, else {@link schemaTypeName}.
 *
 * Throws an `Error` when the schema has no name and none is given (a declaration mistake).
 *
 * @since 0.1.0
 * @category codecs
 */
export const SchemaCodec = <A, I>(
  schema: Schema.Schema<A, I, never>,
  options?: { readonly typeName?: string | undefined }
): SchemaCodec => {
  const typeName = options?.typeName ?? schemaTypeName(schema)
  if (typeName === undefined) {
    throw new Error(
      "SchemaCodec: the schema has no identifier; annotate it (`.annotations({ identifier: \"Name\" })`) or pass" +
        " { typeName } (the runner passes `outputTypeName(task.name, schema)` for a task's output Schema)"
    )
  }
  // Excess properties are errors: a struct schema must not claim (and silently trim) a value
  // that carries more fields than it declares.
  const is = Schema.is(schema, { onExcessProperty: "error" })
  const encodeSchema = Schema.encodeUnknownEither(schema, { onExcessProperty: "error" })
  const decodeSchema = Schema.decodeUnknownEither(schema)
  const fail = (message: string) => new ArtifactCodecError({ codec: schemaCodecName, typeName, message })
  return {
    name: schemaCodecName,
    typeName,
    schema,
    canEncode: (u) => is(u),
    typeNameOf: () => typeName,
    encode: (u) =>
      Either.flatMap(
        Either.mapLeft(encodeSchema(u), (e) => fail(`cannot encode as ${typeName}: ${e.message}`)),
        (encoded) => jsonBytes(encoded, schemaCodecName, typeName)
      ),
    decode: (data, recorded) =>
      recorded !== typeName
        ? Either.left(fail(`this codec decodes ${typeName}, not ${recorded}`))
        : Either.flatMap(
          parseJsonBytes(data, schemaCodecName, typeName),
          (json) => Either.mapLeft(decodeSchema(json), (e) => fail(`cannot decode as ${typeName}: ${e.message}`))
        )
  }
}

// ---------------------------------------------------------------------------------------------
// CodecRegistry
// ---------------------------------------------------------------------------------------------

/**
 * A constructor a codec can be bound to with `forTypes`.
 *
 * @since 0.1.0
 * @category models
 */
export type Constructor = abstract new(...args: ReadonlyArray<any>) => unknown

const errorMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e))

const guarded = <A>(
  codec: string,
  typeName: string,
  f: () => Either.Either<A, ArtifactCodecError>
): Either.Either<A, ArtifactCodecError> => {
  try {
    return f()
  } catch (e) {
    return Either.left(new ArtifactCodecError({ codec, typeName, message: `codec threw: ${errorMessage(e)}` }))
  }
}

const constructorNameOf = (u: unknown): string => {
  if (Predicate.isObject(u)) {
    const name = (Object.getPrototypeOf(u) as { constructor?: { name?: unknown } } | null)?.constructor?.name
    if (typeof name === "string" && name !== "") return name
  }
  return u === null ? "null" : typeof u
}

/**
 * The key of a type's own registration hook: a Schema class with a static method under this
 * symbol is registered by calling it (`CodecRegistry.registerSchema(Class)` returns
 * `Class[SelfRegisteringId](registry)`) instead of getting a plain {@link SchemaCodec}. It is
 * how a `HistoryArtifact` class declared as a task's output gets its versioned `history-v1`
 * codec from the runner's automatic registration.
 *
 * @since 0.1.0
 * @category registry
 */
export const SelfRegisteringId: unique symbol = Symbol.for("assay/Codec/SelfRegistering")

/**
 * A type that registers its own codec (see {@link SelfRegisteringId}).
 *
 * @since 0.1.0
 * @category registry
 */
export interface SelfRegistering {
  readonly [SelfRegisteringId]: (registry: CodecRegistry) => CodecRegistry
}

/**
 * Decides how values become bytes and how recorded bytes come back.
 *
 * An immutable value: `register` and `registerSchema` return a new registry and leave the
 * receiver untouched, so one registry can be shared by a pipeline template and the runner
 * (and across fibers) without surprises.
 *
 * Which codec handles a value ({@link CodecRegistry.codecFor}):
 * 1. a codec bound with `forTypes` to the value's constructor (or the nearest ancestor
 *    constructor on its prototype chain) wins over everything; among bindings for the same
 *    constructor, the latest registration wins;
 * 2. otherwise the registered codecs that claim the value (`canEncode`), latest registration
 *    first, so a specialised codec is never dead code behind an earlier general one;
 * 3. otherwise {@link JsonCodec}, the fallback (always present).
 *
 * Loading finds the codec by its recorded name (the latest registration of that name), and a
 * {@link SchemaCodec} by the recorded type name. An unknown codec name, a schema type name that
 * is not registered, or bytes the codec cannot decode give an {@link ArtifactCodecError}.
 *
 * @since 0.1.0
 * @category models
 */
export class CodecRegistry {
  private constructor(
    private readonly codecs: ReadonlyArray<Codec>,
    private readonly bindings: ReadonlyArray<readonly [Constructor, Codec]>,
    private readonly schemas: ReadonlyMap<string, SchemaCodec>
  ) {}

  /**
   * A registry with only the JSON fallback.
   *
   * @since 0.1.0
   */
  static empty(): CodecRegistry {
    return new CodecRegistry([], [], new Map())
  }

  /**
   * A registry with the built-ins: {@link JsonCodec} (fallback) and {@link BytesCodec}.
   *
   * @since 0.1.0
   */
  static default(): CodecRegistry {
    return CodecRegistry.empty().register(BytesCodec)
  }

  /**
   * A new registry with `codec` added. With `forTypes`, the codec is also bound to those
   * constructors (rule 1 of {@link CodecRegistry}). A {@link SchemaCodec} is also registered
   * for loading under its type name (a later schema with the same type name replaces it).
   *
   * @since 0.1.0
   */
  register(codec: Codec, options?: { readonly forTypes?: ReadonlyArray<Constructor> | undefined }): CodecRegistry {
    const bindings = options?.forTypes === undefined || options.forTypes.length === 0
      ? this.bindings
      : [...this.bindings, ...options.forTypes.map((t) => [t, codec] as const)]
    let schemas = this.schemas
    if (isSchemaCodec(codec)) {
      const next = new Map(this.schemas)
      next.set(codec.typeName, codec)
      schemas = next
    }
    return new CodecRegistry([...this.codecs, codec], bindings, schemas)
  }

  /**
   * A new registry with a {@link SchemaCodec} for `schema`. Registering the same schema again
   * returns the receiver unchanged. Throws (a declaration mistake) when the schema has no name
   * and none is given.
   *
   * @since 0.1.0
   */
  registerSchema<A, I>(
    schema: Schema.Schema<A, I, never>,
    options?: { readonly typeName?: string | undefined }
  ): CodecRegistry {
    // a type with its own codec (a `HistoryArtifact` class) registers that codec instead
    const self = (schema as unknown as Partial<SelfRegistering>)[SelfRegisteringId]
    if (typeof self === "function") return self.call(schema, this)
    const codec = SchemaCodec(schema, options)
    if (this.schemas.get(codec.typeName)?.schema === schema) return this
    return this.register(codec)
  }

  /**
   * The codec that {@link CodecRegistry.dump} would use for `value` (never fails: JSON is the
   * fallback, even when it cannot encode the value).
   *
   * @since 0.1.0
   */
  codecFor(value: unknown): Codec {
    const bound = this.boundCodec(value)
    if (bound !== undefined) return bound
    for (let i = this.codecs.length - 1; i >= 0; i--) {
      const codec = this.codecs[i]!
      let claims = false
      try {
        claims = codec.canEncode(value)
      } catch {
        claims = false
      }
      if (claims) return codec
    }
    return JsonCodec
  }

  /**
   * The type name recorded for `value`: its codec's `typeNameOf`, else the value's
   * constructor name (or `typeof`).
   *
   * @since 0.1.0
   */
  typeNameOf(value: unknown): string {
    return this.typeNameWith(this.codecFor(value), value)
  }

  /**
   * Encodes `value` with the codec chosen by {@link CodecRegistry.codecFor}, or fails with an
   * {@link ArtifactCodecError} (a value the codec cannot write, a codec that throws).
   *
   * @since 0.1.0
   */
  dump(value: unknown): Either.Either<Encoded, ArtifactCodecError> {
    const codec = this.codecFor(value)
    // (the hot path of every checkpoint: the value's constructor name is only looked up when
    // the codec throws)
    try {
      const typeName = this.typeNameWith(codec, value)
      const encoded = codec.encode(value)
      if (encoded._tag === "Left" && codec === JsonCodec) {
        // a type that brings its own codec (a HistoryArtifact class) reached the JSON fallback:
        // say which registration is missing rather than "not a plain object"
        const ctor = (value as { readonly constructor?: unknown } | null | undefined)?.constructor
        if (typeof ctor === "function" && SelfRegisteringId in ctor) {
          const name = ctor.name !== "" ? ctor.name : typeName
          return Either.left(
            new ArtifactCodecError({
              codec: codec.name,
              typeName: name,
              message: `${name} has its own codec, which this CodecRegistry lacks: declare ${name} as the output Schema` +
                ` of the task that returns it (for a handoff payload: of any task of the pipeline), or register it` +
                ` (for a HistoryArtifact: HistoryArtifact.register(registry, ${name}))`,
              unregistered: true
            })
          )
        }
      }
      return Either.map(encoded, (data): Encoded => ({ typeName, codec: codec.name, data }))
    } catch (e) {
      return Either.left(
        new ArtifactCodecError({ codec: codec.name, typeName: constructorNameOf(value), message: `codec threw: ${errorMessage(e)}` })
      )
    }
  }

  /**
   * Restores a value from its {@link Encoded} form, or fails with an
   * {@link ArtifactCodecError}: unknown codec name, unregistered schema type name, bytes the
   * codec cannot decode.
   *
   * @since 0.1.0
   */
  load(encoded: Encoded): Either.Either<unknown, ArtifactCodecError> {
    const { codec: name, data, typeName } = encoded
    let codec: Codec | undefined
    if (name === schemaCodecName) {
      codec = this.schemas.get(typeName)
      if (codec === undefined) {
        // a derived name (`OWNER:output:HASH`) whose owner has a schema registered under another
        // hash: the task's output Schema changed since the payload was written — unusable bytes,
        // not a registration left out
        const owner = isDerivedTypeName(typeName) ? typeName.slice(0, typeName.length - 20) : undefined
        const changed = owner !== undefined &&
          [...this.schemas.keys()].some((k) => isDerivedTypeName(k) && k.slice(0, k.length - 20) === owner)
        return Either.left(
          new ArtifactCodecError({
            codec: name,
            typeName,
            message: changed
              ? `"${typeName}" was written under an earlier structure of task ${owner}'s output Schema` +
                ` (now registered: ${[...this.schemas.keys()].join(", ")}); it cannot be read back as the current one`
              : `no schema registered under type name "${typeName}"` +
                ` (registered: ${this.schemas.size === 0 ? "none" : [...this.schemas.keys()].join(", ")})`,
            unregistered: !changed
          })
        )
      }
    } else {
      codec = this.codecByName(name)
      if (codec === undefined) {
        return Either.left(
          new ArtifactCodecError({
            codec: name,
            typeName,
            message: `no codec named "${name}" is registered (known: ${this.names().join(", ")})`,
            unregistered: true
          })
        )
      }
    }
    const found = codec
    return guarded(name, typeName, () => found.decode(data, typeName))
  }

  /**
   * The names of the codecs this registry can load, the JSON fallback included.
   *
   * @since 0.1.0
   */
  names(): ReadonlyArray<string> {
    return [...new Set([JsonCodec.name, ...this.codecs.map((c) => c.name)])]
  }

  private codecByName(name: string): Codec | undefined {
    for (let i = this.codecs.length - 1; i >= 0; i--) {
      const codec = this.codecs[i]!
      if (codec.name === name && !isSchemaCodec(codec)) return codec
    }
    return name === JsonCodec.name ? JsonCodec : undefined
  }

  private boundCodec(value: unknown): Codec | undefined {
    if (this.bindings.length === 0 || !Predicate.isObject(value)) return undefined
    let proto: unknown = Object.getPrototypeOf(value)
    while (proto !== null && proto !== undefined) {
      const ctor = (proto as { constructor?: unknown }).constructor
      for (let i = this.bindings.length - 1; i >= 0; i--) {
        const [type, codec] = this.bindings[i]!
        if (type === ctor) return codec
      }
      proto = Object.getPrototypeOf(proto)
    }
    return undefined
  }

  private typeNameWith(codec: Codec, value: unknown): string {
    return codec.typeNameOf !== undefined ? codec.typeNameOf(value) : constructorNameOf(value)
  }
}

/**
 * The decoded value of one stored occurrence, read by its address (`pipelineId:seq` for the
 * first visit, `pipelineId:seq#visit` for a revisit, `pipelineId:-1` for the seed, see
 * docs/control-flow.md), superseded occurrences included. What a task uses to look at an
 * earlier draft: `getValueById(ctx.store.traversal!, registry, address)`, with the registry the
 * run was given (`RunOptions.registry`, e.g. one built with `HistoryArtifact.register`), or
 * `CodecRegistry.default()` for plain JSON values. No I/O of its own: the read is the store's.
 *
 * @param traversal - the store's traversal reads (`ctx.store.traversal` inside a task).
 * @param registry - decodes the payload by its recorded codec and type name.
 * @param address - the occurrence's address.
 * @returns `None` for an address the store does not know; the value otherwise.
 * @throws ArtifactCodecError (in the error channel) when the payload was not kept (journal
 *   `"summary"`, the null artifact backend, a deleted blob) or the registry does not know its
 *   codec or type (`unregistered: true`: register it, e.g. `HistoryArtifact.register`), or its
 *   bytes do not decode; StoreUnavailable when the store cannot be read.
 *
 * @since 0.1.0
 * @category loading
 */
export const getValueById = (
  traversal: Pick<TraversalStore, "getArtifactById">,
  registry: CodecRegistry,
  address: string
): Effect.Effect<Option.Option<unknown>, StoreUnavailable | ArtifactCodecError> =>
  Effect.flatMap(traversal.getArtifactById(address), (loaded) => {
    if (Option.isNone(loaded)) return Effect.succeedNone
    const { artifact, payload } = loaded.value
    if (!artifact.available || payload === undefined) {
      return Effect.fail(
        new ArtifactCodecError({
          codec: artifact.codec,
          typeName: artifact.typeName,
          message: `artifact ${address}: its payload was not kept (journal "summary", the null artifact backend ` +
            `or a deleted blob); only its metadata is stored`
        })
      )
    }
    return Either.match(registry.load({ codec: artifact.codec, typeName: artifact.typeName, data: payload }), {
      onLeft: (e) => Effect.fail(e),
      onRight: (value) => Effect.succeed(Option.some(value))
    })
  })
