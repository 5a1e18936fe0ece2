/**
 * `shellRun(command, options)`: a task that runs a subprocess on the {@link ProcessRunner}
 * service and returns its exit code and output.
 *
 * Two forms:
 * - **argv** (`["python", "post.py", "--input", "{value}"]`): no shell is involved; every
 *   occurrence of `{value}` inside an element is replaced by the pipeline's current value
 *   (a string as is, anything else as canonical JSON), and each element stays exactly one
 *   argument whatever the value contains;
 * - **string** (`"sort data.txt | uniq -c"`): run by `/bin/sh -c`; it may not contain
 *   `{value}` (the value would be pasted into shell code), which is refused when the task is
 *   defined. Likewise an argv that hands `{value}` to an interpreter inside its code
 *   (`["bash", "-c", "echo {value}"]`, `python -c`, `node -e`, an awk/sed/jq script) is
 *   refused: pass the value as its own argument (`["bash", "-c", "echo \"$1\"", "_", "{value}"]`).
 *
 * The process lifecycle (own process group; group SIGKILL and reaping on timeout,
 * interruption or failure, on every exit path) is the ProcessRunner's guarantee.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Either } from "effect"
import { ConfigError, type ConfigIssue, FatalError } from "../domain/Errors.js"
import { maskSecrets } from "../domain/internal/resource.js"
import * as Task from "../domain/Task.js"
import {
  check as checkResult,
  checkArgvCommand,
  checkStringCommand,
  type ProcessCommand,
  type ProcessFailed,
  type ProcessRunError,
  ProcessRunner,
  substituteArgv,
  toArgv
} from "../services/internal/processRunner.js"

/**
 * Options of {@link shellRun}:
 * - `timeout`: wall-clock limit of one run (default 60 seconds); on expiry the process group
 *   is killed and the attempt fails with `ProcessTimeout` (class `timeout`);
 * - `check`: fail with `ProcessFailed` (class `fatal`) on a non-zero exit (default `true`);
 *   with `false` a non-zero exit is returned as data;
 * - `cwd`, `env` (merged over this process's environment): for the child;
 * - `maxOutputBytes`: cap on captured stdout and stderr, each (default 1 MiB);
 * - `name`: the task name (default `"shellRun"`);
 * - `retry`, `version`: as in `Task.make`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ShellRunOptions {
  readonly timeout?: Duration.DurationInput | undefined
  readonly check?: boolean | undefined
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly maxOutputBytes?: number | undefined
  readonly name?: string | undefined
  readonly retry?: Task.BaseOptions["retry"]
  readonly version?: string | null | undefined
}

/**
 * What {@link shellRun} returns: the exit code, the captured output (UTF-8), whether each
 * stream was truncated, and the duration in milliseconds.
 *
 * @since 0.1.0
 * @category models
 */
export interface ShellRunOutput {
  readonly exitCode: number
  readonly stdout: string
  readonly stderr: string
  readonly stdoutTruncated: boolean
  readonly stderrTruncated: boolean
  readonly durationMs: number
}

/**
 * Defines a task that runs `command` for each value (see the module docs for the two forms).
 * Recorded as `parameters: { command, timeoutMs, check, cwd, env (secrets masked),
 * maxOutputBytes }`.
 *
 * Fails with `ProcessTimeout`, `ProcessSpawnError`, `ProcessFailed` (with `check`), or
 * `FatalError` when the value cannot be written as an argument (not strict JSON). Throws
 * `ConfigError` at definition for a string command containing `{value}`, an empty command, or
 * an invalid option.
 *
 * @since 0.1.0
 * @category tasks
 */
export const shellRun = <A = any>(
  command: ProcessCommand,
  options: ShellRunOptions = {}
): Task.Task<A, ShellRunOutput, ProcessRunError | ProcessFailed | FatalError, ProcessRunner> => {
  const issues: Array<ConfigIssue> = []
  if (typeof command === "string") {
    const checked = checkStringCommand(command)
    if (Either.isLeft(checked)) issues.push(...checked.left.issues)
    if (command.trim() === "") issues.push({ path: "command", message: "the command is empty" })
  } else if (!Array.isArray(command) || command.length === 0 || !command.every((a) => typeof a === "string")) {
    issues.push({ path: "command", message: "an argv command is a non-empty array of strings" })
  } else if (command[0] === "") {
    issues.push({ path: "command[0]", message: "the program name is empty" })
  } else {
    const checked = checkArgvCommand(command)
    if (Either.isLeft(checked)) issues.push(...checked.left.issues)
  }
  let timeoutMs = 60_000
  if (options.timeout !== undefined) {
    const d = Duration.decodeUnknown(options.timeout)
    if (d._tag === "None" || !Duration.isFinite(d.value) || Duration.toMillis(d.value) <= 0) {
      issues.push({ path: "timeout", message: `timeout must be a positive finite duration, got ${JSON.stringify(options.timeout)}` })
    } else timeoutMs = Duration.toMillis(d.value)
  }
  if (options.check !== undefined && typeof options.check !== "boolean") {
    issues.push({ path: "check", message: "check must be a boolean" })
  }
  if (options.maxOutputBytes !== undefined && (!Number.isInteger(options.maxOutputBytes) || options.maxOutputBytes < 0)) {
    issues.push({ path: "maxOutputBytes", message: "maxOutputBytes must be a non-negative integer" })
  }
  if (issues.length > 0) {
    throw new ConfigError({ message: `shellRun: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`, issues })
  }
  const check = options.check ?? true
  const runOptions = {
    timeout: Duration.millis(timeoutMs),
    ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
    ...(options.env !== undefined ? { env: options.env } : {}),
    ...(options.maxOutputBytes !== undefined ? { maxOutputBytes: options.maxOutputBytes } : {})
  }
  const argv = typeof command === "string" ? undefined : toArgv(command)
  const base: Task.BaseOptions = {
    parameters: {
      command: typeof command === "string" ? command : [...command],
      timeoutMs,
      check,
      cwd: options.cwd ?? null,
      env: options.env === undefined ? null : maskSecrets(options.env),
      maxOutputBytes: options.maxOutputBytes ?? null
    },
    codeDigest: "assay.shellRun/v1",
    ...(options.retry !== undefined ? { retry: options.retry } : {}),
    ...(options.version !== undefined ? { version: options.version } : {})
  }
  return Task.make(options.name ?? "shellRun", base, (input: A) =>
    Effect.gen(function*() {
      const runner = yield* ProcessRunner
      let cmd: ProcessCommand = command
      if (argv !== undefined && argv._tag === "Some") {
        const substituted = substituteArgv(argv.value, input)
        if (Either.isLeft(substituted)) {
          return yield* new FatalError({
            message: `shellRun: the value cannot be passed as an argument: ${substituted.left.reason}`
          })
        }
        cmd = substituted.right
      }
      const result = yield* runner.run(cmd, runOptions)
      if (check) yield* checkResult(result)
      return {
        exitCode: result.exitCode,
        stdout: result.stdout,
        stderr: result.stderr,
        stdoutTruncated: result.stdoutTruncated,
        stderrTruncated: result.stderrTruncated,
        durationMs: result.durationMs
      }
    }))
}
