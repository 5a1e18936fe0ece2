/**
 * `assay study report` benchmark (run: `npm run build && npx tsx bench/study-report.ts`; prints
 * JSON lines; issue 16's target: the report of a study of 200 variants × 5 repeats × 1,000
 * cases (1,000,000 pipelines) takes ≤ 12× the time of the same study with 20 variants
 * (100,000 pipelines), with a peak RSS ≤ 1.5×, its 10,000-resample bootstraps included).
 *
 * **The fixtures are real studies.** For each size the bench writes a study directory (a study
 * file, its experiment file and a one-task module) and runs it with the built CLI
 * (`bin/assay study run`): the protocol is frozen, the trials run under the study's control
 * and are settled, exactly as a user's study. The study: a variable `noise` with V values
 * (0, 0.001, …; the baseline is 0), 5 repeats, a source of C numbers; the task answers whether
 * each number is a multiple of 3 and is wrong with probability `noise` (drawn from the
 * pipeline's seed), reporting `{ n, correct, margin }`. Declared metrics: `accuracy` (mean of
 * `output.correct`: binary, so McNemar is computed too) and `margin` (mean of `output.margin`,
 * continuous); objectives `accuracy ↑` and `latencyP95Ms ↓`; `analysis.resamples` 10,000.
 * Built roots are kept under `$TMPDIR/assay-bench-study-report/` keyed by (V, repeats, C, the
 * fixture's version), so a rerun skips the build (the `build` line says `cached: true`);
 * `BENCH_REBUILD=1` builds again. The 1M-pipeline study takes tens of minutes to build. A
 * cached study's `tasks.mjs` is rewritten to import this checkout's `dist/` (the checkout that
 * built it may be gone; the task is the same).
 *
 * **The timing.** `bin/assay study report FILE --format json` spawned (after `npm run build`),
 * BENCH_ROUNDS rounds (default 2) alternating the small and the large study; per run the wall
 * time, the child's CPU time (user + system) and peak RSS from `/usr/bin/time -v`
 * (`process.resourceUsage` does not see a child's), and the 1-minute load average before it.
 * Lines: `study_report.build` (per fixture), `study_report.run` (per run), then
 * `study_report.ratio`: best wall and CPU of the large study over the small one's (target ≤ 12),
 * and peak RSS ratio (target ≤ 1.5).
 *
 * **Where the time goes** (`BENCH_PROFILE=1`): each report runs under `node --cpu-prof` and a
 * `study_report.profile` line follows its `run` line: the sampled ms per phase of the report
 * (`bench/lib/cpuprofile.ts`: the bootstraps, the case matrices, the Pareto fronts, rendering,
 * the reads, `gc`, and `other`, mostly the store's queries and start-up) and the functions
 * with the most self time. Samples are taken on wall time, so on a loaded machine read them as
 * shares (scale by the run's `cpu_ms`); a profiled run's CPU time is a little higher than a
 * plain one's, and its `run` line says `profiled: true`. The profiles are kept in the
 * fixture's `profile-<round>/`.
 *
 * Environment: BENCH_VARIANTS (large study's variants, 200), BENCH_SMALL_VARIANTS (20),
 * BENCH_CASES (1000), BENCH_REPEATS (5), BENCH_ROUNDS (2), BENCH_REBUILD=1, BENCH_ONLY=small|large,
 * BENCH_PROFILE=1, BENCH_BIN (the `bin/assay` to time, default this checkout's; before/after
 * comparisons run the bench twice, alternating, with the other build's `bin/assay`).
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import { summarize } from "./lib/cpuprofile.js"

const here = nodePath.dirname(fileURLToPath(import.meta.url))
const repo = nodePath.resolve(here, "..")
/** The CLI timed (BENCH_BIN: another checkout's bin/assay, e.g. a build of the base commit); the fixtures are always built with this checkout's. */
const buildBin = nodePath.join(repo, "bin/assay")
const bin = process.env.BENCH_BIN === undefined ? buildBin : nodePath.resolve(process.env.BENCH_BIN)
const LARGE = Number(process.env.BENCH_VARIANTS ?? 200)
const SMALL = Number(process.env.BENCH_SMALL_VARIANTS ?? 20)
const CASES = Number(process.env.BENCH_CASES ?? 1000)
const REPEATS = Number(process.env.BENCH_REPEATS ?? 5)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2)
const PROFILE = process.env.BENCH_PROFILE === "1"
/** Bumped when the fixture changes: older cached roots are then not reused. */
const FIXTURE_VERSION = 2
/**
 * The variants' noise levels spread evenly over [0, NOISE_SPAN) whatever their number, so the
 * small study is a sample of the same kind of variants as the large one (a noisier variant has
 * more cases whose repeats differ, which the two-stage bootstrap resamples: per-variant cost
 * must not differ between the two studies).
 */
const NOISE_SPAN = 0.2
const cacheDir = nodePath.join(os.tmpdir(), "assay-bench-study-report")
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const load = () => Number(os.loadavg()[0]!.toFixed(2))

const studyFile = (variants: number) => `study:
  id: report-bench
  question: "How much answer noise does accuracy take? (report benchmark)"
  type: compare
protocol: { experiment: ./experiment.yaml }
output: { root: ./root }
run: { concurrency: 64, trialConcurrency: 4 }
variables:
  - { name: noise, type: enum, values: [${Array.from({ length: variants }, (_, i) => Number((i * NOISE_SPAN / variants).toFixed(6))).join(", ")}] }
baseline: { noise: 0 }
repeats: ${REPEATS}
limits: { maxTrials: ${variants * REPEATS} }
stop:
  - { when: allTrialsTerminal }
metrics:
  - { name: accuracy, reducer: mean, from: { output: correct }, unit: ratio, direction: maximize }
  - { name: margin, reducer: mean, from: { output: margin }, direction: maximize }
objectives:
  - { metric: accuracy, direction: maximize }
  - { metric: latencyP95Ms, direction: minimize }
analysis: { resamples: 10000, seed: 7 }
`

const experimentFile = `pipeline:
  name: noisy-multiples
  tasks:
    - use: ./tasks.mjs#answer
      args: [{ $var: noise }]
source:
  range: { n: ${CASES} }
`

const tasksFile = `// The one task of the report benchmark's study (bench/study-report.ts).
import { Task } from ${JSON.stringify(nodePath.join(repo, "dist/index.js"))}
const draw = (seed, salt) => {
  let t = (seed ^ Math.imul(salt + 1, 0x9e3779b1)) + 0x6d2b79f5
  t = Math.imul(t ^ (t >>> 15), 1 | t)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
export const answer = (noise) =>
  Task.sync("answer", { parameters: { noise } }, (n, ctx) => {
    // case difficulty from the number itself (the same in every trial), noise from the seed
    const hard = ((n * 2654435761) >>> 0) / 4294967296
    const wrong = draw(ctx.seed, n) < noise * (0.5 + hard)
    return { n, correct: !wrong, margin: Math.round((1 - hard) * 1000 - (wrong ? 300 : 0)) / 1000 }
  })
`

interface Fixture {
  readonly variants: number
  readonly dir: string
  readonly file: string
}

/** A built study (cached), or builds it with `bin/assay study run`. */
const fixture = (variants: number): Fixture => {
  const dir = nodePath.join(cacheDir, `v${variants}-r${REPEATS}-c${CASES}-f${FIXTURE_VERSION}`)
  const file = nodePath.join(dir, "study.yaml")
  const done = nodePath.join(dir, "BUILT")
  const pipelines = variants * REPEATS * CASES
  if (process.env.BENCH_REBUILD !== "1" && fs.existsSync(done)) {
    // the task module imports the checkout that built it; when that checkout is gone (a
    // removed worktree), `study report` cannot load the study: point it at this one (same
    // task, so the stored study is unchanged)
    const tasks = nodePath.join(dir, "tasks.mjs")
    if (fs.readFileSync(tasks, "utf8") !== tasksFile) fs.writeFileSync(tasks, tasksFile)
    emit({ bench: "study_report.build", variants, repeats: REPEATS, cases: CASES, pipelines, cached: true, dir, built: fs.readFileSync(done, "utf8").trim() })
    return { variants, dir, file }
  }
  fs.rmSync(dir, { recursive: true, force: true })
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(file, studyFile(variants))
  fs.writeFileSync(nodePath.join(dir, "experiment.yaml"), experimentFile)
  fs.writeFileSync(nodePath.join(dir, "tasks.mjs"), tasksFile)
  const l = load()
  const t0 = performance.now()
  const r = spawnSync(buildBin, ["study", "run", file, "-q"], { cwd: dir, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 })
  const ms = Math.round(performance.now() - t0)
  if (r.status !== 0) throw new Error(`study run (${variants} variants) exited ${r.status}: ${r.stderr.slice(-4000)}`)
  const info = `built ${new Date().toISOString()} in ${ms} ms at load ${l}`
  fs.writeFileSync(done, info)
  emit({ bench: "study_report.build", variants, repeats: REPEATS, cases: CASES, pipelines, cached: false, dir, ms, load: l })
  return { variants, dir, file }
}

interface Timing {
  readonly ms: number
  readonly cpuMs: number
  readonly rssMb: number
  readonly load: number
}

/** One `assay study report --format json` under `/usr/bin/time -v`. */
const report = (f: Fixture, round: number): Timing => {
  const l = load()
  const t0 = performance.now()
  // stdout to a file: through a pipe, assay's output above 128 KiB is cut short at exit (see
  // BENCHMARKS.md: a CLI fault noticed here)
  const outFile = nodePath.join(f.dir, `report-${round}.json`)
  const fd = fs.openSync(outFile, "w")
  const profileDir = nodePath.join(f.dir, `profile-${round}`)
  if (PROFILE) fs.rmSync(profileDir, { recursive: true, force: true })
  // `--cpu-prof` is refused in NODE_OPTIONS: node runs the CLI's entry point itself
  const argv = [...(PROFILE ? [process.execPath, "--cpu-prof", `--cpu-prof-dir=${profileDir}`] : []), bin, "study", "report", f.file, "--format", "json"]
  const r = spawnSync("/usr/bin/time", ["-v", ...argv], {
    cwd: f.dir,
    encoding: "utf8",
    stdio: ["ignore", fd, "pipe"],
    maxBuffer: 64 * 1024 * 1024
  })
  fs.closeSync(fd)
  const ms = performance.now() - t0
  if (r.status !== 0) throw new Error(`study report (${f.variants} variants) exited ${r.status}: ${r.stderr.slice(-4000)}`)
  const stdout = fs.readFileSync(outFile, "utf8")
  const field = (name: string) => Number(new RegExp(`${name}: ([0-9.]+)`).exec(r.stderr)?.[1] ?? NaN)
  const cpuMs = (field("User time \\(seconds\\)") + field("System time \\(seconds\\)")) * 1000
  const rssMb = field("Maximum resident set size \\(kbytes\\)") / 1024
  const c = JSON.parse(stdout) as { variants: Array<{ variantId: string; succeeded: number }>; resamples: number }
  const compared = c.variants.filter((v) => v.succeeded > 0).length
  const t = { ms, cpuMs, rssMb, load: l }
  emit({
    bench: "study_report.run",
    variants: f.variants,
    pipelines: f.variants * REPEATS * CASES,
    round,
    ms: Math.round(ms),
    cpu_ms: Math.round(cpuMs),
    peak_rss_mb: Math.round(rssMb),
    compared_variants: compared,
    resamples: c.resamples,
    json_bytes: stdout.length,
    load: l,
    ...(PROFILE ? { profiled: true } : {})
  })
  if (PROFILE) {
    // the main thread's profile (a worker thread of the module loader writes a second one)
    const main = fs.readdirSync(profileDir).filter((x) => x.endsWith(".cpuprofile")).sort().find((x) => x.includes(".0.")) ?? ""
    const p = summarize(nodePath.join(profileDir, main), undefined, 12)
    emit({ bench: "study_report.profile", variants: f.variants, round, cpu_ms: Math.round(cpuMs), sampled_ms: p.totalMs, phases_ms: p.phases, top: p.top, dir: profileDir })
  }
  return t
}

const main = () => {
  if (!fs.existsSync(nodePath.join(repo, "dist/index.js"))) throw new Error("dist/ is missing: run npm run build first")
  emit({ bench: "study_report.commit", head: execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repo, encoding: "utf8" }).trim(), bin })
  const only = process.env.BENCH_ONLY
  const small = only === "large" ? undefined : fixture(SMALL)
  const large = only === "small" ? undefined : fixture(LARGE)
  const s: Array<Timing> = []
  const g: Array<Timing> = []
  for (let round = 0; round < ROUNDS; round++) {
    // alternate which study goes first
    const order = round % 2 === 0 ? [small, large] : [large, small]
    for (const f of order) {
      if (f === undefined) continue
      ;(f === small ? s : g).push(report(f, round))
    }
  }
  if (s.length === 0 || g.length === 0) return
  const best = (xs: ReadonlyArray<Timing>) => ({
    ms: Math.min(...xs.map((x) => x.ms)),
    cpuMs: Math.min(...xs.map((x) => x.cpuMs)),
    rssMb: Math.max(...xs.map((x) => x.rssMb))
  })
  const a = best(s)
  const b = best(g)
  emit({
    bench: "study_report.ratio",
    small: { variants: SMALL, pipelines: SMALL * REPEATS * CASES, ms: Math.round(a.ms), cpu_ms: Math.round(a.cpuMs), peak_rss_mb: Math.round(a.rssMb) },
    large: { variants: LARGE, pipelines: LARGE * REPEATS * CASES, ms: Math.round(b.ms), cpu_ms: Math.round(b.cpuMs), peak_rss_mb: Math.round(b.rssMb) },
    wall_ratio: Number((b.ms / a.ms).toFixed(2)),
    cpu_ratio: Number((b.cpuMs / a.cpuMs).toFixed(2)),
    rss_ratio: Number((b.rssMb / a.rssMb).toFixed(2)),
    targets: { time: 12, rss: 1.5 },
    loads: [...s, ...g].map((x) => x.load)
  })
}

main()
