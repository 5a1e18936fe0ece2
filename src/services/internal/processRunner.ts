/**
 * The subprocess port: run one command to completion, capture its output, and never leave a
 * process behind on a failure path.
 *
 * This module holds the contract (the {@link ProcessRunner} tag and its {@link RunOptions} /
 * {@link ProcessResult} shapes), the typed errors, the pure helpers used by the `shellRun`
 * built-in task ({@link substituteArgv}, {@link checkStringCommand}, {@link check}), and a
 * scripted test implementation ({@link layerTest}). The real implementation, on
 * `@effect/platform`'s `Command`, is `NodeProcessRunner` in `src/layers/NodeProcessRunner.ts`.
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Either, Layer, Option, Schema } from "effect"
import { ConfigError, ErrorClass } from "../../domain/Errors.js"
import { canonicalJson, type CanonicalJsonError } from "../../domain/Json.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * A command to run.
 *
 * - An **argv** array (`["python", "post.py", "--input", path]`): the first element is the
 *   program (looked up on `PATH` when it has no slash), the rest are passed as separate
 *   arguments, verbatim. No shell is involved, so no element is ever word-split, globbed or
 *   expanded.
 * - A **string**: a shell line, run as `/bin/sh -c <string>`. Pipes, redirections and `&&`
 *   work; quoting is the caller's business.
 *
 * @since 0.1.0
 * @category models
 */
export type ProcessCommand = string | ReadonlyArray<string>

/**
 * Options of {@link ProcessRunner} `run`. Every field is optional.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunOptions {
  /**
   * Wall-clock limit for the whole run (start, output and exit). Default 60 seconds.
   * `Duration.infinity` disables it. On expiry the process group is killed and the run fails
   * with {@link ProcessTimeout}.
   */
  readonly timeout?: Duration.DurationInput | undefined
  /** Working directory of the child. Default: the current directory of this process. */
  readonly cwd?: string | undefined
  /**
   * Environment variables for the child. Merged over `process.env` unless `inheritEnv` is
   * `false`; a key set to `undefined` removes an inherited variable.
   */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /** Whether the child inherits `process.env` (default `true`). */
  readonly inheritEnv?: boolean | undefined
  /**
   * Cap on the captured bytes of stdout and of stderr, each (default 1 MiB = 1 048 576
   * bytes). Output beyond the cap is still read (so the child never blocks on a full pipe)
   * but discarded, and the result's `stdoutTruncated` / `stderrTruncated` flag is set. A
   * negative or non-finite value means the default; a fraction is rounded down.
   */
  readonly maxOutputBytes?: number | undefined
  /**
   * Text written (UTF-8) to the child's stdin, which is then closed. Without it the child's
   * stdin is an empty pipe (immediate end of file), never this process's own stdin.
   */
  readonly stdin?: string | undefined
}

/**
 * What a finished run returns. A non-zero exit is data here; {@link check} turns it into a
 * {@link ProcessFailed}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProcessResult {
  /** A short printable form of the command (see {@link summarize}). */
  readonly command: string
  /**
   * The exit status. A child killed by a signal reports `128 + signal number`, the shell's
   * convention (SIGKILL → 137), and `signal` names the signal.
   */
  readonly exitCode: number
  /** The signal that ended the child (`"SIGKILL"`), when it was killed by one. */
  readonly signal?: string | undefined
  /** Captured stdout, decoded as UTF-8 (invalid sequences become U+FFFD). */
  readonly stdout: string
  /** Captured stderr, decoded as UTF-8. */
  readonly stderr: string
  /** Whether stdout exceeded `maxOutputBytes` and was cut. */
  readonly stdoutTruncated: boolean
  /** Whether stderr exceeded `maxOutputBytes` and was cut. */
  readonly stderrTruncated: boolean
  /** Wall-clock time from spawn request to exit and end of output, in milliseconds. */
  readonly durationMs: number
}

/**
 * Default of {@link RunOptions} `timeout`: 60 seconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTimeout: Duration.Duration = Duration.seconds(60)

/**
 * Default of {@link RunOptions} `maxOutputBytes`: 1 MiB (1 048 576 bytes).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultMaxOutputBytes = 1024 * 1024

/**
 * How many trailing characters of stderr an error keeps (2 000).
 *
 * @since 0.1.0
 * @category constants
 */
export const stderrTailChars = 2000

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * The run did not finish within its `timeout`. The process group was killed (SIGKILL) and the
 * child reaped before this error was raised. Class `timeout` (`errorClass` field), so the
 * default retry policy retries it.
 *
 * @since 0.1.0
 * @category errors
 */
export class ProcessTimeout extends Schema.TaggedError<ProcessTimeout>("assay/ProcessTimeout")("ProcessTimeout", {
  /** Printable command (see {@link summarize}). */
  command: Schema.String,
  /** The limit that expired, in milliseconds. */
  timeoutMs: Schema.Number,
  /** The last characters of stderr read before the deadline. */
  stderrTail: Schema.optionalWith(Schema.String, { default: () => "" }),
  errorClass: Schema.optionalWith(Schema.Literal("timeout"), { default: () => "timeout" as const })
}) {
  override get message(): string {
    return `command timed out after ${this.timeoutMs} ms: ${this.command}`
  }
}

/**
 * The command exited with a non-zero status (raised by {@link check}, never by `run` itself).
 *
 * Its class defaults to `fatal`: a user command that fails usually fails the same way again
 * (a bug, bad input, a missing file), and retrying it only multiplies the cost and hides the
 * error. A caller that knows its command is flaky passes another class to {@link check}
 * (`check(result, { errorClass: "retryable" })`), which `classify` then honours.
 *
 * @since 0.1.0
 * @category errors
 */
export class ProcessFailed extends Schema.TaggedError<ProcessFailed>("assay/ProcessFailed")("ProcessFailed", {
  /** Printable command (see {@link summarize}). */
  command: Schema.String,
  /** Exit status (`128 + n` for a signal). */
  exitCode: Schema.Number,
  /** The signal that ended the child, if any. */
  signal: Schema.optional(Schema.String),
  /** The last {@link stderrTailChars} characters of stderr. */
  stderrTail: Schema.String,
  errorClass: Schema.optionalWith(ErrorClass, { default: () => "fatal" as const })
}) {
  override get message(): string {
    const how = this.signal === undefined ? `exit code ${this.exitCode}` : `signal ${this.signal}`
    const tail = this.stderrTail.trim()
    return `command failed with ${how}: ${this.command}${tail === "" ? "" : `\n${tail}`}`
  }
}

/**
 * The command could not be started: program not found or not executable, working directory
 * missing, or the OS refused to create a process. `reason` is the errno code when there is one
 * (`ENOENT`, `EACCES`, `EAGAIN`, …) or the platform's reason (`NotFound`).
 *
 * Class `fatal` for a missing or forbidden program or directory (it will not appear by
 * itself), `retryable` when the OS was short of resources (`EAGAIN`, `EMFILE`, `ENFILE`,
 * `ENOMEM`), `unknown` otherwise.
 *
 * @since 0.1.0
 * @category errors
 */
export class ProcessSpawnError extends Schema.TaggedError<ProcessSpawnError>("assay/ProcessSpawnError")(
  "ProcessSpawnError",
  {
    command: Schema.String,
    reason: Schema.String,
    detail: Schema.String,
    errorClass: Schema.optionalWith(ErrorClass, { default: () => "unknown" as const })
  }
) {
  override get message(): string {
    return `could not start command (${this.reason}): ${this.command}: ${this.detail}`
  }
}

/**
 * The error class of a spawn failure's errno code (see {@link ProcessSpawnError}).
 *
 * @since 0.1.0
 * @category errors
 */
export const spawnErrorClass = (reason: string): ErrorClass => {
  switch (reason) {
    case "ENOENT":
    case "EACCES":
    case "ENOTDIR":
    case "EISDIR":
    case "ENOEXEC":
    case "EPERM":
    case "NotFound":
    case "PermissionDenied":
    case "BadResource":
      return "fatal"
    case "EAGAIN":
    case "EMFILE":
    case "ENFILE":
    case "ENOMEM":
      return "retryable"
    default:
      return "unknown"
  }
}

/**
 * Every error `run` fails with.
 *
 * @since 0.1.0
 * @category errors
 */
export type ProcessRunError = ProcessTimeout | ProcessSpawnError

// ---------------------------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------------------------

/**
 * Runs subprocesses.
 *
 * `run(command, options)` starts `command` (see {@link ProcessCommand}) in its own process
 * group, feeds `options.stdin`, reads stdout and stderr concurrently to end of file (capped by
 * `maxOutputBytes`), waits for the exit, and returns a {@link ProcessResult}; a non-zero exit
 * is data. It fails with {@link ProcessTimeout} or {@link ProcessSpawnError}.
 *
 * Guarantees of every implementation that runs real processes: on a timeout, an interruption
 * (even one that lands while the process is being created) or any other failure, the whole
 * process group is killed and the child is reaped before the error or the interruption
 * propagates. A command that exits by itself is not chased: background processes it started
 * deliberately are left alone. Output is read to end of file, so a background process that
 * keeps the child's stdout or stderr open keeps the run waiting (up to the timeout):
 * redirect the output of `&` jobs (`cmd >/dev/null 2>&1 &`).
 *
 * @since 0.1.0
 * @category tags
 */
export class ProcessRunner extends Context.Tag("assay/ProcessRunner")<ProcessRunner, {
  readonly run: (
    command: ProcessCommand,
    options?: RunOptions
  ) => Effect.Effect<ProcessResult, ProcessRunError>
}>() {}

// ---------------------------------------------------------------------------------------------
// Pure helpers
// ---------------------------------------------------------------------------------------------

/**
 * The placeholder {@link substituteArgv} replaces: the literal 7 characters `{value}`.
 *
 * @since 0.1.0
 * @category constants
 */
export const valuePlaceholder = "{value}"

/**
 * The text a value becomes when substituted: a string is used as it is; anything else is
 * written as canonical JSON (sorted keys, no whitespace; see `canonicalJson`), so `42` becomes
 * `42`, `{"b":1,"a":2}` becomes `{"a":2,"b":1}` and `null` becomes `null`. Fails with a
 * `CanonicalJsonError` for values that are not strict JSON (`undefined`, functions, `NaN`,
 * bigints, cycles).
 *
 * @since 0.1.0
 * @category helpers
 */
export const valueText = (value: unknown): Either.Either<string, CanonicalJsonError> =>
  typeof value === "string" ? Either.right(value) : canonicalJson(value)

/**
 * Replaces every occurrence of the literal substring `{value}` inside each argv element with
 * the value's text ({@link valueText}). Plain substring replacement, not a format string:
 * other braces (`{}`, `{name}`, a jq filter) are left as they are, and `$`-patterns in the
 * value are not interpreted. Each element stays one argument whatever the value contains
 * (spaces, quotes, `$(...)`, newlines), since argv commands never go through a shell.
 *
 * The value is only encoded when some element contains the placeholder, so an argv without it
 * accepts any value.
 *
 * @param argv the command's argv (not modified).
 * @param value the pipeline's current value.
 * @returns the substituted argv, or a `CanonicalJsonError` for a non-JSON value.
 * @since 0.1.0
 * @category helpers
 */
export const substituteArgv = (
  argv: ReadonlyArray<string>,
  value: unknown
): Either.Either<ReadonlyArray<string>, CanonicalJsonError> => {
  if (!argv.some((arg) => arg.includes(valuePlaceholder))) return Either.right(argv)
  return Either.map(valueText(value), (text) => argv.map((arg) => arg.split(valuePlaceholder).join(text)))
}

/**
 * Refuses a string (shell) command that contains `{value}`: interpolating data into a shell
 * line would let the data run as code. Use the argv form for commands that need the value.
 * Returns the command unchanged when it is acceptable.
 *
 * @param command a shell line.
 * @returns the command, or a {@link ConfigError} naming the problem and the fix.
 * @since 0.1.0
 * @category helpers
 */
export const checkStringCommand = (command: string): Either.Either<string, ConfigError> =>
  command.includes(valuePlaceholder)
    ? Either.left(
      new ConfigError({
        message: `a shell command string cannot contain ${valuePlaceholder}: the value would be pasted into a ` +
          `shell line; use the argv form, e.g. ["my-tool", "--input", "${valuePlaceholder}"]`,
        issues: [{
          path: "command",
          message: `contains ${valuePlaceholder}`,
          suggestion: "write the command as an argv array"
        }]
      })
    )
    : Either.right(command)

/** Interpreters that take inline code, and the flags whose next argument is that code. */
const inlineCodeFlags: ReadonlyArray<readonly [RegExp, (flag: string) => boolean]> = [
  // POSIX shells: -c, also combined as -ec, -xc, -lc ...
  [/^(sh|bash|dash|zsh|ksh|mksh|ash|fish|busybox)$/, (f) => /^-[a-z]*c[a-z]*$/.test(f)],
  [/^(python|pypy)[0-9.]*$/, (f) => f === "-c"],
  [/^(node|nodejs|bun|deno)$/, (f) => f === "-e" || f === "--eval" || f === "-p" || f === "--print"],
  [/^(perl|ruby)$/, (f) => f === "-e" || f === "-E"],
  [/^php$/, (f) => f === "-r"],
  [/^(pwsh|powershell)(\.exe)?$/, (f) => /^-(c|command)$/i.test(f)],
  [/^cmd(\.exe)?$/, (f) => /^\/[ck]$/i.test(f)]
]
/** Programs whose first operand (or `-e` argument) is a script. */
const scriptFirst = /^(awk|gawk|mawk|nawk|sed|jq)$/

/**
 * Refuses an argv command that hands `{value}` to an interpreter as part of its code
 * (`["bash", "-c", "echo {value}"]`, `["python3", "-c", "print('{value}')"]`,
 * `["awk", "{value} {print}"]`): the value would run as code, exactly as in a shell line.
 * The value must be its own argument, read by the code (`"$1"`, `sys.argv[1]`). A leading
 * `env [VAR=x ...]` is looked through. Returns the argv unchanged when it is acceptable.
 *
 * @param argv the command's argv.
 * @returns the argv, or a {@link ConfigError} (path `command[i]`) with the fix.
 * @since 0.1.0
 * @category helpers
 */
export const checkArgvCommand = (argv: ReadonlyArray<string>): Either.Either<ReadonlyArray<string>, ConfigError> => {
  let i = 0
  const base = (a: string | undefined) => (a ?? "").split(/[\\/]/).pop() ?? ""
  if (base(argv[0]) === "env") {
    i = 1
    while (i < argv.length && (argv[i]!.startsWith("-") || /^[A-Za-z_][A-Za-z0-9_]*=/.test(argv[i]!))) i++
  }
  const program = base(argv[i])
  const refuse = (at: number, how: string) =>
    Either.left(
      new ConfigError({
        message: `${how} ${JSON.stringify(argv[at])} contains ${valuePlaceholder}: the value would run as code. ` +
          `Pass it as its own argument and read it there, e.g. ["bash", "-c", "wc -c \"$1\"", "_", "${valuePlaceholder}"] ` +
          `or ["python3", "-c", "import sys; print(sys.argv[1])", "${valuePlaceholder}"]`,
        issues: [{
          path: `command[${at}]`,
          message: `${how} contains ${valuePlaceholder}`,
          suggestion: "pass the value as a separate argument (\"$1\", sys.argv[1]) instead of inside the code"
        }]
      })
    )
  const flagged = inlineCodeFlags.find(([name]) => name.test(program))
  if (flagged !== undefined) {
    for (let j = i + 1; j < argv.length - 1; j++) {
      if (flagged[1](argv[j]!) && argv[j + 1]!.includes(valuePlaceholder)) return refuse(j + 1, `the code ${program} ${argv[j]} runs`)
    }
  } else if (scriptFirst.test(program)) {
    let scriptGiven = false
    for (let j = i + 1; j < argv.length; j++) {
      const a = argv[j]!
      if ((a === "-e" || a === "--expression") && j + 1 < argv.length) {
        if (argv[j + 1]!.includes(valuePlaceholder)) return refuse(j + 1, `the ${program} script`)
        scriptGiven = true
        j++
        continue
      }
      if (a.startsWith("-")) continue
      // without -e, the first operand is the script; the rest are files
      if (!scriptGiven && a.includes(valuePlaceholder)) return refuse(j, `the ${program} script`)
      break
    }
  }
  return Either.right(argv)
}

/**
 * Quotes one argument for a POSIX shell: as is when it holds only safe characters
 * (`[A-Za-z0-9_@%+=:,./-]`), else in single quotes (an embedded `'` as `'"'"'`).
 *
 * @since 0.1.0
 * @category helpers
 */
export const shellQuote = (arg: string): string => /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'"'"'`)}'`

/**
 * A printable one-line form of a command for errors and logs: argv elements are joined with
 * spaces, each shell-quoted when it needs it; a string command is shown as it is. Newlines
 * are shown as `\n` and the result is cut to `maxChars` characters (default 300) with `…`.
 *
 * @since 0.1.0
 * @category helpers
 */
export const summarize = (command: ProcessCommand, maxChars = 300): string => {
  const text = (typeof command === "string" ? command : command.map(shellQuote).join(" ")).replace(/\r?\n/g, "\\n")
  return text.length > maxChars ? `${text.slice(0, Math.max(0, maxChars - 1))}…` : text
}

/**
 * The last `chars` characters of a text (default {@link stderrTailChars}), prefixed with `…`
 * when cut.
 *
 * @since 0.1.0
 * @category helpers
 */
export const tail = (text: string, chars = stderrTailChars): string =>
  text.length > chars ? `…${text.slice(text.length - chars)}` : text

/**
 * Turns a non-zero exit into a {@link ProcessFailed} (exit code, signal, stderr tail, command);
 * a zero exit passes the result through. `errorClass` (default `fatal`) is the class the error
 * carries; see {@link ProcessFailed} for why fatal is the default.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ProcessRunner } from "assay"
 *
 * const test = Effect.gen(function*() {
 *   const runner = yield* ProcessRunner.ProcessRunner
 *   return yield* runner.run(["make", "test"]).pipe(Effect.flatMap((r) => ProcessRunner.check(r)))
 * })
 * ```
 *
 * @since 0.1.0
 * @category helpers
 */
export const check = (
  result: ProcessResult,
  options?: { readonly errorClass?: ErrorClass | undefined }
): Effect.Effect<ProcessResult, ProcessFailed> =>
  result.exitCode === 0
    ? Effect.succeed(result)
    : Effect.fail(
      new ProcessFailed({
        command: result.command,
        exitCode: result.exitCode,
        signal: result.signal,
        stderrTail: tail(result.stderr),
        errorClass: options?.errorClass ?? "fatal"
      })
    )

/**
 * The timeout of a run in milliseconds, from {@link RunOptions} `timeout` (default 60 s);
 * `Infinity` for no limit.
 *
 * @since 0.1.0
 * @category helpers
 */
export const timeoutMillis = (options?: RunOptions): number => {
  if (options?.timeout === undefined) return Duration.toMillis(defaultTimeout)
  const d = Duration.decode(options.timeout)
  return Duration.isFinite(d) ? Duration.toMillis(d) : Infinity
}

/**
 * The effective `maxOutputBytes` (see {@link RunOptions}).
 *
 * @since 0.1.0
 * @category helpers
 */
export const outputCap = (options?: RunOptions): number => {
  const n = options?.maxOutputBytes
  return n === undefined || !Number.isFinite(n) || n < 0 ? defaultMaxOutputBytes : Math.floor(n)
}

// ---------------------------------------------------------------------------------------------
// Test implementation
// ---------------------------------------------------------------------------------------------

/**
 * One call seen by a scripted runner: the command as given, and the options.
 *
 * @since 0.1.0
 * @category testing
 */
export interface Invocation {
  readonly command: ProcessCommand
  readonly options: RunOptions
}

/**
 * What a script answers for one call: any part of a {@link ProcessResult} (missing fields
 * default to exit code 0, empty output, no truncation, duration measured with `Clock`).
 *
 * @since 0.1.0
 * @category testing
 */
export type ScriptReply = Partial<Omit<ProcessResult, "command">>

/**
 * A scripted runner's behaviour: called for every `run`, it answers a {@link ScriptReply}
 * (directly or as an Effect, which may sleep on the `TestClock` or fail with a
 * {@link ProcessRunError}).
 *
 * @since 0.1.0
 * @category testing
 */
export type Script = (
  invocation: Invocation
) => ScriptReply | Effect.Effect<ScriptReply, ProcessRunError>

const utf8 = new TextEncoder()
const utf8Decoder = new TextDecoder("utf-8")

const capText = (text: string, cap: number): readonly [string, boolean] => {
  const bytes = utf8.encode(text)
  return bytes.length <= cap ? [text, false] : [utf8Decoder.decode(bytes.subarray(0, cap)), true]
}

/**
 * Builds a scripted {@link ProcessRunner} (no process is started). It behaves like the real one
 * where a caller can tell: the `timeout` option is enforced with `Clock` (a script that sleeps
 * past it fails with {@link ProcessTimeout}, under `TestClock` too), output longer than
 * `maxOutputBytes` is cut and flagged, and `command` is the {@link summarize}d command.
 *
 * @since 0.1.0
 * @category testing
 */
export const makeTest = (script: Script): ProcessRunner["Type"] =>
  ProcessRunner.of({
    run: (command, options = {}) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const summary = summarize(command)
        const limit = timeoutMillis(options)
        const answer = Effect.suspend(() => {
          const r = script({ command, options })
          return Effect.isEffect(r) ? r : Effect.succeed(r)
        })
        const reply = Number.isFinite(limit)
          ? yield* answer.pipe(
            Effect.timeoutFail({
              duration: Duration.millis(limit),
              onTimeout: () => new ProcessTimeout({ command: summary, timeoutMs: limit })
            })
          )
          : yield* answer
        const cap = outputCap(options)
        const [stdout, stdoutCut] = capText(reply.stdout ?? "", cap)
        const [stderr, stderrCut] = capText(reply.stderr ?? "", cap)
        const finished = yield* Clock.currentTimeMillis
        return {
          command: summary,
          exitCode: reply.exitCode ?? 0,
          ...(reply.signal === undefined ? {} : { signal: reply.signal }),
          stdout,
          stderr,
          stdoutTruncated: (reply.stdoutTruncated ?? false) || stdoutCut,
          stderrTruncated: (reply.stderrTruncated ?? false) || stderrCut,
          durationMs: reply.durationMs ?? finished - started
        } satisfies ProcessResult
      })
  })

/**
 * A Layer with a scripted {@link ProcessRunner} ({@link makeTest}), for unit tests of code that
 * runs commands. A test that needs to see the calls records them in its script.
 *
 * @example
 * ```ts
 * import { ProcessRunner } from "assay"
 *
 * const runner = ProcessRunner.layerTest(({ command }) =>
 *   Array.isArray(command) && command[0] === "fail" ? { exitCode: 2, stderr: "boom" } : { stdout: "ok\n" })
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layerTest = (script: Script): Layer.Layer<ProcessRunner> =>
  Layer.succeed(ProcessRunner, makeTest(script))

/**
 * The argv actually executed for a command: the argv itself, or `["/bin/sh", "-c", line]`
 * for a string. `None` for an empty argv.
 *
 * @since 0.1.0
 * @category helpers
 */
export const toArgv = (command: ProcessCommand): Option.Option<readonly [string, ...Array<string>]> => {
  if (typeof command === "string") return Option.some(["/bin/sh", "-c", command] as const)
  const [program, ...args] = command
  return program === undefined ? Option.none() : Option.some([program, ...args])
}
