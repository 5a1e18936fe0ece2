/**
 * OutputFile: where a command that writes a file (export, merge) puts its bytes, chosen from
 * what the path names, so that a failure never leaves a partial or stray file and a path is
 * never replaced by something of another kind.
 *
 * | OUT | how it is written |
 * | --- | --- |
 * | `-` | standard output, streamed (not atomic: a failure leaves what was written) |
 * | a regular file, or a path that does not exist | atomically: a temp file beside it, renamed over it at the end |
 * | a symbolic link (a chain of them, dangling or not) | its final target, atomically as above; the link stays a link |
 * | a descriptor of this process (`/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`) | written through the descriptor, streamed |
 * | another process's descriptor (`/proc/PID/fd/N`) | opened and streamed in append mode, never renamed over |
 * | a character device, a FIFO | opened and streamed, never renamed over |
 * | a directory, a socket, a block device | refused with `OutputFileError` |
 *
 * The temp file is named predictably, `.<name>.assay-tmp-<pid>` (`-<n>` appended when the same
 * process writes the same target twice at once), in the target's directory (a rename across
 * file systems is not atomic). It is removed on every exit path of the scope that opened it
 * (failure, interruption, Ctrl-C); a temp file left by a process that was killed (SIGKILL, an
 * out-of-memory abort) is removed by the next `open` of the same target: a temp whose pid is
 * no longer alive, or is this process's own pid but not held by it (a pid reused in a
 * container), is swept. The file is flushed to disk (`fsync`) before the rename, so a crash
 * never leaves a renamed but empty target; an existing target's permission bits are kept.
 *
 * Plain `node:fs`, so that the functions need no platform layer (`R = never`): the library
 * API (`Export.exportStores`, `Merge.mergeReports(...).export`) is used without one.
 *
 * @since 0.1.0
 */
import { Effect, Schema, type Scope } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import type { Writable } from "node:stream"

/**
 * Opening, writing, flushing or renaming an output failed; `path` is the path the user gave.
 * When the output was atomic, nothing is left at the target that was not there before.
 *
 * @since 0.1.0
 * @category errors
 */
export class OutputFileError extends Schema.TaggedError<OutputFileError>("assay/OutputFileError")("OutputFileError", {
  message: Schema.String,
  path: Schema.String
}) {}

/**
 * How an output is written: `atomic` (temp file renamed over the target), `direct` (the path
 * opened and streamed: devices, FIFOs, descriptor aliases), `stdout` (`-`).
 *
 * @since 0.1.0
 * @category models
 */
export type OutputMode = "atomic" | "direct" | "stdout"

/**
 * An open output.
 *
 * - `write(buffers, onWritten?)`: writes them in order; suspends while the stream's buffer is
 *   full (backpressure), so at most about {@link HIGH_WATER_MARK} bytes wait in memory beyond
 *   those just handed over. `onWritten(b)` is called once `b` has been written and may be
 *   reused (a caller recycles its buffers instead of leaving them to the garbage collector).
 * - `commit`: ends the output: flushes, then (atomic) renames the temp file over the target.
 *   Without a successful `commit`, closing the scope removes the temp file.
 *
 * @since 0.1.0
 * @category models
 */
export interface OutputFile {
  readonly mode: OutputMode
  /** The path as given. */
  readonly path: string
  /** Where the bytes end up: the resolved target file, or `"-"`. */
  readonly target: string
  /** The temp file (atomic mode only). */
  readonly temp: string | undefined
  readonly write: (
    buffers: ReadonlyArray<Uint8Array>,
    onWritten?: ((buffer: Uint8Array) => void) | undefined
  ) => Effect.Effect<void, OutputFileError>
  readonly commit: Effect.Effect<void, OutputFileError>
}

/**
 * Bytes a file stream buffers before `write` waits for it to drain: 1 MiB.
 *
 * @since 0.1.0
 * @category constants
 */
export const HIGH_WATER_MARK = 1 << 20

/** Symbolic links followed before giving up (Linux's own limit, `MAXSYMLINKS`, is 40). */
const MAX_LINKS = 40

const fail = (path: string, what: string, e: unknown) =>
  new OutputFileError({ message: `cannot ${what} ${path}: ${e instanceof Error ? e.message : String(e)}`, path })

const errnoOf = (e: unknown): string | undefined =>
  typeof e === "object" && e !== null && typeof (e as { code?: unknown }).code === "string" ? (e as { code: string }).code : undefined

/**
 * Whether `abs` (an absolute path, not resolved further) names an already open descriptor of
 * some process rather than a file: `/dev/stdin|stdout|stderr`, `/dev/fd/N`, `/proc/PID/fd/N`.
 * Their "targets" are kernel magic links (a pipe has no path), so they are opened, never
 * resolved and renamed over.
 *
 * @since 0.1.0
 * @category paths
 */
export const isDescriptorAlias = (abs: string): boolean =>
  /^\/dev\/(?:stdin|stdout|stderr|fd\/\d+)$/.test(abs) || /^\/proc\/(?:self|thread-self|\d+)(?:\/task\/\d+)?\/fd\/\d+$/.test(abs)

/**
 * Follows the chain of symbolic links that starts at `abs` and returns the path it ends at
 * (which may not exist: a dangling link is followed to where its target would be). Fails with
 * `OutputFileError` on a loop (more than 40 links).
 *
 * @since 0.1.0
 * @category paths
 */
export const followLinks = (abs: string): Effect.Effect<string, OutputFileError> =>
  Effect.try({
    try: () => {
      let p = abs
      for (let i = 0; i <= MAX_LINKS; i++) {
        let st: fs.Stats
        try {
          st = fs.lstatSync(p)
        } catch (e) {
          if (errnoOf(e) === "ENOENT") return p
          throw e
        }
        if (!st.isSymbolicLink()) return p
        p = nodePath.resolve(nodePath.dirname(p), fs.readlinkSync(p))
      }
      throw new Error(`more than ${MAX_LINKS} symbolic links (a loop?)`)
    },
    catch: (e) => fail(abs, "resolve", e)
  })

/** Temp files of this process, by path: never swept while held. */
const held = new Set<string>()

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/**
 * The temp file name of `target` for process `pid`: `.<name>.assay-tmp-<pid>` in the same
 * directory (`-<n>` appended for the n-th concurrent write of one process, n ≥ 1).
 *
 * @since 0.1.0
 * @category paths
 */
export const tempPath = (target: string, pid: number, n = 0): string =>
  nodePath.join(nodePath.dirname(target), `.${nodePath.basename(target)}.assay-tmp-${pid}${n === 0 ? "" : `-${n}`}`)

/** Whether process `pid` exists (`EPERM`: it exists but belongs to another user). */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return errnoOf(e) === "EPERM"
  }
}

/**
 * Removes the temp files of `target` left by writers that are gone: `.<name>.assay-tmp-<pid>`
 * (and `-<n>` variants) whose pid is not alive, or is this process's pid but not held by it;
 * also the temp names of earlier assay versions (`.<name>.<pid>.<random>.tmp`) under the same
 * rule. Best effort: returns the paths removed, never fails (an unreadable directory is
 * reported by the `open` that follows).
 *
 * @since 0.1.0
 * @category temp files
 */
export const sweepStale = (target: string): Effect.Effect<ReadonlyArray<string>> =>
  Effect.sync(() => {
    const dir = nodePath.dirname(target)
    const base = escapeRe(nodePath.basename(target))
    const pattern = new RegExp(`^\\.${base}\\.(?:assay-tmp-(\\d+)(?:-\\d+)?|(\\d+)\\.[0-9a-z]+\\.tmp)$`)
    let names: Array<string>
    try {
      names = fs.readdirSync(dir)
    } catch {
      return []
    }
    const removed: Array<string> = []
    for (const name of names) {
      const m = pattern.exec(name)
      if (m === null) continue
      const pid = Number(m[1] ?? m[2])
      const p = nodePath.join(dir, name)
      if (pid === process.pid ? held.has(p) : alive(pid)) continue
      try {
        fs.unlinkSync(p)
        removed.push(p)
      } catch {
        // gone already, or not ours to remove: the next sweep tries again
      }
    }
    return removed
  })

/** Writes `buffers` in order, then waits for `drain` when the stream's buffer is full. */
const writeTo = (
  stream: Writable,
  path: string,
  buffers: ReadonlyArray<Uint8Array>,
  onWritten: ((buffer: Uint8Array) => void) | undefined
): Effect.Effect<void, OutputFileError> =>
  Effect.suspend(() => {
    if (stream.errored !== null) return Effect.fail(fail(path, "write", stream.errored))
    let ok = true
    for (const b of buffers) {
      if (b.byteLength === 0) continue
      ok = onWritten === undefined ? stream.write(b) : stream.write(b, (e) => {
        if (e == null) onWritten(b)
      })
    }
    if (ok) return Effect.void
    return Effect.async<void, OutputFileError>((resume) => {
      const done = (e?: Error) => {
        stream.off("drain", onDrain)
        stream.off("error", done)
        resume(e === undefined ? Effect.void : Effect.fail(fail(path, "write", e)))
      }
      const onDrain = () => done()
      stream.once("drain", onDrain)
      stream.once("error", done)
      return Effect.sync(() => {
        stream.off("drain", onDrain)
        stream.off("error", done)
      })
    })
  })

/** Opens a file write stream, failing with `OutputFileError` when the open fails. */
const openStream = (file: string, path: string, flags: string, flush: boolean) =>
  Effect.async<fs.WriteStream, OutputFileError>((resume) => {
    const ws = fs.createWriteStream(file, { flags, highWaterMark: HIGH_WATER_MARK, flush })
    const onError = (e: Error) => resume(Effect.fail(fail(path, "create", e)))
    ws.once("error", onError)
    ws.once("open", () => {
      ws.off("error", onError)
      resume(Effect.succeed(ws))
    })
  })

/** Ends a file stream (flushing it to disk when it was opened with `flush`) and closes it. */
const endStream = (ws: fs.WriteStream, path: string) =>
  Effect.async<void, OutputFileError>((resume) => {
    const onError = (e: Error) => resume(Effect.fail(fail(path, "write", e)))
    ws.once("error", onError)
    ws.once("close", () => {
      ws.off("error", onError)
      if (ws.errored === null) resume(Effect.void)
    })
    ws.end()
  })

/** Abandons a stream after a failure: later errors are ignored, the descriptor is closed. */
const abandon = (ws: fs.WriteStream) =>
  Effect.sync(() => {
    ws.on("error", () => {})
    ws.destroy()
  })

/**
 * The descriptor number `abs` names in this process (`/dev/stdout` → 1, `/dev/stderr` → 2,
 * `/dev/fd/N`, `/proc/self/fd/N`, `/proc/<own pid>/fd/N` → N), or `undefined`. Such a path is
 * written through the descriptor itself: opening it again fails when it is a socket (ENXIO),
 * which is what a parent process often hands its child as standard output.
 *
 * @since 0.1.0
 * @category paths
 */
export const ownDescriptor = (abs: string): number | undefined => {
  if (abs === "/dev/stdout") return 1
  if (abs === "/dev/stderr") return 2
  const m = /^\/dev\/fd\/(\d+)$/.exec(abs) ??
    new RegExp(`^/proc/(?:self|thread-self|${process.pid})(?:/task/\\d+)?/fd/(\\d+)$`).exec(abs)
  return m === null ? undefined : Number(m[1])
}

/**
 * An already open stream of this process (standard output or error, or a descriptor), written
 * and never closed. While it is open, an `error` listener keeps a failed write (EPIPE: the
 * reader went away) from crashing the process: the next `write` fails with `OutputFileError`.
 */
const streamOutput = (path: string, target: string, stream: Writable): Effect.Effect<OutputFile, never, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => {
        const onError = () => {}
        stream.on("error", onError)
        return onError
      }),
      (onError) => Effect.sync(() => stream.off("error", onError))
    ),
    (): OutputFile => ({
      mode: path === "-" ? "stdout" : "direct",
      path,
      target,
      temp: undefined,
      write: (buffers, onWritten) => writeTo(stream, path, buffers, onWritten),
      // not ours to close: wait until what was written has been handed on
      commit: Effect.async<void, OutputFileError>((resume) => {
        stream.write(new Uint8Array(0), (e) => resume(e == null ? Effect.void : Effect.fail(fail(path, "write", e))))
      })
    })
  )

/** The stream of descriptor `fd` of this process (standard output and error are Node's own). */
const descriptorStream = (fd: number): Writable =>
  fd === 1 ? process.stdout : fd === 2 ? process.stderr : fs.createWriteStream("", { fd, autoClose: false, highWaterMark: HIGH_WATER_MARK })

/** A descriptor alias, device or FIFO: opened in append mode and streamed; closed with the scope. */
const directOutput = (path: string, target: string): Effect.Effect<OutputFile, OutputFileError, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(openStream(target, path, "a", false), (ws) => (ws.closed ? Effect.void : abandon(ws))),
    (ws): OutputFile => ({
      mode: "direct",
      path,
      target,
      temp: undefined,
      write: (buffers, onWritten) => writeTo(ws, path, buffers, onWritten),
      commit: endStream(ws, path)
    })
  )

/** Claims a temp name for `target` (held by this process until released). */
const claimTemp = (target: string): string => {
  for (let n = 0;; n++) {
    const p = tempPath(target, process.pid, n)
    if (!held.has(p)) {
      held.add(p)
      return p
    }
  }
}

const atomicOutput = (path: string, target: string, mode: number | undefined): Effect.Effect<OutputFile, OutputFileError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* sweepStale(target)
    const opened = yield* Effect.acquireRelease(
      Effect.suspend(() => {
        const temp = claimTemp(target)
        return openStream(temp, path, "wx", true).pipe(
          Effect.map((ws) => ({ ws, temp, committed: false })),
          Effect.tapError(() => Effect.sync(() => held.delete(temp)))
        )
      }),
      (o) =>
        Effect.sync(() => {
          if (!o.committed) {
            o.ws.on("error", () => {})
            o.ws.destroy()
            try {
              fs.rmSync(o.temp, { force: true })
            } catch {
              // best effort: the next open of this target sweeps it
            }
          }
          held.delete(o.temp)
        })
    )
    const { temp, ws } = opened
    return {
      mode: "atomic",
      path,
      target,
      temp,
      write: (buffers, onWritten) => writeTo(ws, path, buffers, onWritten),
      commit: Effect.gen(function*() {
        yield* endStream(ws, path)
        yield* Effect.try({
          try: () => {
            if (mode !== undefined) fs.chmodSync(temp, mode & 0o7777)
            fs.renameSync(temp, target)
            opened.committed = true
          },
          catch: (e) => fail(path, "rename a temp file to", e)
        })
      })
    } satisfies OutputFile
  })

/**
 * Opens an output for `path` in the current scope (see the module docs for what each kind of
 * path gives). Fails with `OutputFileError` when the path is a directory, a socket or a block
 * device, a link
 * chain loops, or the file cannot be created (a missing directory, no permission).
 *
 * @param path the output path as given by the user (`-` = standard output)
 * @since 0.1.0
 * @category constructors
 */
export const open = (path: string): Effect.Effect<OutputFile, OutputFileError, Scope.Scope> =>
  Effect.gen(function*() {
    if (path === "-") return yield* streamOutput(path, "-", process.stdout)
    const abs = nodePath.resolve(path)
    const fd = ownDescriptor(abs)
    if (fd !== undefined) return yield* streamOutput(path, abs, descriptorStream(fd))
    if (isDescriptorAlias(abs)) return yield* directOutput(path, abs)
    const target = yield* followLinks(abs)
    const st = yield* Effect.try({
      try: () => {
        try {
          return fs.statSync(target)
        } catch (e) {
          if (errnoOf(e) === "ENOENT") return undefined
          throw e
        }
      },
      catch: (e) => fail(path, "inspect", e)
    })
    if (st === undefined || st.isFile()) return yield* atomicOutput(path, target, st?.mode)
    if (st.isCharacterDevice() || st.isFIFO()) return yield* directOutput(path, target)
    const what = st.isDirectory()
      ? "a directory"
      : st.isSocket()
      ? "a socket"
      : st.isBlockDevice()
      ? "a block device"
      : "not a regular file"
    return yield* new OutputFileError({ message: `cannot write ${path}: it is ${what}`, path })
  })

/**
 * Writes `bytes` to `path` through {@link open} and commits: atomically for a file, streamed
 * for standard output and devices. A convenience for small outputs written at once.
 *
 * @since 0.1.0
 * @category constructors
 */
export const writeAll = (path: string, bytes: Uint8Array): Effect.Effect<void, OutputFileError> =>
  Effect.scoped(Effect.flatMap(open(path), (out) => Effect.zipRight(out.write([bytes]), out.commit)))
