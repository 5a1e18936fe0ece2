/**
 * `writeJsonl(path, { mode })`: a last pipeline step that appends each value to a JSON Lines
 * file and passes it on.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type { PlatformError } from "@effect/platform/Error"
import { Effect, Either } from "effect"
import { dirname } from "node:path"
import { ConfigError, FatalError } from "../domain/Errors.js"
import { canonicalJson } from "../domain/Json.js"
import * as Task from "../domain/Task.js"
import { makeDirectories } from "../services/internal/directories.js"

/**
 * Options of {@link writeJsonl}:
 * - `mode`: `"a"` (default) appends to what is there; `"w"` truncates the file at the first
 *   write of this task value in this process, then appends;
 * - `name`: the task name (default `"writeJsonl"`).
 *
 * @since 0.1.0
 * @category models
 */
export interface WriteJsonlOptions {
  readonly mode?: "a" | "w" | undefined
  readonly name?: string | undefined
}

const encoder = new TextEncoder()

/**
 * A task that writes its input as one line of canonical JSON (sorted keys) to `path` and
 * returns the input unchanged. The file's directory is created when missing. Writes of concurrent pipelines are serialised (one line is
 * never interleaved with another). Recorded as `parameters: { path, mode }`.
 *
 * Fails with `FatalError` for a value that is not strict JSON, and with the platform's
 * `PlatformError` when the file cannot be written. Throws `ConfigError` for an empty path or
 * an unknown mode.
 *
 * @since 0.1.0
 * @category tasks
 */
export const writeJsonl = <A = any>(
  path: string,
  options: WriteJsonlOptions = {}
): Task.Task<A, A, FatalError | PlatformError, FileSystem.FileSystem> => {
  const mode = options.mode ?? "a"
  const issues: Array<{ path: string; message: string }> = []
  if (typeof path !== "string" || path === "") issues.push({ path: "path", message: "path must be a non-empty string" })
  if (mode !== "a" && mode !== "w") issues.push({ path: "mode", message: `mode must be "a" or "w", got ${String(mode)}` })
  if (issues.length > 0) {
    throw new ConfigError({ message: `writeJsonl: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`, issues })
  }
  const lock = Effect.unsafeMakeSemaphore(1)
  let truncated = mode === "a"
  let ready = false
  return Task.make(
    options.name ?? "writeJsonl",
    { parameters: { path, mode }, codeDigest: `assay.writeJsonl/v1` },
    (input: A) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const line = canonicalJson(input)
        if (Either.isLeft(line)) {
          return yield* new FatalError({ message: `writeJsonl: the value is not strict JSON: ${line.left.reason}` })
        }
        yield* lock.withPermits(1)(Effect.gen(function*() {
          const flag = truncated ? "a" : "w"
          if (!ready) {
            yield* Effect.try({
              try: () => makeDirectories(dirname(path)),
              catch: (e) => new FatalError({ message: `writeJsonl: ${e instanceof Error ? e.message : String(e)}` })
            })
            ready = true
          }
          truncated = true
          yield* fs.writeFile(path, encoder.encode(`${line.right}\n`), { flag })
        }))
        return input
      })
  )
}
