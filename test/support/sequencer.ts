/**
 * The order in which vitest hands test files to its workers: the files known to take longest
 * first, then vitest's own order (its results cache: failed first, then slowest; without a
 * cache, as in a fresh clone, largest file first). With several workers, a long file started
 * last would leave the others idle at the end of the run; started first, it overlaps with the
 * short ones. Only the order changes: every file still runs, once.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The slowest files, slowest first. Source (2026-12-06, lead39): the file durations of a
 * clean-clone `bash .ci/run` of main f0331297 on a quiet machine (15:37–16:03 UTC, 2 workers,
 * nothing else running; its vitest results cache), in seconds, every file of 13 s or more:
 * pack 62, study-run 84 (60 since ci39), suite-fixes 53, run 48, cluster/runner-db-lost 43,
 * spam-prompts 69 (~40 since ci39), cluster-study 39, spam-eval-cli 33, study-report 32, suite-run
 * 31, AcquireAlgorithm.adaptive 31, report-export-merge 29, cluster-ops 27, cluster/runners 27,
 * cluster-cli-fixes 25, StudyControl 25, PgPools 24, cluster-suite 23, secrets 22,
 * ClusterEngine.controlPg 21, Runner.kill 20, ClusterEngine.windowClaims 20, study-template 20,
 * cluster-study-cancel 19, study-checks 18, stop 18, pricing 18, cluster/placement37 18,
 * cluster-suite-refused 17, study-confirm 16, StudyCompare 16, browser/dashboard 20 (~15 since
 * ci39), PgStore 15, Pool.property 15, cli-fixes 14, suite-views 14, cache 14, SuiteStore 14
 * (Chat 22, ~11 since ci39, has left the list). A file missing from this list only runs later;
 * a stale entry is ignored. (`test/chaos/ci.test.ts` runs after all of these, alone: the
 * `chaos` group of `vitest.config.ts`.)
 */
export const slowFirst: ReadonlyArray<string> = [
  "test/package/pack.test.ts",
  "test/cli/study-run.test.ts",
  "test/cli/suite-fixes.test.ts",
  "test/cli/run.test.ts",
  "test/cluster/runner-db-lost.test.ts",
  "test/examples/spam-prompts.test.ts",
  "test/cli/cluster-study.test.ts",
  "test/e2e/spam-eval-cli.test.ts",
  "test/cli/study-report.test.ts",
  "test/cli/suite-run.test.ts",
  "test/services/AcquireAlgorithm.adaptive.test.ts",
  "test/cli/report-export-merge.test.ts",
  "test/cli/cluster-ops.test.ts",
  "test/cluster/runners.test.ts",
  "test/cli/cluster-cli-fixes.test.ts",
  "test/services/StudyControl.test.ts",
  "test/services/PgPools.test.ts",
  "test/cli/cluster-suite.test.ts",
  "test/cases/secrets.test.ts",
  "test/services/ClusterEngine.controlPg.test.ts",
  "test/services/Runner.kill.test.ts",
  "test/services/ClusterEngine.windowClaims.test.ts",
  "test/cli/study-template.test.ts",
  "test/cli/cluster-study-cancel.test.ts",
  "test/cli/study-checks.test.ts",
  "test/cli/stop.test.ts",
  "test/cli/pricing.test.ts",
  "test/cluster/placement37.test.ts",
  "test/cli/cluster-suite-refused.test.ts",
  "test/cli/study-confirm.test.ts",
  "test/services/StudyCompare.test.ts",
  "test/browser/dashboard.test.ts",
  "test/layers/PgStore.test.ts",
  "test/services/Pool.property.test.ts",
  "test/cli/cli-fixes.test.ts",
  "test/cli/suite-views.test.ts",
  "test/cli/cache.test.ts",
  "test/layers/SuiteStore.test.ts",
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
