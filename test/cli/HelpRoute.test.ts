/**
 * The help renderer and the option-name check of `src/cli/Help.ts`, in process over the real
 * command descriptors (the spawned `bin/assay` is tested in `help.test.ts`; `Help.test.ts` would
 * differ from it only in case).
 */
import { assert, describe, it } from "@effect/vitest"
import * as ExportCommand from "../../src/cli/ExportCommand.js"
import * as Help from "../../src/cli/Help.js"
import * as Main from "../../src/cli/main.js"
import * as MockLlmCommand from "../../src/cli/MockLlmCommand.js"
import * as ReportCommand from "../../src/cli/ReportCommand.js"
import * as RunCommand from "../../src/cli/RunCommand.js"
import * as StudyCommand from "../../src/cli/StudyCommand.js"
import { closest } from "../../src/config/internal/issues.js"

const all = ["run", "resume", "report", "export"]
const commands = [RunCommand.run, RunCommand.resume, ReportCommand.report, ExportCommand.exportCommand] as ReadonlyArray<
  Parameters<typeof Help.renderCommand>[0]
>
const route = (...args: ReadonlyArray<string>) => Help.route(args, commands, all)

describe("Help.wrap", () => {
  it("never exceeds the width, keeps every word, indents continuation lines", () => {
    const text = Array.from({ length: 60 }, (_, i) => "w".repeat((i * 7) % 13 + 1)).join(" ")
    const lines = Help.wrap(text, "  # ", "      ")
    for (const line of lines) assert.isAtMost(line.length, Help.WIDTH)
    assert.isTrue(lines.slice(1).every((l) => l.startsWith("      ")))
    assert.strictEqual(lines.join(" ").replace(/^ {2}# /, "").split(/\s+/).join(" "), text)
  })
})

describe("Help.route", () => {
  it("help screens: none, --help, -h before or after the command", () => {
    assert.strictEqual(route()._tag, "RootHelp")
    assert.strictEqual(route("--help")._tag, "RootHelp")
    assert.strictEqual(route("-h", "run")._tag, "CommandHelp")
    assert.strictEqual(route("report", "a.db", "--help")._tag, "CommandHelp")
    // after `--` it is an argument
    assert.strictEqual(route("report", "--", "--help")._tag, "Parse")
  })

  it("known options, values that look like numbers, attached values and `--` go to the parser", () => {
    for (
      const args of [
        ["run", "-c", "x.yaml", "--concurrency", "4"],
        ["run", "-cx.yaml", "--concurrency=4", "--quiet"],
        ["report", "--run-id=--concurency", "a.db"],
        ["export", "a.db", "-", "--limit", "-1"],
        ["--log-level", "debug", "report", "a.db"],
        ["report", "a.db", "--", "--concurency"],
        ["--version"]
      ]
    ) assert.strictEqual(route(...args)._tag, "Parse", args.join(" "))
  })

  it("unknown options and commands, with the closest name", () => {
    const suggest = closest
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["run", "--concurency", "4"], "unknown option --concurency: did you mean --concurrency?"],
      [["run", "-c", "x.yaml", "--stop-afer=5s"], "unknown option --stop-afer: did you mean --stop-after?"],
      [["resume", "--wizard"], "unknown option --wizard: see `assay resume --help`"],
      [["--wizard"], "unknown option --wizard: see `assay --help`"],
      [["--verison"], "unknown option --verison: did you mean --version?"],
      [["export", "a.db", "o.csv", "-x"], "unknown option -x: see `assay export --help`"],
      [["exprot", "a.db"], "unknown command exprot: did you mean export?"],
      // a negation spelled as other tools do: the option that does it here
      [["run", "-c", "x.yaml", "--no-cache"], "unknown option --no-cache: did you mean --cache-mode off?"]
    ]
    for (const [args, message] of cases) {
      const routed = route(...args)
      assert.strictEqual(routed._tag, "Unknown", args.join(" "))
      if (routed._tag === "Unknown") assert.strictEqual(Help.unknownMessage(routed, suggest), message)
    }
  })
})

describe("Help.route: --log-level anywhere among a command's options (tester18d F4)", () => {
  it("moves it right after the command's name, where @effect/cli reads it; a misspelling gets the did-you-mean", () => {
    const parsed = (...args: ReadonlyArray<string>) => {
      const r = route(...args)
      assert.strictEqual(r._tag, "Parse", args.join(" "))
      return r._tag === "Parse" ? r.args ?? args : []
    }
    assert.deepStrictEqual(parsed("run", "-c", "x.yaml", "--log-level", "debug", "--limit", "0"), ["run", "--log-level", "debug", "-c", "x.yaml", "--limit", "0"])
    assert.deepStrictEqual(parsed("run", "-c", "x.yaml", "--log-level=debug"), ["run", "--log-level", "debug", "-c", "x.yaml"])
    assert.deepStrictEqual(parsed("report", "a.db", "--json", "--log-level", "warning"), ["report", "--log-level", "warning", "a.db", "--json"])
    // already where it is read: unchanged; a value that looks like it is not moved; after `--` neither
    assert.deepStrictEqual(parsed("run", "--log-level", "debug", "-c", "x.yaml"), ["run", "--log-level", "debug", "-c", "x.yaml"])
    assert.deepStrictEqual(parsed("report", "--run-id=--log-level", "a.db"), ["report", "--run-id=--log-level", "a.db"])
    // an option where another's value should be is refused, not taken as that value (tester18g F2)
    assert.strictEqual(route("report", "--run-id", "--log-level", "a.db")._tag, "MissingValue")
    assert.deepStrictEqual(parsed("report", "a.db", "--", "--log-level", "debug"), ["report", "a.db", "--", "--log-level", "debug"])
    // a subcommand of a group
    const group = Help.route(["study", "plan", "s.yaml", "--log-level", "debug"], [StudyCommand.study] as unknown as ReadonlyArray<Parameters<typeof Help.renderCommand>[0]>, ["study"])
    assert.deepInclude(group, { _tag: "Parse", args: ["study", "plan", "--log-level", "debug", "s.yaml"] })
    // a bad level or a misspelt option: assay's own messages
    const bad = route("run", "-c", "x.yaml", "--log-level", "loud")
    assert.strictEqual(bad._tag, "BadValue")
    if (bad._tag === "BadValue") assert.match(Help.badValueMessage(bad), /^--log-level: "loud" is not one of all, trace, debug/)
    const typo = route("run", "-c", "x.yaml", "--log-levle", "debug")
    assert.strictEqual(typo._tag, "Unknown")
    if (typo._tag === "Unknown") assert.strictEqual(Help.unknownMessage(typo, closest), "unknown option --log-levle: did you mean --log-level?")
  })
})

describe("Help.route: numeric option values", () => {
  it("a value that is not a number is refused naming the option (both spellings); numbers, signs included, go through", () => {
    const bad: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["run", "-c", "x.yaml", "--concurrency", "abc"], "--concurrency takes a whole number (integer), got \"abc\""],
      [["run", "-c", "x.yaml", "--concurrency=1.5"], "--concurrency takes a whole number (integer), got \"1.5\""],
      [["run", "-c", "x.yaml", "--concurrency", ""], "--concurrency takes a whole number (integer), got \"\""]
    ]
    for (const [args, message] of bad) {
      const routed = route(...args)
      assert.strictEqual(routed._tag, "BadValue", args.join(" "))
      if (routed._tag === "BadValue") assert.strictEqual(Help.badValueMessage(routed), message)
    }
    for (const args of [["run", "-c", "x.yaml", "--concurrency", "8"], ["run", "-c", "x.yaml", "--concurrency=+8"]]) {
      assert.strictEqual(route(...args)._tag, "Parse", args.join(" "))
    }
  })
})

describe("Help.route: a value outside an option's choices (issue 18: `mock-llm --rate-limit-headers azure` printed \"Expected one of the following cases\" naming neither)", () => {
  it("names the option, the value and the choices, with a did-you-mean when one is close", () => {
    const mock = [MockLlmCommand.mockLlm] as unknown as typeof commands
    const bad = Help.route(["mock-llm", "--rate-limit-headers", "azure"], mock, ["mock-llm"])
    assert.strictEqual(bad._tag, "BadValue")
    if (bad._tag === "BadValue") {
      assert.strictEqual(Help.badValueMessage(bad), `--rate-limit-headers: "azure" is not one of none, openai, anthropic`)
    }
    const slip = Help.route(["mock-llm", "--rate-limit-headers=OpenAI"], mock, ["mock-llm"])
    assert.strictEqual(slip._tag, "BadValue")
    if (slip._tag === "BadValue") {
      assert.strictEqual(Help.badValueMessage(slip), `--rate-limit-headers: "OpenAI" is not one of none, openai, anthropic; did you mean openai?`)
    }
    assert.strictEqual(Help.route(["mock-llm", "--rate-limit-headers", "anthropic"], mock, ["mock-llm"])._tag, "Parse")
    // every choice option of every command: run --journal, export --time
    const journal = route("run", "-c", "x.yaml", "--journal", "ful")
    assert.strictEqual(journal._tag, "BadValue")
    if (journal._tag === "BadValue") assert.strictEqual(Help.badValueMessage(journal), `--journal: "ful" is not one of full, summary; did you mean full?`)
    assert.strictEqual(route("run", "-c", "x.yaml", "--journal", "summary")._tag, "Parse")
  })
})

describe("Help.renderCommand", () => {
  it("lists every declared option once, with the required ones in the usage line", () => {
    const text = Help.renderCommand(commands[0]!)
    const { options } = Help.specOf(commands[0]!)
    for (const o of options) {
      const long = o.names.find((n) => n.startsWith("--"))!
      assert.strictEqual(text.split("\n").filter((l) => new RegExp(`^  (-\\w, )?${long}( |$)`).test(l)).length, 1, long)
    }
    assert.include(text, "  $ assay run -c <file> [options]")
  })
})

describe("Help.route: a command group (assay study ...)", () => {
  const groupRoute = (...args: ReadonlyArray<string>) =>
    Help.route(args, [StudyCommand.study] as unknown as ReadonlyArray<Parameters<typeof Help.renderCommand>[0]>, ["study"])

  it("the group alone or with --help shows the group's help, listing its subcommands within 80 columns", () => {
    for (const args of [["study"], ["study", "--help"], ["--help", "study"]]) {
      const r = groupRoute(...args)
      assert.strictEqual(r._tag, "CommandHelp", args.join(" "))
      if (r._tag !== "CommandHelp") continue
      assert.isUndefined(r.parent)
      const text = Help.renderCommand(r.command)
      assert.match(text, /^assay study: /)
      assert.match(text, /\n {2}plan {2}/)
      for (const line of text.split("\n")) assert.isAtMost(line.length, Help.WIDTH)
    }
  })

  it("a subcommand's help names it `assay study plan`; its options are known; a misspelt one or an unknown subcommand is refused", () => {
    const help = groupRoute("study", "plan", "s.yaml", "--help")
    assert.strictEqual(help._tag, "CommandHelp")
    if (help._tag === "CommandHelp") {
      assert.strictEqual(help.parent, "study")
      assert.match(Help.renderCommand(help.command, help.parent), /^assay study plan: [^]*\$ assay study plan \[options\] <study>/)
    }
    assert.strictEqual(groupRoute("study", "plan", "s.yaml", "--json", "--output-root", "x")._tag, "Parse")
    const option = groupRoute("study", "plan", "s.yaml", "--jsno")
    assert.deepInclude(option, { _tag: "Unknown", kind: "option", word: "--jsno", where: "assay study plan" })
    const command = groupRoute("study", "plna", "s.yaml")
    assert.deepInclude(command, { _tag: "Unknown", kind: "command", word: "plna", where: "assay study" })
    if (command._tag === "Unknown") assert.strictEqual(Help.unknownMessage(command, closest), "unknown command plna: did you mean plan?")
  })
})

describe("Help.route: an option given without its value (tester18f F5: `Received unknown argument: '--cache-mode'`)", () => {
  it("every option of every command that takes a value, at the end of the line: `--X needs a value (…)`, naming what it takes", async () => {
    const { commands: loaded } = await Main.loadSubcommands(["node", "assay"])
    const every = loaded as unknown as typeof commands
    const names = every.map(Help.nameOf)
    let checked = 0
    for (const command of every) {
      const targets = Help.childrenOf(command)?.map((c) => [Help.nameOf(command), c] as const) ?? [[undefined, command] as const]
      for (const [group, target] of targets) {
        for (const option of [...Help.specOf(target).options, ...Help.commonOptions]) {
          if (option.value._tag === "None") continue
          for (const spelled of option.names) {
            const args = [...(group === undefined ? [] : [group]), Help.nameOf(target), spelled]
            const routed = Help.route(args, every, names)
            assert.strictEqual(routed._tag, "MissingValue", args.join(" "))
            if (routed._tag === "MissingValue") assert.match(Help.missingValueMessage(routed), new RegExp(`^${spelled} needs a value \\(.+\\)$`))
            // followed by another option of the command: that option is not taken as its value
            // (a file named `--cache`; tester18g F2)
            const options = [...Help.specOf(target).options, ...Help.commonOptions]
            const next = options.flatMap((o) => o.names).find((n) => n.startsWith("--") && !option.names.includes(n) && n !== "--help")!
            const followed = Help.route([...args, next], every, names)
            assert.strictEqual(followed._tag, "MissingValue", [...args, next].join(" "))
            if (followed._tag === "MissingValue") {
              assert.match(Help.missingValueMessage(followed), new RegExp(`^${spelled} needs a value \\(.+\\), got the option ${next}$`))
            }
            checked++
          }
        }
      }
    }
    assert.isAbove(checked, 50)
    const message = (...args: ReadonlyArray<string>) => {
      const routed = route(...args)
      return routed._tag === "MissingValue" ? Help.missingValueMessage(routed) : routed._tag
    }
    assert.strictEqual(message("run", "-c", "x.yaml", "--cache-mode"), "--cache-mode needs a value (one of readWrite, readOnly, refresh, off)")
    assert.strictEqual(message("run", "-c", "x.yaml", "--concurrency"), "--concurrency needs a value (a whole number)")
    assert.strictEqual(message("run", "-c"), "-c needs a value (file)")
    // another option where the value should be (tester18g F2)
    assert.strictEqual(message("run", "-c", "x.yaml", "--cache-db", "--cache"), "--cache-db needs a value (path), got the option --cache")
    assert.strictEqual(message("run", "-c", "x.yaml", "--store", "--cache"), "--store needs a value (store), got the option --cache")
    assert.strictEqual(message("run", "-c", "x.yaml", "--label", "--cache"), "--label needs a value (label), got the option --cache")
    assert.strictEqual(
      message("run", "-c", "x.yaml", "--cache-db", "--cache-mode", "readOnly"),
      "--cache-db needs a value (path), got the option --cache-mode"
    )
    assert.strictEqual(message("run", "-c", "x.yaml", "--cache-db", "--store=x.db"), "--cache-db needs a value (path), got the option --store=x.db")
    assert.strictEqual(message("run", "--store", "-c", "x.yaml"), "--store needs a value (store), got the option -c")
    assert.strictEqual(message("run", "-c", "x.yaml", "--cache-mode", "--cache"), "--cache-mode needs a value (one of readWrite, readOnly, refresh, off), got the option --cache")
    // values that only look like options: a negative number, `-`, a value after `=`
    assert.strictEqual(route("run", "-c", "x.yaml", "--cache-ttl", "-5 seconds")._tag, "Parse")
    assert.strictEqual(route("run", "-c", "-")._tag, "Parse")
    assert.strictEqual(route("run", "-c", "x.yaml", "--label=--cache")._tag, "Parse")
    // `--help` after it: the help screen
    assert.strictEqual(route("run", "-c", "x.yaml", "--cache-db", "--help")._tag, "CommandHelp")
    // given a value, or its value attached: parsed as before
    assert.strictEqual(route("run", "-c", "x.yaml", "--cache-mode", "off")._tag, "Parse")
    assert.strictEqual(route("run", "-c", "x.yaml", "--cache-mode=off")._tag, "Parse")
  })
})
