/**
 * The real {@link ProcessRunner}, on `@effect/platform`'s `Command` and the Node command
 * executor of `@effect/platform-node`.
 *
 * What the executor gives and what this module adds (see STYLE.md §3.4):
 *
 * - The executor spawns every child with `detached: true` on POSIX, so the child leads its own
 *   process group (pgid = its pid) and signals can reach the whole tree with `kill(-pid)`.
 * - On scope close the executor only sends SIGTERM to a running child and then waits for its
 *   exit with no deadline: a child that ignores SIGTERM would keep the scope open forever.
 *   So, right after the spawn (in the same uninterruptible region, so that an interruption
 *   landing during process creation cannot skip it), this module registers its own finalizer,
 *   which runs before the executor's: on any exit of the run other than success (timeout,
 *   interruption, failure, defect) it sends **SIGKILL to the whole process group** at once (no
 *   SIGTERM grace, as in the specification) and waits for the child to be reaped, for at most
 *   {@link reapDeadline}. The executor's own finalizer then finds the child gone and does
 *   nothing. Grandchildren are in the same group and die with it (they become zombies of the
 *   init process, which reaps them; this process cannot).
 * - A run that finishes normally is not chased: its deliberate background processes
 *   (`cmd &`, daemons) are left alone. One exception belongs to the executor and is kept: after
 *   a **non-zero** exit it sends SIGTERM to the group to reap stragglers.
 * - stdout and stderr are read concurrently to end of file and capped (`maxOutputBytes`);
 *   bytes beyond the cap are read and dropped, so a chatty child never blocks on a full pipe.
 * - The exit code is data (`Command.string` / `lines` would ignore it); a child killed by a
 *   signal reports `128 + n` and the signal's name.
 *
 * Not covered (limits of process groups): descendants that leave the group (`setsid`,
 * double-forking daemons) survive a kill, and if this process itself is SIGKILLed its
 * children are orphaned. The kill after a failure is also sent when the child has already
 * exited but its output pipes are still held open by a descendant (that is what the run was
 * waiting for); Linux does not reuse a pid while a process group of that id has members, so
 * the signal cannot reach an unrelated process group in practice.
 *
 * @since 0.1.0
 */
import * as Command from "@effect/platform/Command"
import * as CommandExecutor from "@effect/platform/CommandExecutor"
import type { PlatformError } from "@effect/platform/Error"
import * as NodeCommandExecutor from "@effect/platform-node/NodeCommandExecutor"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { Clock, Duration, Effect, Exit, Layer, Option, Predicate, Stream } from "effect"
import { constants as osConstants } from "node:os"
import {
  outputCap,
  type ProcessCommand,
  type ProcessResult,
  ProcessRunner,
  type ProcessRunError,
  ProcessSpawnError,
  ProcessTimeout,
  type RunOptions,
  spawnErrorClass,
  summarize,
  tail,
  timeoutMillis,
  toArgv
} from "../services/internal/processRunner.js"

/**
 * How long the cleanup waits for a SIGKILLed child to be reported as exited: 5 seconds. Only
 * a process stuck in the kernel (uninterruptible I/O) takes longer; the cleanup then gives up
 * waiting so that it never hangs a run.
 *
 * @since 0.1.0
 * @category constants
 */
export const reapDeadline: Duration.Duration = Duration.seconds(5)

const utf8 = new TextEncoder()

/** Bytes captured from one output stream. */
interface Capture {
  readonly chunks: Array<Uint8Array>
  size: number
  truncated: boolean
}

const newCapture = (): Capture => ({ chunks: [], size: 0, truncated: false })

const textOf = (capture: Capture): string => Buffer.concat(capture.chunks, capture.size).toString("utf8")

/**
 * Reads a stream to its end, keeping the first `cap` bytes. A read error on a pipe means the
 * runtime itself is broken, so it is a defect.
 */
const drain = (stream: Stream.Stream<Uint8Array, PlatformError>, cap: number, into: Capture) =>
  Stream.runForEachChunk(stream, (chunk) =>
    Effect.sync(() => {
      for (const bytes of chunk) {
        const room = cap - into.size
        if (room <= 0) {
          if (bytes.length > 0) into.truncated = true
        } else if (bytes.length <= room) {
          into.chunks.push(bytes)
          into.size += bytes.length
        } else {
          into.chunks.push(bytes.subarray(0, room))
          into.size += room
          into.truncated = true
        }
      }
    })).pipe(Effect.orDie)

const signalPattern = /signal: (SIG[A-Z0-9]+)/

/**
 * The child's exit status. The executor fails `exitCode` when the child was killed by a
 * signal (Node reports `code = null`); that is turned into the shell's `128 + n` convention.
 */
const exitStatus = (proc: CommandExecutor.Process): Effect.Effect<{ exitCode: number; signal?: string }> =>
  proc.exitCode.pipe(
    Effect.map((code): { exitCode: number; signal?: string } => ({ exitCode: code })),
    Effect.catchAll((error) => {
      const signal = signalPattern.exec(error.message)?.[1]
      const n = signal === undefined ? undefined : (osConstants.signals as Record<string, number>)[signal]
      return n === undefined || signal === undefined
        ? Effect.dieMessage(`unexpected exit status of a child process: ${error.message}`)
        : Effect.succeed({ exitCode: 128 + n, signal })
    })
  )

const errnoOf = (u: unknown): string | undefined => {
  if (!Predicate.isObject(u)) return undefined
  const o = u as Record<string, unknown>
  if (typeof o["code"] === "string") return o["code"]
  return o["cause"] !== undefined && o["cause"] !== u ? errnoOf(o["cause"]) : undefined
}

const toSpawnError = (summary: string) => (error: PlatformError): ProcessSpawnError => {
  const reason = errnoOf(error.cause) ?? (error._tag === "SystemError" ? error.reason : "BadArgument")
  const detail = error._tag === "SystemError" ? (error.description ?? error.message) : error.message
  return new ProcessSpawnError({ command: summary, reason, detail, errorClass: spawnErrorClass(reason) })
}

/**
 * SIGKILL to the child's whole process group, then wait (at most {@link reapDeadline}) until
 * the child is reaped. Never fails: cleanup is best effort and must not replace the caller's
 * error. `ESRCH` (nothing left to kill) is the expected case after the child exited.
 */
const killGroup = (proc: CommandExecutor.Process): Effect.Effect<void> =>
  Effect.flatMap(Effect.orElseSucceed(proc.isRunning, () => false), (running) =>
    Effect.sync(() => {
      try {
        process.kill(-proc.pid, "SIGKILL")
      } catch {
        // The group is gone (ESRCH) or refused the signal. Fall back to the leader alone, but
        // only while it is unreaped: after the reap its pid may belong to someone else.
        if (running) {
          try {
            process.kill(proc.pid, "SIGKILL")
          } catch {
            // already gone
          }
        }
      }
    })).pipe(
      Effect.zipRight(Effect.interruptible(proc.exitCode).pipe(Effect.exit, Effect.timeout(reapDeadline), Effect.exit)),
      Effect.asVoid
    )

/** The full environment of the child (see {@link RunOptions} `env` / `inheritEnv`). */
const environmentOf = (options: RunOptions): Record<string, string> => {
  const env: Record<string, string | undefined> = options.inheritEnv === false ? {} : { ...process.env }
  for (const [key, value] of Object.entries(options.env ?? {})) {
    if (value === undefined) delete env[key]
    else env[key] = value
  }
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(env)) if (value !== undefined) out[key] = value
  return out
}

const buildCommand = (argv: readonly [string, ...Array<string>], options: RunOptions): Command.Command => {
  const [program, ...args] = argv
  let cmd = Command.make(program, ...args).pipe(
    Command.env(environmentOf(options), { extendEnv: false }),
    // Always a stream, so the child's stdin ends (EOF) once the input is written: the default
    // "pipe" would stay open forever and a child reading stdin would hang.
    Command.stdin(options.stdin === undefined || options.stdin === "" ? Stream.empty : Stream.make(utf8.encode(options.stdin)))
  )
  if (options.cwd !== undefined) cmd = Command.workingDirectory(cmd, options.cwd)
  return cmd
}

/**
 * Builds the runner from a `CommandExecutor` (resolved once; `run` needs nothing else).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<ProcessRunner["Type"], never, CommandExecutor.CommandExecutor> = Effect.gen(
  function*() {
    const executor = yield* CommandExecutor.CommandExecutor

    const run = (command: ProcessCommand, options: RunOptions = {}): Effect.Effect<ProcessResult, ProcessRunError> =>
      Effect.gen(function*() {
        const summary = summarize(command)
        const argv = toArgv(command)
        if (Option.isNone(argv)) {
          return yield* new ProcessSpawnError({
            command: summary,
            reason: "EmptyCommand",
            detail: "the argv is empty",
            errorClass: "fatal"
          })
        }
        const cmd = buildCommand(argv.value, options)
        const cap = outputCap(options)
        const limit = timeoutMillis(options)
        const stdout = newCapture()
        const stderr = newCapture()
        const started = yield* Clock.currentTimeMillis

        const body = Effect.scoped(
          Effect.gen(function*() {
            // Spawn and register the kill in one uninterruptible step: an interruption that
            // arrives while the process is being created is acted on only after the kill
            // finalizer exists. (The executor's spawn itself is uninterruptible anyway.)
            const proc = yield* Effect.uninterruptible(
              Command.start(cmd).pipe(
                Effect.tap((proc) =>
                  Effect.addFinalizer((exit) => Exit.isSuccess(exit) ? Effect.void : killGroup(proc))
                )
              )
            )
            const [, , status] = yield* Effect.all(
              [drain(proc.stdout, cap, stdout), drain(proc.stderr, cap, stderr), exitStatus(proc)],
              { concurrency: "unbounded" }
            )
            return status
          })
        ).pipe(
          Effect.mapError(toSpawnError(summary)),
          Effect.provideService(CommandExecutor.CommandExecutor, executor)
        )

        const status = Number.isFinite(limit)
          ? yield* body.pipe(
            Effect.timeoutFail({
              duration: Duration.millis(limit),
              onTimeout: () =>
                new ProcessTimeout({ command: summary, timeoutMs: limit, stderrTail: tail(textOf(stderr)) })
            })
          )
          : yield* body
        const finished = yield* Clock.currentTimeMillis
        return {
          command: summary,
          exitCode: status.exitCode,
          ...(status.signal === undefined ? {} : { signal: status.signal }),
          stdout: textOf(stdout),
          stderr: textOf(stderr),
          stdoutTruncated: stdout.truncated,
          stderrTruncated: stderr.truncated,
          durationMs: finished - started
        } satisfies ProcessResult
      })

    return ProcessRunner.of({ run })
  }
)

/**
 * The live layer: {@link make} over `NodeCommandExecutor` and `NodeFileSystem` (the executor
 * uses the file system to check `cwd`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<ProcessRunner> = Layer.effect(ProcessRunner, make).pipe(
  Layer.provide(NodeCommandExecutor.layer),
  Layer.provide(NodeFileSystem.layer)
)
