/**
 * Every option of every command is documented: its long name appears in docs/*.md, and the
 * options of `assay mock-llm` are in docs/cli.md's "mock-llm" section (issue 18: its
 * `--rps-schedule` and `--rate-limit-headers` were in no reference). The options are read from
 * the commands' own descriptors, the same ones `--help` prints (`Help.specOf`), so a new option
 * without a line in the docs fails here.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Help from "../../src/cli/Help.js"
import { loadSubcommands } from "../../src/cli/main.js"

const docsDir = path.join(__dirname, "../../docs")
const allDocs = fs.readdirSync(docsDir).filter((f) => f.endsWith(".md")).map((f) => fs.readFileSync(path.join(docsDir, f), "utf8")).join("\n")
const cliDoc = fs.readFileSync(path.join(docsDir, "cli.md"), "utf8")

/** The text of the `## NAME` section of docs/cli.md (to the next `## `), or "". */
const section = (name: string): string => {
  const start = cliDoc.indexOf(`\n## ${name}\n`)
  if (start < 0) return ""
  const end = cliDoc.indexOf("\n## ", start + 1)
  return cliDoc.slice(start, end < 0 ? undefined : end)
}

/** A command and its subcommands, each with its full name (`study run`). */
const flatten = (command: Parameters<typeof Help.nameOf>[0], parent = ""): Array<readonly [string, Parameters<typeof Help.nameOf>[0]]> => {
  const name = `${parent} ${Help.nameOf(command)}`.trim()
  return [[name, command], ...(Help.childrenOf(command) ?? []).flatMap((c) => flatten(c, name))]
}

/** `text` names `flag` as a whole option (`--rps` is not found inside `--rps-schedule`). */
const names = (text: string, flag: string): boolean => new RegExp(`${flag}(?![\\w-])`).test(text)

describe("docs: every command-line option is documented", () => {
  it("each long option of each command appears in docs/*.md", async () => {
    const { commands } = await loadSubcommands(["node", "assay"])
    const missing: Array<string> = []
    for (const top of commands) {
      for (const [name, command] of flatten(top)) {
        for (const o of Help.specOf(command).options) {
          const long = o.names.find((n) => n.startsWith("--"))
          if (long !== undefined && !names(allDocs, long)) missing.push(`assay ${name} ${long}`)
        }
      }
    }
    assert.deepStrictEqual(missing, [], `options in no docs/*.md: ${missing.join(", ")}`)
  })

  it("each option of assay mock-llm is in docs/cli.md's mock-llm section", async () => {
    const { commands } = await loadSubcommands(["node", "assay", "mock-llm"])
    const text = section("mock-llm")
    assert.notStrictEqual(text, "", "docs/cli.md has a '## mock-llm' section")
    const flags = Help.specOf(commands[0]!).options.flatMap((o) => o.names.filter((n) => n.startsWith("--")))
    assert.include(flags, "--rps-schedule")
    const missing = flags.filter((f) => !names(text, f))
    assert.deepStrictEqual(missing, [], `mock-llm options not in docs/cli.md: ${missing.join(", ")}`)
  })
})
