/**
 * The order in which vitest hands test files to its workers: the files known to take longest
 * first, then vitest's own order (its results cache: failed first, then slowest; without a
 * cache, as in a fresh clone, largest file first). With several workers, a long file started
 * last would leave the others idle at the end of the run; started first, it overlaps with the
 * short ones. Only the order changes: every file still runs, once.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The slowest files, slowest first. Sources (2026-12-02): the last fresh-clone `bash .ci/run`
 * (main 630c8dc, no helper running: vitest 1,028 s on 2 workers; slowest under load in the
 * run before it: study-run 184 s, pack 184 s, suite-fixes 105 s) and the durations recorded
 * in the results cache by single-file runs at load 13-30 (study-checks, suite-run,
 * Runner.kill.control, AcquireAlgorithm.adaptive about 290-365 s each there, so also among the
 * longest). A file missing from this list only runs later; a stale entry is ignored.
 * (`test/chaos/ci.test.ts` runs after all of these, alone: the `chaos` group of
 * `vitest.config.ts`.)
 */
export const slowFirst: ReadonlyArray<string> = [
  "test/cli/study-run.test.ts",
  "test/package/pack.test.ts",
  "test/cli/study-checks.test.ts",
  "test/cli/suite-fixes.test.ts",
  "test/services/Runner.kill.control.test.ts",
  "test/cli/suite-run.test.ts",
  "test/services/AcquireAlgorithm.adaptive.test.ts",
  "test/services/internal/store/groupCommit.test.ts",
  "test/cli/suite-store-guard.test.ts",
  "test/layers/SuiteStore.test.ts",
  "test/domain/Statistics.test.ts",
  "test/layers/SqliteStore.test.ts",
  "test/services/Runner.throttle.test.ts",
  "test/services/Runner.kill.test.ts",
  "test/e2e/spam-eval-cli.test.ts",
  "test/cli/cache.test.ts",
  "test/services/PgPools.test.ts",
  "test/layers/MemoryStore.test.ts",
  "test/tasks/Chat.test.ts",
  "test/cli/run.test.ts",
  "test/cli/pg-restart.test.ts",
  "test/cli/cluster-ops.test.ts",
  "test/cli/report-export-merge.test.ts",
  "test/services/StudyControl.test.ts",
  "test/cluster/runners.test.ts",
  "test/cases/secrets.test.ts",
  "test/cli/stop.test.ts"
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
