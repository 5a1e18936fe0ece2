/**
 * Every TypeScript code block of README.md and docs/*.md compiles against the current sources
 * (issue 21): each block is written as its own module beside the tests and type-checked by one
 * `tsc` run with the project's settings. A block that needs names it does not define declares
 * them itself (`declare const program: ...`), so what a reader copies is what is checked.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

interface Block {
  readonly doc: string
  readonly line: number
  readonly code: string
}

/** The ```ts / ```typescript blocks of a markdown file, with the line each starts on. */
export const blocksOf = (doc: string, text: string): ReadonlyArray<Block> => {
  const out: Array<Block> = []
  const lines = text.split("\n")
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue
    const start = i + 1
    let j = start
    while (j < lines.length && !lines[j]!.startsWith("```")) j++
    out.push({ doc, line: start + 1, code: lines.slice(start, j).join("\n") })
    i = j
  }
  return out
}

// docs/tutorial.md is a project of several files (its blocks import each other): the package
// test (test/package/pack.test.ts) writes them into an installed project, runs and type-checks them.
const docs = [
  "README.md",
  ...fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md") && f !== "tutorial.md").map((f) => `docs/${f}`)
]

describe("TypeScript in the docs", () => {
  it("finds the blocks of a markdown file with their line numbers", () => {
    const found = blocksOf("x.md", "text\n```ts\nconst a = 1\n```\n```sh\nls\n```\n```typescript\nconst b = 2\n```\n")
    assert.deepStrictEqual(found.map((b) => [b.line, b.code]), [[3, "const a = 1"], [9, "const b = 2"]])
  })

  it("every ts block of README.md and docs/ type-checks", () => {
    const blocks = docs.flatMap((doc) => blocksOf(doc, fs.readFileSync(path.join(root, doc), "utf8")))
    assert.isAbove(blocks.length, 10)
    const dir = fs.mkdtempSync(path.join(root, "test/docs/.blocks-"))
    try {
      const files = blocks.map((b, i) => {
        const name = `${path.basename(b.doc, ".md")}-${b.line}-${i}.ts`
        // each block is its own module (top-level names do not collide across blocks)
        fs.writeFileSync(path.join(dir, name), `${b.code}\nexport {}\n`)
        return { name, block: b }
      })
      fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({
        extends: "../../../tsconfig.json",
        compilerOptions: { noEmit: true, noUnusedLocals: false, rootDir: "../../.." },
        include: ["*.ts"]
      }))
      const tsc = spawnSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", dir], {
        cwd: root,
        encoding: "utf8"
      })
      // name each error by its doc and the line in the doc
      const errors = (tsc.stdout + tsc.stderr).split("\n").filter((l) => l.includes("error TS")).map((l) => {
        const m = /([^/\\]+\.ts)\((\d+),\d+\): (.*)$/.exec(l)
        const f = m === null ? undefined : files.find((x) => x.name === m[1])
        return f === undefined ? l : `${f.block.doc}:${f.block.line + Number(m![2]) - 1}: ${m![3]}`
      })
      assert.deepStrictEqual(errors, [], errors.join("\n"))
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
