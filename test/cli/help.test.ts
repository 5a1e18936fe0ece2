/**
 * Help output as a user sees it: spawned `bin/assay` processes with stdout as a pipe (plain
 * text, no ANSI escape sequences), every line within 80 columns, each option with its own
 * description (never `@effect/cli`'s "A user-defined piece of text."), `$ assay COMMAND` usage
 * lines, no built-in `--wizard`, an example per command; an unknown option or command is refused
 * with the closest name (exit 2).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = path.join(root, "bin/assay")

const assay = (args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(bin, [...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
      child.on("close", (code) => resolve({ code, stdout, stderr }))
    })
  )

const commands = ["mock-llm", "validate", "run", "resume", "plugins", "schema", "report", "export", "merge", "serve", "watch"]

/** The help text reads well: plain, 80 columns, no generated filler, no wizard. */
const assertReadable = (where: string, text: string) => {
  assert.notInclude(text, "\u001b[", where)
  for (const line of text.split("\n")) {
    assert.isAtMost(line.length, 80, `${where}: a line of ${line.length} columns: ${line}`)
  }
  assert.notInclude(text, "A user-defined piece of text", where)
  assert.notInclude(text, "A true or false value", where)
  assert.notInclude(text, "--wizard", where)
  assert.notInclude(text, "This setting is optional", where)
}

describe("assay --help", { timeout: 240_000 }, () => {
  it.live("the root help lists every command with its description, within 80 columns", () =>
    Effect.gen(function*() {
      for (const args of [["--help"], ["-h"], []]) {
        const result = yield* assay(args)
        assert.strictEqual(result.code, 0, args.join(" "))
        assertReadable(`assay ${args.join(" ")}`, result.stdout)
        for (const command of commands) assert.match(result.stdout, new RegExp(`^  ${command} +[A-Z]`, "m"), command)
        assert.include(result.stdout, "$ assay COMMAND --help")
        assert.include(result.stdout, "EXAMPLES")
      }
    }))

  it.live("each command's help: `$ assay COMMAND` usage, described options and defaults, an example", () =>
    Effect.gen(function*() {
      for (const command of commands) {
        const result = yield* assay([command, "--help"])
        assert.strictEqual(result.code, 0, command)
        assertReadable(`assay ${command} --help`, result.stdout)
        assert.match(result.stdout, new RegExp(`^USAGE\\n  \\$ assay ${command}( |$)`, "m"), command)
        assert.match(result.stdout, new RegExp(`^EXAMPLES\\n  # .+\\n  \\$ assay ${command}`, "m"), command)
        // every option heading is followed by its own description
        const lines = result.stdout.split("\n")
        lines.forEach((line, i) => {
          if (/^  -/.test(line)) assert.match(lines[i + 1] ?? "", /^      \S/, `${command}: ${line} has no description`)
        })
      }
      const run = yield* assay(["run", "--help"])
      assert.include(run.stdout, "$ assay run -c <file> [options]")
      assert.include(run.stdout, "--max-admitted <integer>")
      assert.match(run.stdout, /--summary text\|json\n.*Default: text\./)
      const serve = yield* assay(["serve", "--help"])
      assert.match(serve.stdout, /--port <integer>\n.*Default: 8787\./)
      // a repeatable option is not required
      assert.include(serve.stdout, "$ assay serve [options] <store>")
      // the help flag anywhere before `--`, or before the command
      const late = yield* assay(["export", "a.db", "out.csv", "-h"])
      assert.include(late.stdout, "$ assay export")
      const early = yield* assay(["--help", "watch"])
      assert.include(early.stdout, "$ assay watch")
    }))

  it.live("an unknown option gets the closest known one (exit 2), whatever else is on the line", () =>
    Effect.gen(function*() {
      for (const args of [["run", "--concurency", "4"], ["run", "-c", "x.yaml", "--concurency", "4"], ["run", "-c", "x.yaml", "--concurency=4"]]) {
        const result = yield* assay(args)
        assert.strictEqual(result.code, 2, args.join(" "))
        assert.strictEqual(result.stderr, "unknown option --concurency: did you mean --concurrency?\n", args.join(" "))
        assert.strictEqual(result.stdout, "")
      }
      const export_ = yield* assay(["export", "a.db", "out.csv", "--row", "results"])
      assert.strictEqual(export_.code, 2)
      assert.include(export_.stderr, "unknown option --row: did you mean --rows?")
      // nothing close: point at the command's help
      const far = yield* assay(["report", "a.db", "--frobnicate"])
      assert.strictEqual(far.code, 2)
      assert.include(far.stderr, "unknown option --frobnicate: see `assay report --help`")
      // the built-in wizard mode is not offered
      for (const args of [["--wizard"], ["run", "--wizard"]]) {
        const wizard = yield* assay(args)
        assert.strictEqual(wizard.code, 2, args.join(" "))
        assert.include(wizard.stderr, "unknown option --wizard")
      }
      // an option's value and what follows `--` are not options
      const value = yield* assay(["report", "--run-id", "--concurency", "/nonexistent/x.db"])
      assert.notInclude(value.stderr, "unknown option")
    }))

  it.live("--log-level is taken wherever the help lists it: after -c FILE, as --log-level=LEVEL, at the end (tester18d F4)", () =>
    Effect.gen(function*() {
      const config = path.join(root, "examples/experiments/delay.yaml")
      for (
        const args of [
          ["validate", "-c", config, "--log-level", "debug"],
          ["validate", "-c", config, "--log-level=warning"],
          ["validate", "--log-level", "debug", "-c", config]
        ]
      ) {
        const r = yield* assay(args)
        assert.strictEqual(r.code, 0, `${args.join(" ")}: ${r.stderr}`)
        assert.notInclude(r.stderr, "Received unknown argument")
      }
      const typo = yield* assay(["validate", "-c", config, "--log-levl", "debug"])
      assert.strictEqual(typo.code, 2)
      assert.strictEqual(typo.stderr, "unknown option --log-levl: did you mean --log-level?\n")
    }))

  it.live("an unknown command gets the closest command (exit 2)", () =>
    Effect.gen(function*() {
      const result = yield* assay(["reprot", "a.db"])
      assert.strictEqual(result.code, 2)
      assert.strictEqual(result.stderr, "unknown command reprot: did you mean report?\n")
    }))
})
