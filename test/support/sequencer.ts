/**
 * The order in which vitest hands test files to its workers: the files known to take longest
 * first, then vitest's own order (its results cache: failed first, then slowest; without a
 * cache, as in a fresh clone, largest file first). With several workers, a long file started
 * last would leave the others idle at the end of the run; started first, it overlaps with the
 * short ones. Only the order changes: every file still runs, once.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The slowest files, slowest first. Sources (2026-12-05, ci30): a whole-suite run on main 59cb697
 * (2 workers, at load 10-18: other sessions' benchmarks shared the 2 cores, so every figure is
 * 3-5× a quiet run's; the order is what counts; stopped after 60 files), file durations in
 * seconds: study-run 562, pack 443, suite-fixes 433, report-export-merge 397,
 * AcquireAlgorithm.adaptive 338, run 333, Runner.kill 266 (about half since its children run as
 * bundles), cluster-ops 260, pricing 253, suite-run 228, spam-eval-cli 215, browser/dashboard
 * 207, cache 184, SuiteStore 175, Runner.kill.control 167 (about 70 since), secrets 152,
 * suite-store-guard 134, PgPools 101, study-checks 92, stop 90, StudyCompare 85, MockLlm.models
 * 71, browser/study 64, pg-restart 63, SqliteStore 58, StudyControl 37, Statistics 37, Chat 29,
 * Runner.throttle 24; files that run had not reached, from the ci20 and fix13k measurements of
 * 2026-12-05: study-report 145-186, cluster/cli 125, PgStore 102 (groupCommit, 3 s, left the
 * list). A file missing from this list only runs later; a stale entry is ignored.
 * (`test/chaos/ci.test.ts` runs after all of these, alone: the `chaos` group of
 * `vitest.config.ts`.)
 */
export const slowFirst: ReadonlyArray<string> = [
  "test/cli/study-run.test.ts",
  "test/package/pack.test.ts",
  "test/cli/suite-fixes.test.ts",
  "test/cli/report-export-merge.test.ts",
  "test/services/AcquireAlgorithm.adaptive.test.ts",
  "test/cli/run.test.ts",
  "test/cli/cluster-ops.test.ts",
  "test/cli/pricing.test.ts",
  "test/cli/suite-run.test.ts",
  "test/e2e/spam-eval-cli.test.ts",
  "test/browser/dashboard.test.ts",
  "test/cli/cache.test.ts",
  "test/layers/SuiteStore.test.ts",
  "test/cli/study-report.test.ts",
  "test/cases/secrets.test.ts",
  "test/services/Runner.kill.test.ts",
  "test/cli/suite-store-guard.test.ts",
  "test/cluster/cli.test.ts",
  "test/layers/PgStore.test.ts",
  "test/services/PgPools.test.ts",
  "test/cli/study-checks.test.ts",
  "test/cli/stop.test.ts",
  "test/services/StudyCompare.test.ts",
  "test/services/Runner.kill.control.test.ts",
  "test/services/MockLlm.models.test.ts",
  "test/browser/study.test.ts",
  "test/cli/pg-restart.test.ts",
  "test/layers/SqliteStore.test.ts",
  "test/services/StudyControl.test.ts",
  "test/domain/Statistics.test.ts",
  "test/tasks/Chat.test.ts",
  "test/services/Runner.throttle.test.ts",
  "test/cluster/runners.test.ts",
  "test/layers/MemoryStore.test.ts"
]

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const sorted = await super.sort(files)
    const rank = (spec: TestSpecification): number => {
      const relative = spec.moduleId.startsWith(spec.project.config.root)
        ? spec.moduleId.slice(spec.project.config.root.length).replace(/^\/+/, "")
        : spec.moduleId
      const i = slowFirst.indexOf(relative)
      return i === -1 ? slowFirst.length : i
    }
    // Array.prototype.sort is stable: files off the list keep vitest's order
    return sorted.sort((a, b) => rank(a) - rank(b))
  }
}
