/**
 * Shared flag declarations of the `assay` subcommands whose parse errors name the flag.
 *
 * @since 0.1.0
 */
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import { Duration, Effect, Either, Layer, Logger, LogLevel, Option } from "effect"
import { dual } from "effect/Function"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { cacheModes, ttlMessage } from "../domain/CallCache.js"
import { ConfigError } from "../domain/Errors.js"
import { RunId } from "../domain/Ids.js"
import { decodeDurationText } from "../domain/internal/durationText.js"
import { closest } from "../domain/internal/suggest.js"
import * as SqliteCallCache from "../layers/SqliteCallCache.js"
import { isMissingFile, openReadOnlyDb } from "../layers/internal/sqlite/callCache.js"
import type { CallCache } from "../services/CallCache.js"

/**
 * `Options.withDefault(value)` that also says the default in the option's help
 * (`Default: 8787.`, after the description), from the very value the parser uses:
 * `@effect/cli` 0.77 does not print a plain (non-`Option`) default.
 *
 * @param value the value used when the option is absent
 * @param shown how the help writes it (default `String(value)`)
 * @since 0.1.0
 * @category options
 */
export const withDefault: {
  <const B>(value: B, shown?: string): <A>(self: Options.Options<A>) => Options.Options<A | B>
  <A, const B>(self: Options.Options<A>, value: B, shown?: string): Options.Options<A | B>
} = dual(
  (args) => Options.isOptions(args[0]),
  <A, B>(self: Options.Options<A>, value: B, shown: string = String(value)): Options.Options<A | B> =>
    self.pipe(Options.withDefault(value), Options.withDescription(`Default: ${shown}.`))
)

/**
 * An integer flag `--NAME` that must be at least `min`. A smaller value is refused (exit 2)
 * with `error: --NAME must be an integer >= MIN (got V)` (the prefix of every refusal the
 * commands print) instead of the schema's anonymous
 * refinement message. A non-integer is refused by `Options.integer` itself.
 *
 * @param name the flag name without dashes (`"limit"`)
 * @param min the smallest accepted value (inclusive)
 * @returns the required option (pipe `Options.optional` for an optional one)
 * @since 0.1.0
 * @category options
 */
export const integerAtLeast = (name: string, min: number): Options.Options<number> =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      Number.isInteger(n) && n >= min
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`error: --${name} must be an integer >= ${min} (got ${n})`)))
    )
  )

/**
 * The value of a duration flag `--NAME` (a number and a unit: `"30 seconds"`, `"500 millis"`, or
 * the compact form assay prints, `"30s"`, `"1m 30s"`),
 * `undefined` when the flag is absent. Text that is not a finite duration fails with a
 * `ConfigError` naming `--NAME` (CLI exit 2); with `positive`, so does a zero duration. What
 * every duration flag of the CLI goes through (`run --stop-after`, `runner --lease-ttl`, …).
 *
 * @param name the flag name without dashes (`"stop-after"`)
 * @param value the flag's text, if given
 * @param options `positive`: refuse `0` as well (default false)
 * @since 0.8.0
 * @category options
 */
export const durationFlag = (
  name: string,
  value: Option.Option<string>,
  options: { readonly positive?: boolean } = {}
): Either.Either<Duration.Duration | undefined, ConfigError> => {
  if (Option.isNone(value)) return Either.right(undefined)
  const text = value.value
  const refuse = (message: string, suggestion: string) =>
    Either.left(new ConfigError({ message: `--${name}: ${message}`, issues: [{ path: `--${name}`, message, suggestion }] }))
  const d = Option.filter(decodeDurationText(text), Duration.isFinite)
  if (Option.isNone(d)) {
    return refuse(
      `"${text}" is not a duration: write a number and a unit, e.g. "5 seconds" or "500 millis"`,
      "write a duration with a unit, e.g. \"30 seconds\""
    )
  }
  if (options.positive === true && !Duration.greaterThan(d.value, Duration.zero)) {
    return refuse(`${JSON.stringify(text)} must be longer than 0`, "write a positive duration, e.g. \"30 seconds\"")
  }
  return Either.right(d.value)
}

/**
 * `--port N`: a TCP port in 0..65535 (0 = any free port), `fallback` when absent. Another
 * value is refused (exit 2) with `--port must be an integer between 0 and 65535 (got N)`. Shared by `serve` and `mock-llm`.
 *
 * @param fallback the port used when the flag is absent
 * @param description the command's help text for it
 * @since 0.1.0
 * @category options
 */
export const port = (fallback: number, description: string): Options.Options<number> =>
  Options.integer("port").pipe(
    Options.mapEffect((n) =>
      Number.isInteger(n) && n >= 0 && n <= 65535
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--port must be an integer between 0 and 65535 (got ${n})`)))
    ),
    Options.withDescription(description),
    withDefault(fallback)
  )

/**
 * `--host ADDRESS`: the address a server binds, `127.0.0.1` when absent (anything but loopback
 * needs {@link allowRemote}). Shared by `serve` and `mock-llm`.
 *
 * @param description the command's help text for it
 * @since 0.1.0
 * @category options
 */
export const host = (description: string): Options.Options<string> =>
  Options.text("host").pipe(Options.withDescription(description), withDefault("127.0.0.1"))

/**
 * `--allow-remote`: lets a server bind a non-loopback `--host`. Shared by `serve` and
 * `mock-llm`.
 *
 * @param description the command's help text for it
 * @since 0.1.0
 * @category options
 */
export const allowRemote = (description: string): Options.Options<boolean> =>
  Options.boolean("allow-remote").pipe(Options.withDescription(description))

/**
 * `--run-id ID` (optional): the run a read command looks at. Shared by `report`, `export`,
 * `serve` and `watch` (each says what it does without one).
 *
 * @param description the command's help text for it
 * @since 0.1.0
 * @category options
 */
export const runId = (description: string): Options.Options<Option.Option<string>> =>
  Options.text("run-id").pipe(Options.optional, Options.withDescription(description))

/**
 * What a read command's `--run-id` selects, parsed once for every command that takes it
 * (`report`, `export`, `serve`, `watch`; tester18d F8: `export` refused `latest`): `default`
 * (the flag absent: each command says what it then shows), `all` (every run), `latest` (the
 * most recently started run: of each store, for a command over several) or `run` (that id).
 *
 * @since 0.12.0
 * @category models
 */
export type RunSelection =
  | { readonly _tag: "default" }
  | { readonly _tag: "all" }
  | { readonly _tag: "latest" }
  | { readonly _tag: "run"; readonly runId: RunId }

/**
 * The {@link RunSelection} of a parsed `--run-id` ({@link runId}): `all` and `latest` are
 * words, anything else a run id.
 *
 * @param value the flag's value (`Option.none()`: absent)
 * @returns the selection
 * @since 0.12.0
 * @category options
 */
export const runSelection = (value: Option.Option<string>): RunSelection =>
  Option.match(value, {
    onNone: () => ({ _tag: "default" }),
    onSome: (v) => v === "all" ? { _tag: "all" } : v === "latest" ? { _tag: "latest" } : { _tag: "run", runId: RunId.make(v) }
  })

/**
 * `--experiment ID` (repeatable): the suite members a command runs or resumes (default: every
 * member). Only for a suite file.
 *
 * @param description the command's help text for it
 * @returns the member ids given, in order (empty when none)
 * @since 0.5.0
 * @category options
 */
export const experiments = (description: string): Options.Options<ReadonlyArray<string>> =>
  Options.text("experiment").pipe(Options.withPseudoName("ID"), Options.repeated, Options.withDescription(description))

/**
 * `--output-root DIR`: a suite's output root, relative to the working directory (the suite
 * file's `output.root` is relative to the file). Only for a suite file.
 *
 * @param description the command's help text for it
 * @since 0.5.0
 * @category options
 */
export const outputRoot = (description: string): Options.Options<Option.Option<string>> =>
  Options.text("output-root").pipe(Options.withPseudoName("DIR"), Options.optional, Options.withDescription(description))

/**
 * The call cache flags of `run` / `resume` (experiments and suites) and `study run` /
 * `study resume`, with one meaning everywhere: `--cache` (mode `readWrite`), `--cache-mode
 * readWrite|readOnly|refresh|off`, `--cache-db PATH` (a shared cache database, SQLite, created
 * if missing) and `--cache-ttl DURATION` (serve stored calls only while younger). See
 * {@link cacheFlagsOf}.
 *
 * @since 0.8.0
 * @category options
 */
export const cacheOptions = {
  cache: Options.boolean("cache").pipe(
    Options.withDescription(
      "Serve model calls (chat, and tasks declared cache: true) from the call cache and store new ones (mode readWrite)."
    )
  ),
  cacheMode: Options.text("cache-mode").pipe(
    Options.withPseudoName("readWrite | readOnly | refresh | off"),
    Options.mapEffect((text) => {
      const mode = cacheModes.find((m) => m === text)
      if (mode !== undefined) return Effect.succeed(mode)
      const near = closest(text, cacheModes)
      return Effect.fail(ValidationError.invalidValue(HelpDoc.p(
        `--cache-mode: ${JSON.stringify(text)} is not one of ${cacheModes.join(", ")}${
          near === undefined ? "" : `; did you mean ${near}?`
        }`
      )))
    }),
    Options.optional,
    Options.withDescription(
      "Call cache mode: readWrite (serve, else call and store), readOnly (serve, never store), refresh (call and overwrite), off."
    )
  ),
  cacheDb: Options.text("cache-db").pipe(
    Options.withPseudoName("path"),
    Options.optional,
    Options.withDescription(
      "A shared call cache database (SQLite file, created if missing) instead of the run's store; several runs and processes may share it."
    )
  ),
  cacheTtl: Options.text("cache-ttl").pipe(
    Options.withPseudoName("duration"),
    Options.optional,
    Options.withDescription("Serve stored calls only while younger than this (\"7 days\").")
  )
}

/**
 * The parsed values of {@link cacheOptions}.
 *
 * @since 0.8.0
 * @category options
 */
export interface CacheFlags {
  readonly cache: boolean
  readonly cacheMode: Option.Option<"readWrite" | "readOnly" | "refresh" | "off">
  readonly cacheDb: Option.Option<string>
  readonly cacheTtl: Option.Option<string>
}

/**
 * What the cache flags ask of a run that has no cache file of its own (a suite's or a study's
 * run): `undefined` when no cache flag is given; else the run's `cache` setting (`mode`:
 * `--cache-mode`, default `readWrite`; `ttl`: `--cache-ttl`) and the shared database of
 * `--cache-db` (an absolute path, resolved against the working directory), if any. Fails with
 * a `ConfigError` naming `--cache-ttl` when it is not a duration with a unit (CLI exit 2).
 *
 * @since 0.8.0
 * @category options
 */
export const cacheFlagsOf = (
  flags: CacheFlags
): Either.Either<
  | {
    readonly setting: { readonly mode: "readWrite" | "readOnly" | "refresh" | "off"; readonly ttl?: Duration.Duration }
    readonly db: string | undefined
  }
  | undefined,
  ConfigError
> => {
  let ttl: Duration.Duration | undefined
  if (Option.isSome(flags.cacheTtl)) {
    const d = Option.filter(Duration.decodeUnknown(flags.cacheTtl.value.trim()), Duration.isFinite)
    if (Option.isNone(d)) {
      const message = `"${flags.cacheTtl.value}" is not a duration: write a number and a unit, e.g. "5 seconds" or "500 millis"`
      return Either.left(new ConfigError({ message: `--cache-ttl: ${message}`, issues: [{ path: "--cache-ttl", message }] }))
    }
    if (!Duration.greaterThan(d.value, Duration.zero) || /^\s*-/.test(flags.cacheTtl.value)) {
      const message = ttlMessage(flags.cacheTtl.value)
      return Either.left(new ConfigError({ message: `--cache-ttl: ${message}`, issues: [{ path: "--cache-ttl", message }] }))
    }
    ttl = d.value
  }
  const flagged = flags.cache || Option.isSome(flags.cacheMode) || Option.isSome(flags.cacheDb) || ttl !== undefined
  if (!flagged) return Either.right(undefined)
  return Either.right({
    setting: { mode: Option.getOrElse(flags.cacheMode, () => "readWrite" as const), ...(ttl !== undefined ? { ttl } : {}) },
    db: Option.isSome(flags.cacheDb) ? nodePath.resolve(flags.cacheDb.value) : undefined
  })
}

/** Whether `p` names an existing directory. */
const isDirectory = (p: string): boolean => {
  try {
    return fs.statSync(p).isDirectory()
  } catch {
    return false
  }
}

/**
 * The shared call cache database named by `field` (`--cache-db`, `run.cache.db`), opened when
 * the command starts: a file that cannot be opened (a missing folder, a file that is not an
 * SQLite database, no permission) is a configuration mistake, refused before anything runs
 * with a `ConfigError` naming the field, the path and SQLite's reason (CLI exit 2). Errors
 * while the run reads or writes it later are counted as misses (see `CallCache`).
 *
 * With `mode` `readOnly` the file is opened read-only and nothing is written to it or beside
 * it (a file or folder the user may not write is served; a missing file is an empty cache
 * here: {@link checkCacheDb} refuses it before the command gets this far).
 *
 * @param filename the database path (absolute)
 * @param field the flag or config field that named it, for the message
 * @param mode the run's cache mode, if known (`readOnly`: open read-only)
 * @since 0.8.0
 * @category layers
 */
export const sharedCacheLayer = (filename: string, field: string, mode?: string | undefined): Layer.Layer<CallCache, ConfigError> =>
  SqliteCallCache.layer({ filename, shared: true, readOnly: mode === "readOnly" }).pipe(
    Layer.mapError((e) => {
      // SQLite says only "unable to open database file" for a directory
      const reason = isDirectory(filename)
        ? "it is a directory; give the path of a file in it"
        : e.message.replace(`call cache ${filename}: cannot open: `, "")
      const message = `cannot open the call cache database ${filename}: ${reason}`
      return new ConfigError({
        message: `${field}: ${message}`,
        issues: [{ path: field, message, suggestion: "give the path of an SQLite file (created if missing) in an existing, writable folder" }]
      })
    })
  )

/**
 * Opens and closes the shared call cache database named by `field` (see
 * {@link sharedCacheLayer}) before anything else is created, so that a path that cannot be a
 * cache (a directory, a missing or unwritable folder, a file that is not an SQLite database)
 * is refused while nothing exists yet: no store file, no output folder. A good path is created
 * (empty cache table) as the run would create it. Fails with the layer's `ConfigError`
 * naming the field, the path and SQLite's reason (CLI exit 2).
 *
 * With `mode` `readOnly` it is opened read-only: nothing is created or written, and a missing
 * file is refused (a misspelt path would be an empty cache, every call paid without a word).
 * This open logs nothing (the run's own open says once that it read a snapshot, when it does).
 *
 * @param filename the database path (absolute)
 * @param field the flag or config field that named it, for the message
 * @param mode the run's cache mode, if known (`readOnly`: open read-only)
 * @since 0.8.0
 * @category options
 */
export const checkCacheDb = (filename: string, field: string, mode?: string | undefined): Effect.Effect<void, ConfigError> =>
  Effect.zipRight(
    // a run that stores answers: the checks of `validate` first (a file SQLite would open
    // read-only without a word, every write failing, is refused here, not during the run);
    // a readOnly run: its file must exist (a misspelt path would be an empty cache, every call paid)
    mode === "readOnly" ? readOnlyMissing(filename, field) : probeCacheDb(filename, field, mode),
    // silent: the run opens it again and logs what it says (a snapshot read) once (issue 18)
    Effect.scoped(Effect.asVoid(Layer.build(sharedCacheLayer(filename, field, mode)))).pipe(
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  )

/** The refusal of a shared cache database named by `field` (exit 2), with `reason`. */
const cacheDbRefused = (filename: string, field: string, reason: string, suggestion?: string): ConfigError => {
  const message = `cannot open the call cache database ${filename}: ${reason}`
  return new ConfigError({
    message: `${field}: ${message}`,
    issues: [{
      path: field,
      message,
      suggestion: suggestion ?? "give the path of an SQLite file (created if missing) in an existing, writable folder"
    }]
  })
}

/**
 * A `readOnly` cache whose file does not exist: refused (a misspelt path would otherwise be an
 * empty cache, every call paid and nothing said), naming whether its folder is missing too.
 */
const readOnlyMissing = (filename: string, field: string): Effect.Effect<void, ConfigError> =>
  Effect.suspend(() => {
    if (!isMissingFile(filename)) return Effect.void
    const folder = nodePath.dirname(filename)
    const reason = isDirectory(folder)
      ? "the file does not exist, and --cache-mode readOnly only reads an existing cache (check the path; --cache-mode readWrite creates it)"
      : `the file does not exist (nor does the folder ${folder}), and --cache-mode readOnly only reads an existing cache (check the path)`
    return Effect.fail(cacheDbRefused(
      filename,
      field,
      reason,
      "check the path; to start a new cache there, use --cache-mode readWrite (it creates the file in an existing folder)"
    ))
  })

/**
 * Checks, without creating or changing anything, that the shared call cache database named by
 * `field` could be opened by a run (what {@link checkCacheDb} does by opening it): an existing
 * path must be an SQLite database (opened read-only, its schema read, closed again), a missing
 * one must lie in an existing, writable folder. For `assay validate`, which must leave no file
 * behind. Fails with a `ConfigError` naming the field, the path and the reason (CLI exit 2);
 * the same message as the run's for a directory. With `mode` `readOnly` a missing file is
 * refused, as the run refuses it (a misspelt path is not an empty cache).
 *
 * @param filename the database path (absolute)
 * @param field the flag or config field that named it, for the message
 * @param mode the run's cache mode, if known
 * @since 0.8.0
 * @category options
 */
export const probeCacheDb = (filename: string, field: string, mode?: string | undefined): Effect.Effect<void, ConfigError> =>
  Effect.suspend(() => {
    const refuse = (reason: string) => Effect.fail(cacheDbRefused(filename, field, reason))
    if (isDirectory(filename)) return refuse("it is a directory; give the path of a file in it")
    if (mode === "readOnly" && isMissingFile(filename)) return readOnlyMissing(filename, field)
    return Effect.try({
      try: () => {
        if (isMissingFile(filename)) return
        const ro = openReadOnlyDb(filename)
        try {
          ro.db.pragma("schema_version")
        } finally {
          ro.close()
        }
      },
      catch: (e) => e instanceof Error ? e.message : String(e)
    }).pipe(
      // a run that stores answers must be able to write what SQLite writes (readOnly only reads)
      Effect.zipRight(Effect.suspend(() => {
        const problem = mode === "readOnly" ? undefined : cacheWriteProblem(filename)
        return problem === undefined ? Effect.void : Effect.fail(problem)
      })),
      Effect.catchAll(refuse)
    )
  })

/**
 * Why a run that stores answers (mode `readWrite` or `refresh`) could not write the shared
 * cache database `filename`, or `undefined` when it can: the one check behind `validate`
 * ({@link probeCacheDb}) and `run` ({@link checkCacheDb}), so that they agree. SQLite opens a
 * file it may not write read-only without a word, and every write then fails; so the file
 * must be writable, and so must its folder, where SQLite creates the `-wal` and `-shm` files
 * of a WAL cache (and a missing cache file), unless both exist and are writable.
 *
 * @param filename the database path (absolute)
 * @returns the reason, for the message after "cannot open the call cache database PATH: "
 * @since 0.9.0
 * @category options
 */
export const cacheWriteProblem = (filename: string): string | undefined => {
  const writable = (p: string) => {
    try {
      fs.accessSync(p, fs.constants.W_OK)
      return true
    } catch {
      return false
    }
  }
  const folder = nodePath.dirname(filename)
  if (!fs.existsSync(filename)) {
    if (!isDirectory(folder)) return fs.existsSync(folder) ? `${folder} is a file, not a folder` : `the folder ${folder} does not exist`
    return writable(folder) ? undefined : `the folder ${folder} is not writable`
  }
  if (!writable(filename)) return "the file is not writable (--cache-mode readOnly only reads it)"
  const sidecars = [`${filename}-wal`, `${filename}-shm`]
  const unwritable = sidecars.find((p) => fs.existsSync(p) && !writable(p))
  if (unwritable !== undefined) return `${unwritable} is not writable (--cache-mode readOnly only reads the cache)`
  if (!writable(folder) && !sidecars.every((p) => fs.existsSync(p))) {
    return `the folder ${folder} is not writable, and SQLite must create the cache's -wal and -shm files there (--cache-mode readOnly only reads the cache)`
  }
  return undefined
}

/**
 * Fails with `ConfigError` (exit 2, `error: WHAT PATH: no such file`) when `path` names nothing:
 * how every path a command is given is refused when missing (newuser37 F10), instead of
 * @effect/cli's bare `Path … must exist` (so path options are declared `exists: "either"`).
 *
 * @param path the path as given
 * @param what what the path is for, e.g. `mock-llm profile`
 * @param field the flag or argument that named it (the issue's path)
 * @since 0.9.0
 * @category options
 */
export const requireExisting = (path: string, what: string, field: string): Effect.Effect<void, ConfigError> =>
  Effect.suspend(() =>
    fs.existsSync(path) ? Effect.void : new ConfigError({
      message: `${what} ${path}: no such file`,
      issues: [{ path: field, message: `no such file: ${path}` }]
    })
  )
