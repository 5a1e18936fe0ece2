/**
 * The order in which vitest hands test files to its workers: the files known to take longest
 * first, then vitest's own order (its results cache: failed first, then slowest; without a
 * cache, as in a fresh clone, largest file first). With several workers, a long file started
 * last would leave the others idle at the end of the run; started first, it overlaps with the
 * short ones. Only the order changes: every file still runs, once.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The slowest files, slowest first. Source (2026-12-05, ci32): the file durations of a clean-clone
 * `bash .ci/run` of main b848b47d on a quiet machine (17:58-18:30 UTC, 2 workers, nothing else
 * running; /tmp/ci-31.log), in seconds, every file of 18 s or more: study-run 139, pack 94,
 * report-export-merge 77, suite-fixes 77, spam-prompts 71, run 69, cluster-study 66,
 * cluster-cli-fixes 63, cluster-ops 57, suite-run 54, spam-eval-cli 54, cluster/cli 54,
 * study-report 51, cluster-suite 44, pg-restart 38, PgStore 36, AcquireAlgorithm.adaptive 33,
 * suite-views 33, pricing 33, study-checks 31, Runner.kill 31, PgPools 31, study-template 30,
 * study-confirm 29, secrets 28, stop 28, browser/dashboard 27, StudyControl 26, cli-fixes 26,
 * ClusterEngine.windowClaims 25, plugin-stores 25, study-plan 25, cache 24, suite-store-guard 23,
 * cache-flags 23, Chat 22, SuiteStore 22, ClusterEngine.controlPg 22, codeblocks 21, pg-store 21,
 * help 20, cluster-control 20, Runner.kill.control 20, fanout-config 18. ClusterEngine.controlPg is
 * ranked at about 22 s (51 s in that run; its two runner-stop tests waited 15 s each for
 * @effect/cluster's entity termination, 1 s since ci32) and ClusterEngine.replay (19 s, the same
 * wait) has left the list. A file missing from this list only runs later; a stale entry is ignored.
 * (`test/chaos/ci.test.ts` runs after all of these, alone: the `chaos` group of
 * `vitest.config.ts`.)
 */
export const slowFirst: ReadonlyArray<string> = [
  "test/cli/study-run.test.ts",
  "test/package/pack.test.ts",
  "test/cli/report-export-merge.test.ts",
  "test/cli/suite-fixes.test.ts",
  "test/examples/spam-prompts.test.ts",
  "test/cli/run.test.ts",
  "test/cli/cluster-study.test.ts",
  "test/cli/cluster-cli-fixes.test.ts",
  "test/cli/cluster-ops.test.ts",
  "test/cli/suite-run.test.ts",
  "test/e2e/spam-eval-cli.test.ts",
  "test/cluster/cli.test.ts",
  "test/cli/study-report.test.ts",
  "test/cli/cluster-suite.test.ts",
  "test/cli/pg-restart.test.ts",
  "test/layers/PgStore.test.ts",
  "test/services/AcquireAlgorithm.adaptive.test.ts",
  "test/cli/suite-views.test.ts",
  "test/cli/pricing.test.ts",
  "test/cli/study-checks.test.ts",
  "test/services/Runner.kill.test.ts",
  "test/services/PgPools.test.ts",
  "test/cli/study-template.test.ts",
  "test/cli/study-confirm.test.ts",
  "test/cases/secrets.test.ts",
  "test/cli/stop.test.ts",
  "test/browser/dashboard.test.ts",
  "test/services/StudyControl.test.ts",
  "test/cli/cli-fixes.test.ts",
  "test/services/ClusterEngine.windowClaims.test.ts",
  "test/cli/plugin-stores.test.ts",
  "test/cli/study-plan.test.ts",
  "test/cli/cache.test.ts",
  "test/cli/suite-store-guard.test.ts",
  "test/cli/cache-flags.test.ts",
  "test/tasks/Chat.test.ts",
  "test/layers/SuiteStore.test.ts",
  "test/services/ClusterEngine.controlPg.test.ts",
  "test/docs/codeblocks.test.ts",
  "test/cli/pg-store.test.ts",
  "test/cli/help.test.ts",
  "test/cli/cluster-control.test.ts",
  "test/services/Runner.kill.control.test.ts",
  "test/cli/fanout-config.test.ts"
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
