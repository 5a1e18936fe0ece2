/**
 * `assay`'s help screens and its check of the command line's option names, both read from the
 * `@effect/cli` descriptors of the commands (public API only: `Command.getUsage` gives each
 * option's names and whether it takes a value, `Command.getHelp` its description).
 *
 * `@effect/cli`'s own help (0.77) cannot be made to read well: it prints each command's full
 * usage on one line (590 columns for `run`), the value type of every option as a sentence ("A
 * user-defined piece of text."), `$ run` for `$ assay run`, and built-in options such as
 * `--wizard`. This renderer lays the same descriptors out within {@link WIDTH} columns, with the
 * examples of `HelpText.ts`.
 *
 * @since 0.1.0
 */
import type * as CliCommand from "@effect/cli/Command"
import * as Command from "@effect/cli/Command"
import * as CliConfig from "@effect/cli/CliConfig"
import type * as HelpDoc from "@effect/cli/HelpDoc"
import type * as Span from "@effect/cli/HelpDoc/Span"
import type * as Usage from "@effect/cli/Usage"
import * as Option from "effect/Option"
import { closest } from "../domain/internal/suggest.js"
import { type Example, examplesOf, rootExamples } from "./HelpText.js"

/**
 * The width (columns) every help line fits in.
 *
 * @since 0.1.0
 * @category constants
 */
export const WIDTH = 80

/** Any command: its parsed value is not looked at here. */
type AnyCommand = CliCommand.Command<string, never, unknown, unknown>

/** The help of `@effect/cli`'s descriptors without its built-in options (`--wizard`, ...). */
const helpConfig = CliConfig.make({ showBuiltIns: false })

// -------------------------------------------------------------------------------------------
// Descriptors
// -------------------------------------------------------------------------------------------

/**
 * One option of a command as the command line sees it.
 *
 * @since 0.1.0
 * @category models
 */
export interface OptionSpec {
  /** Its names with their dashes, long names first: `["--config", "-c"]`. */
  readonly names: ReadonlyArray<string>
  /** The placeholder of its value (`file`, `integer`, `full | summary`), none for a flag. */
  readonly value: Option.Option<string>
  /** Whether the command runs without it. */
  readonly optional: boolean
  /** Whether it may be given more than once. */
  readonly repeated: boolean
}

/**
 * A positional argument of a command (`<store>`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ArgSpec {
  readonly name: string
  readonly optional: boolean
  readonly repeated: boolean
}

/**
 * The options and arguments of a command, in declaration order, read from its `Usage`.
 *
 * @since 0.1.0
 * @category descriptors
 */
export const specOf = (command: AnyCommand): { readonly options: ReadonlyArray<OptionSpec>; readonly args: ReadonlyArray<ArgSpec> } => {
  const options: Array<OptionSpec> = []
  const args: Array<ArgSpec> = []
  let first = true
  const walk = (usage: Usage.Usage, optional: boolean, repeated: boolean): void => {
    switch (usage._tag) {
      case "Named": {
        // the first name of a command's usage is the command itself
        if (first) {
          first = false
          return
        }
        if (usage.names.some((n) => n.startsWith("-"))) {
          const names = [...usage.names].sort((a, b) => (a.startsWith("--") === b.startsWith("--") ? 0 : a.startsWith("--") ? -1 : 1))
          // a repeated option (`Options.repeated`) may be given zero times
          options.push({ names, value: usage.acceptedValues, optional: optional || repeated, repeated })
        } else {
          for (const name of usage.names) args.push({ name, optional, repeated })
        }
        return
      }
      case "Optional":
        return walk(usage.usage, true, repeated)
      case "Repeated":
        return walk(usage.usage, optional, true)
      case "Concat":
      case "Alternation":
        walk(usage.left, optional, repeated)
        return walk(usage.right, optional, repeated)
      case "Empty":
      case "Mixed":
        return
    }
  }
  walk(Command.getUsage(command), false, false)
  return { options, args }
}

/** The plain text of a span. */
const spanText = (span: Span.Span): string => {
  switch (span._tag) {
    case "Text":
    case "URI":
      return span.value
    case "Highlight":
    case "Weak":
    case "Strong":
      return spanText(span.value)
    case "Sequence":
      return spanText(span.left) + spanText(span.right)
  }
}

/** The paragraphs of a help document, in order (headers and lists flattened). */
const flatten = (doc: HelpDoc.HelpDoc): ReadonlyArray<HelpDoc.HelpDoc> => {
  switch (doc._tag) {
    case "Sequence":
      return [...flatten(doc.left), ...flatten(doc.right)]
    case "Empty":
      return []
    default:
      return [doc]
  }
}

/**
 * Sentences `@effect/cli` adds to an entry's description: the usage line and the option
 * heading already say them.
 */
const generated = /^(This setting is optional\.|This option may be repeated zero or more times\.|This option must be repeated .*|This argument must be repeated .*|This argument is optional\.)$/

/**
 * Each option's and argument's description paragraphs, keyed by its first long name (`--store`)
 * or its placeholder (`<store>`), from `Command.getHelp`. The first paragraph of an entry is
 * `@effect/cli`'s sentence for the value type ("A user-defined piece of text."), dropped: the
 * heading shows the placeholder.
 */
const descriptionsOf = (command: AnyCommand): {
  readonly description: ReadonlyArray<string>
  readonly entries: ReadonlyMap<string, ReadonlyArray<string>>
} => {
  const description: Array<string> = []
  const entries = new Map<string, ReadonlyArray<string>>()
  let section = ""
  for (const block of flatten(Command.getHelp(command, helpConfig))) {
    if (block._tag === "Header") section = spanText(block.value)
    else if (block._tag === "Paragraph" && section === "DESCRIPTION") description.push(spanText(block.value))
    else if (block._tag === "DescriptionList") {
      for (const [span, doc] of block.definitions) {
        const heading = spanText(span)
        const key = heading.match(/--[\w-]+/)?.[0] ?? heading.match(/<[^>]+>/)?.[0] ?? heading
        const paragraphs = flatten(doc).flatMap((p) => (p._tag === "Paragraph" ? [spanText(p.value)] : []))
        entries.set(key, paragraphs.slice(1).filter((p) => !generated.test(p)))
      }
    }
  }
  return { description, entries }
}

/**
 * A command's one-line description (its first description paragraph).
 *
 * @since 0.1.0
 * @category descriptors
 */
export const summaryOf = (command: AnyCommand): string => descriptionsOf(command).description[0] ?? ""

/**
 * The name of a command.
 *
 * @since 0.1.0
 * @category descriptors
 */
export const nameOf = (command: AnyCommand): string => [...Command.getNames(command)][0] ?? ""

const groups = new WeakMap<object, ReadonlyArray<AnyCommand>>()

/**
 * Declares `parent` a command group (`assay study plan|run|...`): its `children` are routed and
 * get their own help screens (`assay study plan --help`), and `assay study --help` lists them.
 * The same children must be given to `Command.withSubcommands` for parsing.
 *
 * @param parent the group's command (`Command.make("study")` with the children as subcommands)
 * @param children the subcommands, in the order listed
 * @returns `parent`
 * @since 0.6.0
 * @category descriptors
 */
export const group = <C extends object>(parent: C, children: ReadonlyArray<unknown>): C => {
  groups.set(parent, children as ReadonlyArray<AnyCommand>)
  return parent
}

/**
 * The subcommands of a command group (see {@link group}), or `undefined` for a plain command.
 *
 * @since 0.6.0
 * @category descriptors
 */
export const childrenOf = (command: AnyCommand): ReadonlyArray<AnyCommand> | undefined => groups.get(command)

// -------------------------------------------------------------------------------------------
// Layout
// -------------------------------------------------------------------------------------------

/**
 * Word-wraps `text` to `width` columns, the first line after `first` and the others after
 * `rest` (both counted in the width). A single word longer than the room is put on its own line.
 *
 * @since 0.1.0
 * @category layout
 */
export const wrap = (text: string, first: string, rest: string = first, width: number = WIDTH): Array<string> => {
  const lines: Array<string> = []
  let line = first
  let empty = true
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    if (!empty && line.length + 1 + word.length > width) {
      lines.push(line)
      line = rest + word
    } else {
      line = empty ? line + word : `${line} ${word}`
    }
    empty = false
  }
  lines.push(line)
  return lines
}

/** Lays out usage tokens (kept whole) as `$ assay ...` lines, continued four columns in. */
const usageLines = (tokens: ReadonlyArray<string>): Array<string> => {
  const lines: Array<string> = []
  let line = "  $"
  for (const token of tokens) {
    if (line.length + 1 + token.length > WIDTH && line !== "  $") {
      lines.push(line)
      line = `      ${token}`
    } else {
      line = `${line} ${token}`
    }
  }
  lines.push(line)
  return lines
}

const bold = (text: string): string => `\u001b[1m${text}\u001b[22m`

const section = (title: string, lines: ReadonlyArray<string>): Array<string> =>
  lines.length === 0 ? [] : ["", bold(title), ...lines]

/** The placeholder of a value: `<file>`, or the choices `full|summary`. */
const placeholder = (value: string): string => (value.includes(" | ") ? value.replaceAll(" | ", "|") : `<${value}>`)

/** An option's heading: `-c, --config <file>`. */
const heading = (option: OptionSpec): string => {
  const short = option.names.filter((n) => !n.startsWith("--"))
  const long = option.names.filter((n) => n.startsWith("--"))
  const names = [...short, ...long].join(", ")
  return Option.match(option.value, { onNone: () => names, onSome: (v) => `${names} ${placeholder(v)}` })
}

/** `--config <file>` as the usage line shows a required option. */
const usageToken = (option: OptionSpec): string => {
  const name = option.names.find((n) => !n.startsWith("--")) ?? option.names[0]!
  return Option.match(option.value, { onNone: () => name, onSome: (v) => `${name} ${placeholder(v)}` })
}

const exampleLines = (examples: ReadonlyArray<Example>): Array<string> =>
  examples.flatMap((e, i) =>
    e.comment === ""
      ? wrap(e.command, "  $ ", "      ")
      : [...(i > 0 ? [""] : []), ...wrap(e.comment, "  # ", "  # "), ...wrap(e.command, "  $ ", "      ")]
  )

/** One entry of a definition list: the heading, then its sentences six columns in. */
const entryLines = (title: string, paragraphs: ReadonlyArray<string>): Array<string> => [
  `  ${title}`,
  ...(paragraphs.length === 0 ? [] : wrap(paragraphs.join(" "), "      "))
]

/**
 * The options every command accepts besides its own, as `(-h, --help)`; `--log-level` takes
 * a value.
 *
 * @since 0.1.0
 * @category descriptors
 */
export const commonOptions: ReadonlyArray<OptionSpec & { readonly description: string }> = [
  {
    names: ["--help", "-h"],
    value: Option.none(),
    optional: true,
    repeated: false,
    description: "Show this help."
  },
  {
    names: ["--log-level"],
    value: Option.some("all | trace | debug | info | warning | error | fatal | none"),
    optional: true,
    repeated: false,
    description: "The least severe log messages printed (default: info)."
  }
]

/**
 * The options of `assay` itself (before a command name).
 *
 * @since 0.1.0
 * @category descriptors
 */
export const rootOptions: ReadonlyArray<OptionSpec & { readonly description: string }> = [
  { ...commonOptions[0]!, description: "Show this help; `assay COMMAND --help` shows a command's." },
  { names: ["--version"], value: Option.none(), optional: true, repeated: false, description: "Print assay's version." },
  {
    names: ["--completions"],
    value: Option.some("sh | bash | fish | zsh"),
    optional: true,
    repeated: false,
    description: "Print a completion script for this shell."
  }
]

/**
 * The help of `assay` itself: what it is, the commands with their one-line descriptions, the
 * root options and a few examples, every line within {@link WIDTH} columns.
 *
 * @param version the version printed in the first line
 * @param commands the subcommands, in the order listed
 * @since 0.1.0
 * @category rendering
 */
export const renderRoot = (version: string, description: string, commands: ReadonlyArray<AnyCommand>): string => {
  const names = commands.map(nameOf)
  const column = Math.max(...names.map((n) => n.length)) + 4
  return [
    ...wrap(`assay ${version}: ${description}`, ""),
    ...section("USAGE", ["  $ assay COMMAND [options]", "  $ assay COMMAND --help"]),
    ...section(
      "COMMANDS",
      commands.flatMap((command, i) =>
        wrap(summaryOf(command), `  ${names[i]!.padEnd(column - 2)}`, " ".repeat(column))
      )
    ),
    ...section("OPTIONS", rootOptions.flatMap((o) => entryLines(heading(o), [o.description]))),
    ...section("EXAMPLES", exampleLines(rootExamples)),
    ""
  ].join("\n")
}

/**
 * The help of one command: its description, its usage (required options and arguments,
 * `[options]` for the rest), each argument and option with its description and default, and
 * its examples, every line within {@link WIDTH} columns.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderCommand = (command: AnyCommand, parent?: string): string => {
  const name = parent === undefined ? nameOf(command) : `${parent} ${nameOf(command)}`
  const children = childrenOf(command)
  if (children !== undefined) {
    const names = children.map(nameOf)
    const column = Math.max(...names.map((n) => n.length)) + 4
    return [
      ...descriptionsOf(command).description.flatMap((p, i) => wrap(i === 0 ? `assay ${name}: ${p}` : p, "")),
      ...section("USAGE", [`  $ assay ${name} COMMAND [options]`, `  $ assay ${name} COMMAND --help`]),
      ...section("COMMANDS", children.flatMap((c, i) => wrap(summaryOf(c), `  ${names[i]!.padEnd(column - 2)}`, " ".repeat(column)))),
      ...section("EXAMPLES", exampleLines(examplesOf(name))),
      ""
    ].join("\n")
  }
  const { args, options } = specOf(command)
  const { description, entries } = descriptionsOf(command)
  const tokens = [
    "assay",
    name,
    ...options.filter((o) => !o.optional).map(usageToken),
    "[options]",
    ...args.map((a) => `${a.optional ? `[${a.name}]` : a.name}${a.repeated ? "..." : ""}`)
  ]
  const all = [...options.map((o) => ({ ...o, description: entries.get(o.names[0]!) ?? [] })), ...commonOptions.map((o) => ({ ...o, description: [o.description] }))]
  return [
    ...description.flatMap((p, i) => wrap(i === 0 ? `assay ${name}: ${p}` : p, "")),
    ...section("USAGE", usageLines(tokens)),
    ...section(
      "ARGUMENTS",
      args.flatMap((a) => entryLines(`${a.name}${a.repeated ? "..." : ""}`, entries.get(a.name) ?? []))
    ),
    ...section(
      "OPTIONS",
      all.flatMap((o) =>
        entryLines(heading(o), [
          ...o.description,
          ...(o.optional ? [] : ["Required."]),
          ...(o.repeated ? ["Repeatable."] : [])
        ])
      )
    ),
    ...section("EXAMPLES", exampleLines(examplesOf(name))),
    ""
  ].join("\n")
}

// -------------------------------------------------------------------------------------------
// Routing
// -------------------------------------------------------------------------------------------

/**
 * What a command line asks for before it is parsed: a help screen, a refusal of an unknown
 * option or command (with the candidates to suggest from), or a run by `@effect/cli`.
 *
 * @since 0.1.0
 * @category routing
 */
export type Route =
  | { readonly _tag: "RootHelp" }
  | {
    readonly _tag: "CommandHelp"
    readonly command: AnyCommand
    /** The group a subcommand belongs to (`study` for `assay study plan`), if any. */
    readonly parent?: string | undefined
  }
  | {
    readonly _tag: "Unknown"
    readonly kind: "option" | "command"
    /** The word as typed (`--concurency`). */
    readonly word: string
    /** Where: `assay run`. */
    readonly where: string
    readonly candidates: ReadonlyArray<string>
  }
  | {
    readonly _tag: "BadValue"
    /** The option as typed (`--latency-ms`). */
    readonly option: string
    readonly value: string
    /** What it takes: `integer`, `float`, or its choices (`none | openai | anthropic`). */
    readonly expected: string
  }
  | {
    readonly _tag: "MissingValue"
    /** The option as typed (`--cache-mode`). */
    readonly option: string
    /** What it takes: `integer`, `float`, its choices (`readWrite | readOnly`), or a placeholder (`file`). */
    readonly expected: string
    /**
     * The option found where its value should be (`--cache` in `--cache-db --cache`), when it
     * was not left out at the end of the line (since 0.15.0).
     */
    readonly got?: string | undefined
  }
  | {
    readonly _tag: "Parse"
    /** The command line's command (`assay study confirm`), when it names one. */
    readonly where?: string | undefined
    /**
     * The command line to parse (after the program), when it differs from the one given:
     * `--log-level LEVEL` (or `--log-level=LEVEL`) anywhere among a command's options, moved
     * right after the command's name, the one place `@effect/cli` 0.77 reads it (after
     * `-c FILE` it answered `Received unknown argument: '--log-level'`; tester18d F4).
     */
    readonly args?: ReadonlyArray<string> | undefined
  }

/** The choices of a placeholder that lists them (`none | openai | anthropic`), else none. */
const choicesOf = (placeholder: string): ReadonlyArray<string> | undefined =>
  placeholder.includes(" | ") ? placeholder.split(" | ").map((c) => c.trim()) : undefined

/**
 * Whether `value` is what a numeric placeholder takes (`integer`, `float`) or one of the
 * choices a placeholder lists (`full | summary`); any other placeholder takes anything.
 */
const valueOk = (placeholder: string, value: string): boolean =>
  placeholder === "integer"
    ? /^[+-]?\d+$/.test(value.trim())
    : placeholder === "float"
    ? value.trim() !== "" && Number.isFinite(Number(value))
    : choicesOf(placeholder)?.includes(value) ?? true

const isHelp = (token: string) => token === "--help" || token === "-h"

/**
 * Whether `token`, found where an option's value should be, is an option rather than a value:
 * any `--word` (`--cache`, `--cache-mode=off`), or a short option `known` declares (`-c`,
 * `-cfile.yaml`); a negative number (`-5`) and `-` are values.
 */
const isOptionToken = (token: string, known: ReadonlyArray<OptionSpec>): boolean => {
  if (token.startsWith("--") && token.length > 2) return true
  const name = optionName(token)
  return name !== undefined && known.some((o) => o.names.some((n) => !n.startsWith("--") && name.startsWith(n)))
}

/** The option name of a token (`--store=x` → `--store`), none for a value or a positional. */
const optionName = (token: string): string | undefined =>
  token.startsWith("-") && token !== "-" && !/^-\d/.test(token) ? token.split("=")[0] : undefined

/**
 * Walks `args` (the command line after the program) over the options and commands the
 * descriptors declare: `--help` anywhere (before `--`) is a help screen, an option no
 * descriptor declares (`--concurency`, `--wizard`) or an unknown command name is refused, the
 * rest goes to `@effect/cli`'s parser (values, required options, types).
 *
 * @param args the command line without node and the script (`process.argv.slice(2)`)
 * @param commands the loaded subcommands (those `args` can name)
 * @param all the names of every subcommand (the candidates of a misspelt command)
 * @since 0.1.0
 * @category routing
 */
export const route = (args: ReadonlyArray<string>, commands: ReadonlyArray<AnyCommand>, all: ReadonlyArray<string>): Route => {
  /** Checks the options of `tokens` against `known`; stops at the first positional it is given. */
  const scan = (
    tokens: ReadonlyArray<string>,
    known: ReadonlyArray<OptionSpec>,
    where: string
  ): { readonly help: boolean; readonly unknown?: Route; readonly positional?: number; readonly logLevel: ReadonlyArray<number> } => {
    let help = false
    // where `--log-level` and its value stand (indices into `tokens`)
    const logLevel: Array<number> = []
    for (let i = 0; i < tokens.length; i++) {
      const token = tokens[i]!
      if (token === "--") break
      const name = optionName(token)
      if (name === undefined) {
        if (where === "assay") return { help, positional: i, logLevel }
        continue
      }
      if (isHelp(name)) {
        help = true
        continue
      }
      const option = known.find((o) =>
        o.names.includes(name) ||
        // a short option with its value attached: -cfile.yaml
        (!name.startsWith("--") && o.names.some((n) => !n.startsWith("--") && name.startsWith(n)))
      )
      if (option === undefined) {
        const candidates = known.flatMap((o) => o.names.filter((n) => n.startsWith("--")))
        return { help, logLevel, unknown: { _tag: "Unknown", kind: "option", word: name, where, candidates } }
      }
      if (name === LOG_LEVEL) logLevel.push(i)
      if (Option.isSome(option.value)) {
        // its value: after `=`, else the next token (which it consumes)
        const eq = token.indexOf("=")
        const value = eq !== -1 && token.startsWith("--") ? token.slice(eq + 1) : option.names.includes(token) ? tokens[i + 1] : undefined
        const separate = option.names.includes(token)
        // `--cache-db --help`: the help screen, not a file named `--help`
        if (separate && value !== undefined && isHelp(value)) continue
        if (separate) i++
        // its value left out: the option ends the line (`@effect/cli` answered `Received
        // unknown argument: '--cache-mode'`; tester18f F5)
        if (separate && value === undefined) {
          return { help, logLevel, unknown: { _tag: "MissingValue", option: name, expected: option.value.value } }
        }
        // or another option stands where its value should be: `@effect/cli` would take it as
        // the value (a store or cache file named `--cache`, a label `--cache`; tester18g F2).
        // Any `--word` is an option there (a value that starts with `--` is written
        // `--label=--x`), and so is a short option of the command (`-c`); `-5` is a number.
        if (separate && value !== undefined && isOptionToken(value, known)) {
          return { help, logLevel, unknown: { _tag: "MissingValue", option: name, expected: option.value.value, got: value } }
        }
        if (value !== undefined && !valueOk(option.value.value, value)) {
          return { help, logLevel, unknown: { _tag: "BadValue", option: name, value, expected: option.value.value } }
        }
      }
    }
    return { help, logLevel }
  }
  /**
   * The command line with the command's `--log-level` moved right after its name (`head`: the
   * words up to and including the name; `tokens`: the rest, scanned), as `--log-level LEVEL`;
   * `undefined` when there is none to move.
   */
  const hoisted = (head: ReadonlyArray<string>, tokens: ReadonlyArray<string>, at: ReadonlyArray<number>) => {
    if (at.length === 0 || (at.length === 1 && at[0] === 0)) return undefined
    const moved: Array<string> = []
    const skip = new Set<number>()
    for (const i of at) {
      const t = tokens[i]!
      skip.add(i)
      if (t !== LOG_LEVEL) moved.push(LOG_LEVEL, t.slice(LOG_LEVEL.length + 1))
      else if (i + 1 < tokens.length) {
        moved.push(LOG_LEVEL, tokens[i + 1]!)
        skip.add(i + 1)
      } else moved.push(LOG_LEVEL) // no value: @effect/cli says so
    }
    return [...head, ...moved, ...tokens.filter((_, i) => !skip.has(i))]
  }
  if (args.length === 0) return { _tag: "RootHelp" }
  const root = scan(args, [...rootOptions, ...commonOptions.slice(1)], "assay")
  if (root.unknown !== undefined) return root.unknown
  if (root.positional === undefined) return root.help ? { _tag: "RootHelp" } : { _tag: "Parse" }
  const name = args[root.positional]!
  const command = commands.find((c) => nameOf(c) === name)
  if (command === undefined) {
    return root.help ? { _tag: "RootHelp" } : { _tag: "Unknown", kind: "command", word: name, where: "assay", candidates: all }
  }
  const rest = args.slice(root.positional + 1)
  const children = childrenOf(command)
  if (children !== undefined) {
    // a group: its first positional names the subcommand
    const at = rest.findIndex((t) => optionName(t) === undefined)
    const help = root.help || rest.slice(0, at === -1 ? rest.length : at).some((t) => isHelp(t))
    if (at === -1) return help || rest.length === 0 ? { _tag: "CommandHelp", command } : { _tag: "Parse" }
    const child = children.find((c) => nameOf(c) === rest[at])
    if (child === undefined) {
      return help ? { _tag: "CommandHelp", command } : {
        _tag: "Unknown",
        kind: "command",
        word: rest[at]!,
        where: `assay ${name}`,
        candidates: children.map(nameOf)
      }
    }
    const sub = scan(rest.slice(at + 1), [...specOf(child).options, ...commonOptions], `assay ${name} ${rest[at]}`)
    if (help || sub.help) return { _tag: "CommandHelp", command: child, parent: name }
    const moved = hoisted(args.slice(0, root.positional + 1 + at + 1), rest.slice(at + 1), sub.logLevel)
    return sub.unknown ?? { _tag: "Parse", where: `assay ${name} ${rest[at]}`, ...(moved === undefined ? {} : { args: moved }) }
  }
  const sub = scan(rest, [...specOf(command).options, ...commonOptions], `assay ${name}`)
  if (root.help || sub.help) return { _tag: "CommandHelp", command }
  const moved = hoisted(args.slice(0, root.positional + 1), rest, sub.logLevel)
  return sub.unknown ?? { _tag: "Parse", where: `assay ${name}`, ...(moved === undefined ? {} : { args: moved }) }
}

/** The option every command takes for its log level (see {@link commonOptions}). */
const LOG_LEVEL = "--log-level"

/**
 * The message of an option given a value its type refuses, naming the option (what
 * `@effect/cli` says alone, `'abc' is not a float`, names none): `--latency-ms takes a number
 * (float), got "abc"`; a value outside an option's choices (`@effect/cli` says `Expected one of
 * the following cases: …` with neither the option nor the value): `--rate-limit-headers:
 * "azure" is not one of none, openai, anthropic`, with a did-you-mean when one is close.
 *
 * @since 0.10.0
 * @category routing
 */
export const badValueMessage = (bad: Extract<Route, { readonly _tag: "BadValue" }>): string => {
  const choices = choicesOf(bad.expected)
  if (choices !== undefined) {
    const near = closest(bad.value, choices)
    return `${bad.option}: ${JSON.stringify(bad.value)} is not one of ${choices.join(", ")}${near === undefined ? "" : `; did you mean ${near}?`}`
  }
  return `${bad.option} takes ${bad.expected === "integer" ? "a whole number (integer)" : "a number (float)"}, got ${JSON.stringify(bad.value)}`
}

/**
 * The message of an option given without its value (at the end of the line), in place of
 * `@effect/cli`'s `Received unknown argument: '--cache-mode'`: `--cache-mode needs a value
 * (one of readWrite, readOnly, refresh, off)`, `--concurrency needs a value (a whole
 * number)`, `--latency-ms needs a value (a number)`, else the placeholder `--help` shows
 * (`--cache-db needs a value (file)`); when another option stands where the value should be,
 * it is named: `--cache-db needs a value (path), got the option --cache` (since 0.15.0).
 *
 * @since 0.14.0
 * @category routing
 */
export const missingValueMessage = (missing: Extract<Route, { readonly _tag: "MissingValue" }>): string => {
  const choices = choicesOf(missing.expected)
  const what = choices !== undefined
    ? `one of ${choices.join(", ")}`
    : missing.expected === "integer"
    ? "a whole number"
    : missing.expected === "float"
    ? "a number"
    : missing.expected
  return `${missing.option} needs a value (${what})${missing.got === undefined ? "" : `, got the option ${missing.got}`}`
}

/** Negations users type from other tools, and the option (with its value) that does it in assay. */
const negations: Readonly<Record<string, { readonly option: string; readonly spelled: string }>> = {
  "--no-cache": { option: "--cache-mode", spelled: "--cache-mode off" }
}

/**
 * The message of an unknown option or command, with the closest candidate when one is close
 * enough (`suggest`, the config loader's `closest`): `unknown option --concurency: did you mean
 * --concurrency?`; a negation spelled as in other tools names assay's way (`--no-cache`: did you
 * mean `--cache-mode off`?).
 *
 * @param suggest picks the candidate closest to a word, if any is a plausible typo
 * @since 0.1.0
 * @category routing
 */
export const unknownMessage = (
  unknown: Extract<Route, { readonly _tag: "Unknown" }>,
  suggest: (word: string, candidates: ReadonlyArray<string>) => string | undefined
): string => {
  const bare = (s: string) => s.replace(/^-+/, "")
  // a negation other tools spell as a flag of its own: name the option that does it here
  const negation = negations[unknown.word]
  if (unknown.kind === "option" && negation !== undefined && unknown.candidates.includes(negation.option)) {
    return `unknown option ${unknown.word}: did you mean ${negation.spelled}?`
  }
  // `-json` for `--json`: the same name with other dashes (a suggester never offers the word itself)
  const near = unknown.candidates.map(bare).find((c) => c === bare(unknown.word)) ?? suggest(bare(unknown.word), unknown.candidates.map(bare))
  const match = near === undefined ? undefined : unknown.candidates.find((c) => bare(c) === near)
  const hint = match !== undefined ? `did you mean ${match}?` : `see \`${unknown.where} --help\``
  return `unknown ${unknown.kind} ${unknown.word}: ${hint}`
}
