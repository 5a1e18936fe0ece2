/**
 * Reads `docs/tutorial.md` into steps: each fenced block preceded by a
 * `<!-- tutorial: KIND ARGS -->` comment is one step, in document order.
 *
 * - `install`: the project setup (the test installs the packed tarball instead);
 * - `background NAME`: a long-running command (the mock model, the dashboard);
 * - `env`: `export NAME=value` lines;
 * - `file PATH`: the block is a file's content;
 * - `run`: commands, one per line, each expected to exit 0;
 * - `interrupt`: a command to stop with Ctrl-C (SIGINT to its process group) mid-run.
 */
import * as fs from "node:fs"

export interface Step {
  readonly kind: "install" | "background" | "env" | "file" | "run" | "interrupt"
  readonly arg: string
  readonly body: string
  readonly line: number
}

export const readTutorial = (file: string): ReadonlyArray<Step> => {
  const lines = fs.readFileSync(file, "utf8").split("\n")
  const steps: Array<Step> = []
  for (let i = 0; i < lines.length; i++) {
    const m = /^<!-- tutorial: (\w+)\s*(.*?)\s*-->$/.exec(lines[i]!)
    if (m === null) continue
    const open = lines[i + 1] ?? ""
    if (!open.startsWith("```")) throw new Error(`docs/tutorial.md:${i + 1}: no code block after the annotation`)
    const end = lines.findIndex((l, j) => j > i + 1 && l.startsWith("```"))
    if (end < 0) throw new Error(`docs/tutorial.md:${i + 2}: unclosed code block`)
    steps.push({
      kind: m[1] as Step["kind"],
      arg: m[2]!,
      body: lines.slice(i + 2, end).join("\n") + "\n",
      line: i + 1
    })
    i = end
  }
  return steps
}
