/**
 * The artifact backend port: where the bytes of a stored artifact live. Whatever the backend,
 * the store keeps each artifact's digest, size and codec, so an artifact is the same object to
 * everything above the store.
 *
 * Implementations (src/layers/ArtifactBackends.ts): `inline` (default, bytes in the store),
 * `file` (content-addressed files under a root for payloads of at least `minBytes`), `null`
 * (bytes dropped). {@link parseBackendSpec} reads the forms a config or the CLI accepts.
 *
 * @since 0.1.0
 */
import type { Effect, Option } from "effect"
import { Context, Either } from "effect"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"

/**
 * Where one payload was put: `inline` (the store keeps `payload`), `blob` (the backend keeps
 * it under `ref`), `none` (dropped).
 *
 * @since 0.1.0
 * @category models
 */
export type Placement =
  | { readonly storage: "inline"; readonly payload: Uint8Array }
  | { readonly storage: "blob"; readonly ref: string }
  | { readonly storage: "none" }

/**
 * An artifact backend.
 *
 * - `put(payload)` decides where the bytes go and writes them (atomically, for files);
 * - `get(ref)` reads a blob back: `None` when it is missing (a deleted file), never a failure;
 * - `exists(ref)` checks a blob without reading it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ArtifactBackendService {
  /** `"inline"`, `"file"`, `"null"` or a plugin's own name. */
  readonly kind: string
  readonly put: (payload: Uint8Array) => Effect.Effect<Placement, StoreUnavailable>
  readonly get: (ref: string) => Effect.Effect<Option.Option<Uint8Array>, StoreUnavailable>
  readonly exists: (ref: string) => Effect.Effect<boolean, StoreUnavailable>
}

/**
 * The artifact backend tag.
 *
 * @since 0.1.0
 * @category tags
 */
export class ArtifactBackend extends Context.Tag("assay/ArtifactBackend")<ArtifactBackend, ArtifactBackendService>() {}

/**
 * Default spill threshold of the file backend: 256 KiB (262,144 bytes).
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_MIN_BYTES = 262_144

/**
 * A parsed backend choice.
 *
 * @since 0.1.0
 * @category models
 */
export type BackendSpec =
  | { readonly kind: "inline" }
  | { readonly kind: "null" }
  | { readonly kind: "file"; readonly root: string; readonly minBytes: number }

/**
 * What a config may say: `"inline"`, `"null"`, `"file:///abs/path"` or
 * `{ kind, root?, minBytes? }` (`min_bytes` is accepted too).
 *
 * @since 0.1.0
 * @category models
 */
export type BackendInput = string | { readonly kind: string; readonly root?: string; readonly minBytes?: number; readonly min_bytes?: number }

const bad = (message: string) => Either.left(new ConfigError({ message, issues: [{ path: "artifactBackend", message }] }))

/**
 * Parses a backend choice, or fails with `ConfigError` (unknown kind, a file backend without
 * an absolute root, a negative or non-integer `minBytes`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const parseBackendSpec = (input: BackendInput): Either.Either<BackendSpec, ConfigError> => {
  if (typeof input === "string") {
    if (input === "inline") return Either.right({ kind: "inline" })
    if (input === "null") return Either.right({ kind: "null" })
    if (input.startsWith("file://")) {
      let root: string
      try {
        root = decodeURIComponent(new URL(input).pathname)
      } catch {
        return bad(`invalid file backend URI "${input}"`)
      }
      if (root === "" || root === "/") return bad(`file backend URI "${input}" has no root directory`)
      return Either.right({ kind: "file", root, minBytes: DEFAULT_MIN_BYTES })
    }
    return bad(`unknown artifact backend "${input}" (expected "inline", "null" or "file:///path")`)
  }
  switch (input.kind) {
    case "inline":
    case "null":
      return Either.right({ kind: input.kind })
    case "file": {
      const root = input.root
      if (typeof root !== "string" || !root.startsWith("/")) {
        return bad(`file backend needs an absolute "root" directory`)
      }
      const minBytes = input.minBytes ?? input.min_bytes ?? DEFAULT_MIN_BYTES
      if (!Number.isInteger(minBytes) || minBytes < 0) {
        return bad(`file backend "minBytes" must be a non-negative integer, got ${String(minBytes)}`)
      }
      return Either.right({ kind: "file", root, minBytes })
    }
    default:
      return bad(`unknown artifact backend kind "${input.kind}" (expected "inline", "null" or "file")`)
  }
}
