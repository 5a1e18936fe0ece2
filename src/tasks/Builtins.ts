/**
 * The registry of built-in task names a config file's `use:` resolves first (so a plugin can
 * never shadow them): `fanout`, `echo`, `delay`, `flaky`, `boom`, `leaky`, `simulateLlm`, `shellRun`,
 * `writeJsonl`, `chat`, `judge`.
 *
 * A built-in is called the way a factory export is: with the task section's `args` as
 * positional arguments and its `options` object as the last argument. Durations in a config
 * file need a unit (`"300 millis"`); a bare number is refused with a hint.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import * as path from "node:path"
import { ConfigError, type ConfigIssue } from "../domain/Errors.js"
import type * as Task from "../domain/Task.js"
import { chat, type ChatOptions } from "./Chat.js"
import { judge, type JudgeOptions } from "./Judge.js"
import { boom, delay, echo, flaky, leaky, simulateLlm } from "./Mock.js"
import { shellRun } from "./ShellRun.js"
import { writeJsonl } from "./WriteJsonl.js"

/**
 * What a built-in factory receives besides its arguments: `baseDir`, the directory of the
 * config file (relative file paths in arguments are resolved against it).
 *
 * @since 0.1.0
 * @category models
 */
export interface BuiltinContext {
  readonly baseDir: string
}

/**
 * A built-in task: its `name`, a one-line `description`, the `signature` shown by
 * `assay plugins`, and `make(args, options, ctx)` which builds the task (throwing
 * `ConfigError` for bad arguments, each issue's path relative to the task section).
 *
 * @since 0.1.0
 * @category models
 */
export interface Builtin {
  readonly name: string
  readonly description: string
  readonly signature: string
  readonly make: (
    args: ReadonlyArray<unknown>,
    options: Readonly<Record<string, unknown>> | undefined,
    ctx: BuiltinContext
  ) => Task.Any
}

const durationHint = "write a duration with a unit, for example \"300 millis\" or \"2 seconds\""

const refuse = (task: string, issues: ReadonlyArray<ConfigIssue>): never => {
  throw new ConfigError({ message: `${task}: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`, issues })
}

/**
 * Runs a task constructor for a config file: the TypeScript API accepts a number of
 * milliseconds where a file must write a unit, so its duration hint is replaced by the
 * file's ({@link durationHint}).
 */
const withConfigHints = <A>(make: () => A): A => {
  try {
    return make()
  } catch (e) {
    if (e instanceof ConfigError && e.issues.some((i) => i.suggestion?.includes("number of milliseconds"))) {
      return refuse("delay", e.issues.map((i) => i.suggestion?.includes("number of milliseconds") ? { ...i, suggestion: durationHint } : i))
    }
    throw e
  }
}

/** Refuses bare numbers where a config file must write a duration. */
const durationsWithUnit = (task: string, entries: ReadonlyArray<readonly [string, unknown]>): void => {
  const issues: Array<ConfigIssue> = []
  for (const [p, v] of entries) {
    if (typeof v === "number") {
      issues.push({ path: p, message: `a bare number (${v}) is not a duration`, suggestion: durationHint })
    }
  }
  if (issues.length > 0) refuse(task, issues)
}

/**
 * Refuses more than `n` (0 or 1) args in plain words: what the one argument means, what was
 * given, and an example (`flaky takes one argument, how many attempts fail before one
 * succeeds; got 2 arguments: [2,3]`).
 */
const maxArgs = (task: string, args: ReadonlyArray<unknown>, n: 0 | 1, usage: string, meaning = ""): void => {
  if (args.length > n) {
    const got = `got ${args.length} argument${args.length === 1 ? "" : "s"}: ${JSON.stringify(args)}`
    const message = n === 0
      ? `${task} takes no arguments (its settings go in options); ${got}`
      : `${task} takes one argument${meaning === "" ? "" : `, ${meaning}`}; ${got}`
    refuse(task, [{ path: "args", message, suggestion: usage }])
  }
}

const noArgs = (task: string, args: ReadonlyArray<unknown>, options: unknown): void => {
  if (args.length > 0 || options !== undefined) {
    refuse(task, [{
      path: args.length > 0 ? "args" : "options",
      message: `${task} is a task, not a factory: it takes no args or options`
    }])
  }
}

const isPlainObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * The `chat` built-in's options: `args[0]` (an object) and the section's `options`, merged
 * (`options` wins). `chat`'s own issues (paths like `temperature`) are re-thrown with their
 * path inside the task section (`options.temperature`).
 */
const makeChat = (args: ReadonlyArray<unknown>, options: Readonly<Record<string, unknown>> | undefined): Task.Any => {
  maxArgs("chat", args, 1, "options: { name: classify, maxTokens: 5, temperature: 0 }", "an object of options (or use options:)")
  const first = args[0]
  if (first !== undefined && !isPlainObject(first)) {
    refuse("chat", [{
      path: "args[0]",
      message: "chat takes one options object",
      suggestion: "options: { name: classify, maxTokens: 5 }"
    }])
  }
  const where = options !== undefined ? "options" : "args[0]"
  const merged: Record<string, unknown> = { ...(first as Record<string, unknown> | undefined), ...options }
  durationsWithUnit("chat", [[`${where}.requestTimeout`, merged["requestTimeout"]], [`${where}.timeout`, merged["timeout"]]])
  try {
    return chat(merged as ChatOptions) as Task.Any
  } catch (e) {
    if (e instanceof ConfigError) {
      return refuse("chat", e.issues.map((i) => ({ ...i, path: `${where}.${i.path}` })))
    }
    throw e
  }
}

/**
 * The `judge` built-in's options: `args[0]` (an object) and the section's `options`, merged
 * (`options` wins); `judge`'s own issues (paths like `rubric.criteria[0].scale.max`) are
 * re-thrown with their path inside the task section (`options.rubric.criteria[0].scale.max`).
 */
const makeJudge = (args: ReadonlyArray<unknown>, options: Readonly<Record<string, unknown>> | undefined): Task.Any => {
  const usage = "options: { rubric: { id: quality, version: 1, criteria: [{ name: correct, scale: { min: 1, max: 5 } }] }, candidates: { answer: content } }"
  maxArgs("judge", args, 1, usage, "an object of options (or use options:)")
  const first = args[0]
  if (first !== undefined && !isPlainObject(first)) {
    refuse("judge", [{ path: "args[0]", message: "judge takes one options object", suggestion: usage }])
  }
  const where = options !== undefined ? "options" : "args[0]"
  const merged: Record<string, unknown> = { ...(first as Record<string, unknown> | undefined), ...options }
  durationsWithUnit("judge", [[`${where}.requestTimeout`, merged["requestTimeout"]], [`${where}.timeout`, merged["timeout"]]])
  try {
    return judge(merged as unknown as JudgeOptions) as Task.Any
  } catch (e) {
    if (e instanceof ConfigError) {
      return refuse("judge", e.issues.map((i) => ({ ...i, path: `${where}.${i.path}` })))
    }
    throw e
  }
}

const entries: ReadonlyArray<Builtin> = [
  {
    // Listed for `assay plugins`; the experiment loader builds `use: fanout` entries itself
    // from their nested `tasks:` list (see config/internal/build.ts), so `make` is never reached
    // from a valid file.
    name: "fanout",
    description: "runs nested tasks concurrently on the same input, in one checkpoint",
    signature: "fanout: { name?, onError?: raise|collect, retry?, tasks: [task entries] }",
    make: () =>
      refuse("fanout", [{
        path: "tasks",
        message: "fanout takes its branches as a nested `tasks:` list of task entries, not args",
        suggestion: "- use: fanout\n  tasks:\n    - { use: echo, name: a }"
      }])
  },
  {
    name: "echo",
    description: "returns its input unchanged",
    signature: "echo",
    make: (args, options) => {
      noArgs("echo", args, options)
      return echo
    }
  },
  {
    name: "delay",
    description: "waits, then returns its input (observe concurrency)",
    signature: "delay(duration, { name?, retry?, timeout?, version?, config? })",
    make: (args, options) => {
      maxArgs("delay", args, 1, "args: [\"300 millis\"]", "how long to wait")
      durationsWithUnit("delay", [["args[0]", args[0]]])
      return withConfigHints(() => delay(args[0] === undefined ? "1 second" : args[0] as Duration.DurationInput, options ?? {}))
    }
  },
  {
    name: "flaky",
    description: "fails the first N attempts, then returns its input (exercise retries)",
    signature: "flaky(failTimes = 2, { errorClass?, message?, name?, ... })",
    make: (args, options) => {
      maxArgs("flaky", args, 1, "args: [2]", "how many attempts fail before one succeeds")
      return flaky(args[0] === undefined ? 2 : args[0] as number, options ?? {})
    }
  },
  {
    name: "boom",
    description: "always fails with the given message and error class",
    signature: "boom(message = \"boom\", { errorClass?, name?, ... })",
    make: (args, options) => {
      maxArgs("boom", args, 1, "args: [\"boom\"]", "the error message")
      return boom(args[0] === undefined ? "boom" : args[0] as string, options ?? {})
    }
  },
  {
    name: "leaky",
    description: "takes a lease and never returns it (demonstrates reclaiming)",
    signature: "leaky({ pool?, resource?, algorithm?, ... })",
    make: (args, options) => {
      maxArgs("leaky", args, 0, "options: { pool: \"apis\" }")
      return leaky(options ?? {})
    }
  },
  {
    name: "simulateLlm",
    description: "acquire, wait, report, return: a simulated LLM call on a pool",
    signature: "simulateLlm({ latency?, failRate?, errorClass?, tokens?, resource?, selector?, algorithm?, ... })",
    make: (args, options) => {
      maxArgs("simulateLlm", args, 0, "options: { resource: \"apis\", latency: \"20 millis\" }")
      durationsWithUnit("simulateLlm", [["options.latency", options?.["latency"]]])
      return simulateLlm(options ?? {})
    }
  },
  {
    name: "shellRun",
    description: "runs a subprocess (argv form substitutes {value} as one argument)",
    signature: "shellRun(command, { timeout?, check?, cwd?, env?, maxOutputBytes?, name? })",
    make: (args, options, ctx) => {
      maxArgs("shellRun", args, 1, "args: [[\"wc\", \"-c\", \"{value}\"]]", "the command (an argv list, or one shell line)")
      durationsWithUnit("shellRun", [["options.timeout", options?.["timeout"]]])
      const cwd = options?.["cwd"]
      const o = typeof cwd === "string" ? { ...options, cwd: path.resolve(ctx.baseDir, cwd) } : { ...options }
      return shellRun(args[0] as string, o)
    }
  },
  {
    name: "writeJsonl",
    description: "appends each value to a JSON Lines file and passes it on",
    signature: "writeJsonl(path, { mode?: \"a\" | \"w\", name? })",
    make: (args, options, ctx) => {
      maxArgs("writeJsonl", args, 1, "args: [\"out/results.jsonl\"]", "the file to append to")
      const p = args[0]
      return writeJsonl(typeof p === "string" && p !== "" ? path.resolve(ctx.baseDir, p) : p as string, options ?? {})
    }
  },
  {
    name: "chat",
    description: "one OpenAI-compatible chat completion through a leased endpoint (pool \"llm\" by default)",
    signature:
      "chat({ name?, resource?, model?, temperature?, maxTokens?, system?, template?, requestTimeout?, retry?, timeout?, selector?, algorithm?, cache?: true | false | mode | { mode?, ttl? }, version?, config? })",
    make: (args, options) => makeChat(args, options)
  },
  {
    name: "judge",
    description: "a blind LLM-as-judge: scores candidates of its input against a versioned rubric (always an evaluator)",
    signature:
      "judge({ rubric: { id, version, criteria: [{ name, description?, scale: { min, max }, weight? }], instructions? }, candidates, context?, model?, temperature?, maxTokens?, metric?, jsonMode?, requestTimeout?, resource?, selector?, algorithm?, cache?: true | false | mode | { mode?, ttl? }, name?, retry?, timeout?, version?, config? })",
    make: (args, options) => makeJudge(args, options)
  }
]

/**
 * The built-ins by name.
 *
 * @since 0.1.0
 * @category registry
 */
export const builtins: ReadonlyMap<string, Builtin> = new Map(entries.map((e) => [e.name, e]))

/**
 * The built-in task names, in registry order.
 *
 * @since 0.1.0
 * @category registry
 */
export const builtinTaskNames: ReadonlyArray<string> = entries.map((e) => e.name)
