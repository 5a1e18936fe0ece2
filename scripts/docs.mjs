/**
 * `npm run docs`: the API reference and its checks.
 *
 * 1. Every `@example` in the JSDoc of `src/` is type-checked, as a user's module, against the
 *    built package (`import ... from "assay"` resolves to `dist/index.d.ts`), the way
 *    `@effect/docgen` checks Effect's own examples: a broken example fails (exit 1) with the
 *    source file and line of its docstring. Each example is a fenced `ts` block with its imports.
 * 2. TypeDoc writes the HTML reference of the package entry (`dist/index.d.ts`, which keeps the
 *    JSDoc) to `docs/api/`. Its errors fail the run; its warnings (a `{@link}` TypeDoc cannot
 *    resolve, often a name the package does not export) are printed and counted.
 *
 * Runs `npm run build` first when `dist/` is missing. `--no-html` skips step 2; `--src=DIR`
 * checks the examples of another folder (the test of this script uses it).
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const args = new Set(process.argv.slice(2))
const srcDir = path.resolve(process.argv.slice(2).find((a) => a.startsWith("--src="))?.slice(6) ?? path.join(root, "src"))
const started = performance.now()
const node = (script, argv) => {
  try {
    execFileSync(process.execPath, [path.join(root, script), ...argv], { cwd: root, stdio: "inherit" })
  } catch (error) {
    process.stderr.write(`docs: ${script} failed (exit ${error.status})\n`)
    process.exit(1)
  }
}

if (!fs.existsSync(path.join(root, "dist/index.d.ts"))) node("scripts/build.mjs", [])

// 1. examples
const sources = (dir) =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : [])

/** The `@example` blocks of a file: `{ line, code }` (line: 1-based, of the `@example` tag). */
const examplesOf = (file) => {
  const out = []
  const text = fs.readFileSync(file, "utf8")
  for (const comment of text.matchAll(/\/\*\*[\s\S]*?\*\//g)) {
    const lines = comment[0].split("\n").map((l) => l.replace(/^\s*\*?\s?/, ""))
    const firstLine = text.slice(0, comment.index).split("\n").length
    for (let i = 0; i < lines.length; i++) {
      if (!lines[i].startsWith("@example")) continue
      const body = []
      let j = i + 1
      for (; j < lines.length && !/^@\w/.test(lines[j]) && lines[j] !== "/"; j++) body.push(lines[j])
      const fenced = body.join("\n").match(/```(?:ts|typescript)\n([\s\S]*?)```/)
      if (fenced === null) {
        process.stderr.write(`docs: ${path.relative(root, file)}:${firstLine + i}: an @example must be a fenced \`\`\`ts block\n`)
        process.exit(1)
      }
      out.push({ line: firstLine + i, code: fenced[1] })
      i = j - 1
    }
  }
  return out
}

// inside the checkout, so that `import ... from "assay"` finds the package by its own name
const workDir = path.join(root, `.tmp/doc-examples-${process.pid}`)
fs.rmSync(workDir, { recursive: true, force: true })
fs.mkdirSync(workDir, { recursive: true })
const where = new Map()
let count = 0
for (const file of sources(srcDir)) {
  for (const example of examplesOf(file)) {
    const name = `${path.relative(srcDir, file).replace(/[/.]/g, "_")}_${example.line}.ts`
    fs.writeFileSync(path.join(workDir, name), `${example.code}\nexport {}\n`)
    where.set(name, `${path.relative(root, file)}:${example.line}`)
    count++
  }
}
fs.writeFileSync(path.join(workDir, "tsconfig.json"), JSON.stringify({
  compilerOptions: {
    strict: true, exactOptionalPropertyTypes: true, noEmit: true, skipLibCheck: true,
    module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", lib: ["ES2022"], types: ["node"],
    noUnusedLocals: false
  },
  include: ["*.ts"]
}, null, 2))
try {
  execFileSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", workDir], { cwd: root, encoding: "utf8" })
} catch (error) {
  const report = String(error.stdout ?? error).replace(/(?:\.tmp\/doc-examples-\d+\/)?([\w-]+\.ts)\((\d+),(\d+)\)/g, (all, name, line) =>
    where.has(name) ? `${where.get(name)} (@example line ${line})` : all)
  process.stderr.write(`docs: a JSDoc @example does not type-check:\n${report}`)
  fs.rmSync(workDir, { recursive: true, force: true })
  process.exit(1)
}
process.stdout.write(`docs: ${count} @example blocks type-check against the package\n`)
fs.rmSync(workDir, { recursive: true, force: true })

// 2. HTML reference
if (!args.has("--no-html")) {
  const tsconfig = path.join(root, `.tmp/typedoc-${process.pid}.tsconfig.json`)
  fs.writeFileSync(tsconfig, JSON.stringify({
    compilerOptions: { strict: true, skipLibCheck: true, module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", lib: ["ES2022"], types: ["node"] },
    files: ["../dist/index.d.ts"]
  }))
  node("node_modules/typedoc/bin/typedoc", [
    "--entryPoints", "dist/index.d.ts",
    "--tsconfig", tsconfig,
    "--out", "docs/api",
    "--name", "assay",
    "--readme", "none",
    "--excludePrivate",
    "--validation.notExported", "false",
    "--logLevel", "Warn"
  ])
  fs.rmSync(tsconfig, { force: true })
}
process.stdout.write(`docs: done in ${((performance.now() - started) / 1000).toFixed(1)} s${args.has("--no-html") ? "" : " (docs/api/index.html)"}\n`)
