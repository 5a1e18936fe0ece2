/**
 * The manifest of a suite root (`manifest.json`): the layout version, the suite's identity,
 * its layout, where the catalog is, and the artifact backend the root was created with. It
 * never holds member configurations or secrets: only ids, the layout and a backend spec.
 *
 * The manifest is checked before any database of the root is opened: a root keeps its suite id,
 * its layout and its backend for life (no in-place change).
 *
 * @since 0.5.0
 */
import { Effect, Either, Schema } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import { canonicalJson } from "../../../domain/Json.js"
import { SuiteLayout } from "../../../domain/Suite.js"
import type { BackendInput } from "../../../services/ArtifactBackend.js"
import { DirectoryError, makeDirectories } from "../../../services/internal/directories.js"

/**
 * The layout version this build writes and reads.
 *
 * @since 0.5.0
 * @category constants
 */
export const LAYOUT_VERSION = 1

/**
 * The file name of the manifest in a suite root.
 *
 * @since 0.5.0
 * @category constants
 */
export const MANIFEST = "manifest.json"

const BackendSpec = Schema.Union(
  Schema.String,
  Schema.Struct({
    kind: Schema.String,
    root: Schema.optionalWith(Schema.String, { exact: true }),
    minBytes: Schema.optionalWith(Schema.Number, { exact: true }),
    min_bytes: Schema.optionalWith(Schema.Number, { exact: true })
  })
)

/**
 * The manifest's Schema: `layoutVersion`, `suiteId`, `layout`, `catalog` (the catalog database
 * relative to the root: `state.db` for `combined`, `suite.db` for `byExperiment`) and the
 * optional `artifactBackend` spec (`"file"`: the layout-owned `artifacts/` directories).
 *
 * @since 0.5.0
 * @category schemas
 */
export const Manifest = Schema.Struct({
  layoutVersion: Schema.Number,
  suiteId: Schema.String,
  layout: SuiteLayout,
  catalog: Schema.Literal("state.db", "suite.db"),
  artifactBackend: Schema.optionalWith(BackendSpec, { exact: true })
})

/**
 * A decoded manifest.
 *
 * @since 0.5.0
 * @category models
 */
export type Manifest = typeof Manifest.Type

/**
 * The catalog database of a layout (relative to the root).
 *
 * @since 0.5.0
 * @category layout
 */
export const catalogOf = (layout: SuiteLayout): "state.db" | "suite.db" => (layout === "combined" ? "state.db" : "suite.db")

/**
 * The manifest a new root gets.
 *
 * @since 0.5.0
 * @category constructors
 */
export const make = (suiteId: string, layout: SuiteLayout, artifactBackend: BackendInput | undefined): Manifest =>
  artifactBackend === undefined
    ? { layoutVersion: LAYOUT_VERSION, suiteId, layout, catalog: catalogOf(layout) }
    : { layoutVersion: LAYOUT_VERSION, suiteId, layout, catalog: catalogOf(layout), artifactBackend }

const decode = Schema.decodeUnknownEither(Schema.parseJson(Manifest))

/**
 * Reads the manifest of `root`: `undefined` when there is none; fails with `StoreUnavailable`
 * when it cannot be read or is not a manifest of this layout version.
 *
 * @since 0.5.0
 * @category io
 */
export const read = (root: string): Effect.Effect<Manifest | undefined, StoreUnavailable> =>
  Effect.suspend(() => {
    const path = nodePath.join(root, MANIFEST)
    let text: string
    try {
      text = fs.readFileSync(path, "utf8")
    } catch (e) {
      if ((e as { code?: string }).code === "ENOENT") return Effect.succeed(undefined)
      return Effect.fail(new StoreUnavailable({ message: `cannot read ${path}: ${String(e)}`, path, cause: e }))
    }
    return Either.match(decode(text), {
      onLeft: (e) =>
        Effect.fail(new StoreUnavailable({ message: `${path} is not a suite manifest: ${e.message}`, path })),
      onRight: (m) =>
        m.layoutVersion === LAYOUT_VERSION
          ? Effect.succeed(m)
          : Effect.fail(
            new StoreUnavailable({
              message: `${path} has layout version ${m.layoutVersion}; this build reads version ${LAYOUT_VERSION}`,
              path
            })
          )
    })
  })

/**
 * The suite root a file belongs to, if any: a file directly in a suite root (its `state.db`,
 * `suite.db`, or any other file there) or in a member's folder (`ROOT/experiments/ID/…`).
 * Returns the root (absolute) and the suite id of its manifest (`undefined` when the manifest
 * cannot be read); `undefined` when the file is in no suite root. Reads nothing but the
 * manifest; never throws.
 *
 * @param file a file path (made absolute against the working directory)
 * @since 0.6.0
 * @category files
 */
export const ownerOfFile = (file: string): { readonly root: string; readonly suiteId: string | undefined } | undefined => {
  const dir = nodePath.dirname(nodePath.resolve(file))
  const experiments = nodePath.dirname(dir)
  const candidates = [dir, ...(nodePath.basename(experiments) === "experiments" ? [nodePath.dirname(experiments)] : [])]
  for (const root of candidates) {
    let text: string
    try {
      if (!fs.statSync(root).isDirectory()) continue
      text = fs.readFileSync(nodePath.join(root, MANIFEST), "utf8")
    } catch {
      continue
    }
    return { root, suiteId: Either.match(decode(text), { onLeft: () => undefined, onRight: (m) => m.suiteId }) }
  }
  return undefined
}

/** Canonical text of a backend spec (absent = inline). */
const backendKey = (b: BackendInput | undefined): string =>
  b === undefined || b === "inline" ? "\"inline\"" : Either.getOrElse(canonicalJson(b), () => String(b))

/**
 * Checks an existing manifest against what a writer asks for: the suite id (`ConfigError`,
 * path `suite.id`), the layout (path `output.layout`) and, when `artifactBackend` is given,
 * the backend (path `run.artifactBackend`). Returns the backend to use: the one asked for, or
 * the manifest's when none is.
 *
 * @since 0.5.0
 * @category validation
 */
export const check = (
  root: string,
  m: Manifest,
  want: { readonly suiteId: string; readonly layout: SuiteLayout; readonly artifactBackend?: BackendInput | undefined }
): Effect.Effect<BackendInput | undefined, ConfigError> => {
  const issue = (path: string, message: string) =>
    Effect.fail(new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] }))
  if (m.suiteId !== want.suiteId) {
    return issue(
      "suite.id",
      `the output root ${root} belongs to suite "${m.suiteId}", not "${want.suiteId}"; a root never changes its suite id (use another output root)`
    )
  }
  if (m.layout !== want.layout) {
    return issue(
      "output.layout",
      `the output root ${root} has layout "${m.layout}", not "${want.layout}"; a root never changes its layout in place (use another output root)`
    )
  }
  if (want.artifactBackend !== undefined && backendKey(want.artifactBackend) !== backendKey(m.artifactBackend)) {
    return issue(
      "run.artifactBackend",
      `the output root ${root} was created with the artifact backend ${backendKey(m.artifactBackend)}, not ${
        backendKey(want.artifactBackend)
      }; a root never changes its backend in place (omit it to inherit the root's)`
    )
  }
  return Effect.succeed(want.artifactBackend ?? m.artifactBackend)
}

/**
 * Writes the manifest of a new root without ever replacing one: a temp file, flushed, then
 * hard-linked to `manifest.json` (which fails if it exists). Returns the manifest now in
 * place (the one written, or the one a concurrent writer put there first).
 *
 * @since 0.5.0
 * @category io
 */
export const create = (root: string, m: Manifest): Effect.Effect<Manifest, StoreUnavailable> =>
  Effect.suspend(() => {
    const path = nodePath.join(root, MANIFEST)
    const tmp = `${path}.${process.pid}.tmp`
    try {
      makeDirectories(root)
      const fd = fs.openSync(tmp, "w")
      try {
        fs.writeSync(fd, JSON.stringify(m, null, 2) + "\n")
        fs.fsyncSync(fd)
      } finally {
        fs.closeSync(fd)
      }
      try {
        fs.linkSync(tmp, path)
      } catch (e) {
        if ((e as { code?: string }).code !== "EEXIST") throw e
        return Effect.flatMap(read(root), (found) => Effect.succeed(found ?? m))
      } finally {
        fs.rmSync(tmp, { force: true })
      }
      return Effect.succeed(m)
    } catch (e) {
      return Effect.fail(new StoreUnavailable({ message: e instanceof DirectoryError ? e.message : `cannot write ${path}: ${String(e)}`, path, cause: e }))
    }
  })
