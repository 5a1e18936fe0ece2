/**
 * The order in which vitest hands test files to its workers: the files known to take longest
 * first, then vitest's own order (its results cache: failed first, then slowest; without a
 * cache, as in a fresh clone, largest file first). With several workers, a long file started
 * last would leave the others idle at the end of the run; started first, it overlaps with the
 * short ones. Only the order changes: every file still runs, once.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The slowest files of a full run (`bash .ci/run`, 2026-12-01, one worker on 2 cores: 1,121 s of
 * tests in all), slowest first, with their test time then. A file missing from this list only
 * runs later; a stale entry is ignored. (`test/chaos/ci.test.ts`, 111 s then, runs after all of
 * these, alone: the `chaos` group of `vitest.config.ts`.)
 */
export const slowFirst: ReadonlyArray<string> = [
  "test/cli/study-run.test.ts", // 62 s
  "test/package/pack.test.ts", // 47 s
  "test/e2e/spam-eval-cli.test.ts", // 34 s
  "test/tasks/Chat.test.ts", // 33 s
  "test/cli/run.test.ts", // 32 s
  "test/cli/pg-restart.test.ts", // 30 s
  "test/cli/cluster-ops.test.ts", // 25 s
  "test/cli/suite-fixes.test.ts", // 24 s
  "test/services/Runner.kill.test.ts", // 23 s
  "test/cluster/runners.test.ts", // 23 s
  "test/cases/secrets.test.ts", // 23 s
  "test/cli/suite-run.test.ts", // 22 s
  "test/cli/report-export-merge.test.ts", // 19 s
  "test/cli/stop.test.ts", // 18 s
  "test/services/StudyControl.test.ts" // 17 s
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
