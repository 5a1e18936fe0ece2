/**
 * The three built-in artifact backends: `inline` (the default: bytes stay in the store),
 * `file` (content-addressed files under a root, written atomically, for payloads of at least
 * `minBytes`) and `null` (bytes dropped; the store still keeps digest and size), and the
 * resolution of plugin backends by URI scheme ({@link layerWith}).
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Either, Layer, Option } from "effect"
import { ConfigError, type PluginError, StoreUnavailable } from "../domain/Errors.js"
import { digestFull } from "../domain/Json.js"
import type { ArtifactBackendService, BackendInput, Placement } from "../services/ArtifactBackend.js"
import { ArtifactBackend, DEFAULT_MIN_BYTES, parseBackendSpec } from "../services/ArtifactBackend.js"
import * as OutputFile from "../services/OutputFile.js"
import { makeDirectories } from "../services/internal/directories.js"
import type { ArtifactBackendFactory, Provided } from "./Plugins.js"
import * as PluginUri from "./PluginUri.js"

/**
 * The inline backend: every payload is kept by the store itself.
 *
 * @since 0.1.0
 * @category constructors
 */
export const inline: ArtifactBackendService = {
  kind: "inline",
  put: (payload) => Effect.succeed<Placement>({ storage: "inline", payload }),
  get: () => Effect.succeed(Option.none()),
  exists: () => Effect.succeed(false)
}

/**
 * The null backend: payloads are dropped (no checkpoint can be resumed from them).
 *
 * @since 0.1.0
 * @category constructors
 */
export const nullBackend: ArtifactBackendService = {
  kind: "null",
  put: () => Effect.succeed<Placement>({ storage: "none" }),
  get: () => Effect.succeed(Option.none()),
  exists: () => Effect.succeed(false)
}

const blobRefPattern = /^[0-9a-f]{128}$/

/**
 * Builds the file backend: payloads of at least `minBytes` bytes (default 262,144) are written
 * to `<root>/<first 2 hex>/<BLAKE2b-512 hex of the bytes>` by `OutputFile.writeAll` (a temp
 * file beside the blob, flushed to disk, renamed over it: atomic on POSIX), so identical
 * payloads share one file, a crash never leaves a half-written blob under its final name, and
 * a temp file left by a killed process is swept by the next write to the same blob. Smaller payloads stay inline. A missing blob reads
 * as `None`. Fails with `StoreUnavailable` on I/O errors.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeFile = (options: { readonly root: string; readonly minBytes?: number | undefined }) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = options.root.replace(/\/+$/, "")
    const minBytes = options.minBytes ?? DEFAULT_MIN_BYTES
    const fail = (message: string) => (cause: unknown) => new StoreUnavailable({ message, path: root, cause })
    yield* Effect.try({ try: () => makeDirectories(root), catch: (e) => fail(`cannot create blob root ${root}: ${e instanceof Error ? e.message : String(e)}`)(e) })
    const pathOf = (ref: string) => `${root}/${ref.slice(0, 2)}/${ref}`
    const service: ArtifactBackendService = {
      kind: "file",
      put: (payload) =>
        Effect.gen(function*() {
          if (payload.byteLength < minBytes) return { storage: "inline", payload } as Placement
          const ref = digestFull(payload)
          const target = pathOf(ref)
          const present = yield* fs.exists(target)
          if (!present) {
            yield* fs.makeDirectory(`${root}/${ref.slice(0, 2)}`).pipe(Effect.catchIf((e) => e._tag === "SystemError" && e.reason === "AlreadyExists", () => Effect.void))
            // the one atomic writer: a temp file beside the blob, flushed, renamed over it;
            // removed on failure or interruption, swept by the next write if a crash left it
            yield* OutputFile.writeAll(target, payload)
          }
          return { storage: "blob", ref } as Placement
        }).pipe(Effect.mapError(fail(`cannot write blob under ${root}`))),
      get: (ref) =>
        blobRefPattern.test(ref)
          ? fs.readFile(pathOf(ref)).pipe(
            Effect.map(Option.some),
            Effect.catchIf(
              (e) => e._tag === "SystemError" && e.reason === "NotFound",
              () => Effect.succeed(Option.none<Uint8Array>())
            ),
            Effect.mapError(fail(`cannot read blob ${ref}`))
          )
          : Effect.succeed(Option.none()),
      exists: (ref) =>
        blobRefPattern.test(ref)
          ? fs.exists(pathOf(ref)).pipe(Effect.mapError(fail(`cannot stat blob ${ref}`)))
          : Effect.succeed(false)
    }
    return service
  })

/**
 * The inline backend as a layer (the default).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerInline: Layer.Layer<ArtifactBackend> = Layer.succeed(ArtifactBackend, inline)

/**
 * The null backend as a layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerNull: Layer.Layer<ArtifactBackend> = Layer.succeed(ArtifactBackend, nullBackend)

/**
 * The file backend as a layer (see {@link makeFile}).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFile = (options: { readonly root: string; readonly minBytes?: number | undefined }) =>
  Layer.effect(ArtifactBackend, makeFile(options))

/**
 * Resolves a backend from `"inline"`, `"null"`, `"file:///abs/path"` or
 * `{ kind, root, minBytes }`. Fails with `ConfigError` on an unknown or malformed choice and
 * with `StoreUnavailable` when the file root cannot be created.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  input: BackendInput
): Layer.Layer<ArtifactBackend, ConfigError | StoreUnavailable, FileSystem.FileSystem> =>
  Either.match(parseBackendSpec(input), {
    onLeft: (e) => Layer.fail(e),
    onRight: (spec) =>
      spec.kind === "inline" ? layerInline : spec.kind === "null" ? layerNull : layerFile(spec)
  })

/**
 * Where plugin artifact backends come from: URI scheme → factory and plugin (the
 * `artifactBackends` of a `PluginRegistry`), and the directory relative parts of a URI may be
 * resolved against.
 *
 * @since 0.1.0
 * @category models
 */
export interface PluginBackends {
  readonly artifactBackends: ReadonlyMap<string, Provided<ArtifactBackendFactory>>
  readonly baseDir: string
}

const backendIssue = (message: string, suggestion?: string) =>
  new ConfigError({
    message: `run.artifactBackend: ${message}`,
    issues: [suggestion === undefined ? { path: "run.artifactBackend", message } : { path: "run.artifactBackend", message, suggestion }]
  })

/**
 * Checks a backend choice without building it: the built-in forms as {@link layer} reads them
 * (`"inline"`, `"null"`, `"file:///abs"`, `{ kind, ... }`), or a `scheme://...` string whose
 * scheme a plugin provides. Returns the `ConfigError` (path `run.artifactBackend`) that
 * {@link layerWith} would fail with, or `None`. An unknown scheme's message names it and the
 * schemes plugins provide.
 *
 * @since 0.1.0
 * @category validation
 */
export const check = (
  input: BackendInput,
  backends: ReadonlyMap<string, Provided<ArtifactBackendFactory>>
): Option.Option<ConfigError> => {
  if (typeof input === "string") {
    const parsed = PluginUri.parse(input)
    if (parsed._tag === "Malformed" && parsed.scheme !== "file") {
      return Option.some(backendIssue(`"${input}" is not a valid URI: ${parsed.message}`))
    }
    if (parsed._tag === "Uri" && parsed.scheme !== "file") {
      if (backends.has(parsed.scheme)) return Option.none()
      const known = ["file", ...backends.keys()].map((k) => `${k}://`).join(", ")
      return Option.some(backendIssue(
        `no plugin provides the artifact backend scheme "${parsed.scheme}://" (known schemes: ${known})`,
        "add the plugin that provides it to `plugins`, or use \"inline\", \"null\" or \"file:///path\""
      ))
    }
  }
  return Either.match(parseBackendSpec(input), { onLeft: Option.some, onRight: () => Option.none() })
}

/**
 * Resolves a backend like {@link layer}, and also a `scheme://...` string whose scheme a
 * plugin provides (built-in forms win: `file://` is always the file backend). The plugin's
 * factory is called with the parsed URI; a factory that throws, returns no Layer or whose
 * layer dies fails with `PluginError` (see `PluginUri.guardFactory`). Fails with `ConfigError`
 * (path `run.artifactBackend`) on an unknown scheme, naming it and the known ones.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWith = (
  input: BackendInput,
  plugins: PluginBackends
): Layer.Layer<ArtifactBackend, ConfigError | StoreUnavailable | PluginError, FileSystem.FileSystem> => {
  const problem = check(input, plugins.artifactBackends)
  if (Option.isSome(problem)) return Layer.fail(problem.value)
  if (typeof input === "string") {
    const parsed = PluginUri.parse(input)
    if (parsed._tag === "Uri" && parsed.scheme !== "file") {
      const provided = plugins.artifactBackends.get(parsed.scheme)!
      return PluginUri.guardFactory(
        "artifact backend",
        provided.plugin,
        parsed.scheme,
        () => provided.factory(parsed.uri, { baseDir: plugins.baseDir })
      )
    }
  }
  return layer(input)
}
