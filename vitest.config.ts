import * as os from "node:os"
import { defineConfig } from "vitest/config"
import SlowFirstSequencer from "./test/support/sequencer.js"

/**
 * Three groups, one command (`npm test` runs all; `npm run test:unit` only the first):
 * - `unit`: the domain, services, layers and tasks, in process (the fast inner loop);
 * - `integration`: everything that spawns `bin/assay`, tsx, npm or a browser (the CLI, the
 *   examples, the tutorial, the package, the user cases), after `test/support/buildDist.ts`
 *   has brought `dist/` (what `bin/assay` runs) up to date with `src/`;
 * - `chaos`: issue 17's scenarios C1, C2, C5 (lock rows), C6 (`test/chaos/ci.test.ts`: three `assay runner`
 *   processes on one Postgres, timed fault windows), after the other two groups, alone, so
 *   that no other test file competes with its runners for the machine (as in `npm run
 *   test:chaos`, which runs one file at a time).
 *
 * Test files run in {@link workers} processes side by side, the slowest first
 * (`test/support/sequencer.ts`). Most of a file's time is spent waiting for the processes,
 * servers and real-clock windows it starts, so one worker per core (at least two) keeps the
 * machine busy without starving the timed tests' own processes.
 *
 * Test code imports `assay` through the `assay-source` export condition, so it runs the
 * current `src/` (no build needed), as `tsc` sees it (tsconfig.json `customConditions`).
 */
const conditions = ["assay-source", "module", "node", "development|production"]

/** Worker processes: `ASSAY_TEST_WORKERS`, else one per core (at least 2, at most 8). */
const workers = Number(process.env["ASSAY_TEST_WORKERS"]) || Math.min(8, Math.max(2, os.availableParallelism()))

const chaos = ["test/chaos/**/*.test.ts"]

const integration = [
  "test/cli/**/*.test.ts",
  "test/e2e/**/*.test.ts",
  "test/examples/**/*.test.ts",
  "test/browser/**/*.test.ts",
  "test/cases/**/*.test.ts",
  "test/package/**/*.test.ts",
  "test/docs/**/*.test.ts",
  "test/services/Runner.kill*.test.ts",
  "test/services/Suite.kill.test.ts",
  "test/layers/SqliteStore.locks.test.ts",
  // spawns `bin/assay` (report URL --experiment): dist/ built from the current sources first
  "test/layers/PgSuites.test.ts"
]

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    maxWorkers: workers,
    minWorkers: 1,
    sequence: { sequencer: SlowFirstSequencer },
    // before every file: @effect/vitest's `it` with its own methods again (a `layer(...)` block
    // of an earlier file in the same worker replaces them when files share a worker); chai's
    // deep equalities refusing Options (test/support/optionAssert.ts)
    setupFiles: ["./test/support/pristineIt.ts", "./test/support/optionAssert.ts"],
    reporters: ["default", "./test/support/planReporter.ts"],
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/**/*.test.ts"],
          // the files of a worker share one module graph (effect, src/ are loaded once per
          // worker, not once per file: test/services took 230 s of CPU instead of ~525 s); each
          // file still gets @effect/vitest's own `it` back (test/support/pristineIt.ts)
          isolate: false,
          exclude: [...integration, ...chaos, "**/node_modules/**"],
          globalSetup: ["./test/support/tempRoot.ts"]
        }
      },
      {
        extends: true,
        test: {
          name: "integration",
          include: integration,
          globalSetup: ["./test/support/tempRoot.ts", "./test/support/buildDist.ts"]
        }
      },
      {
        extends: true,
        test: {
          name: "chaos",
          // issue 17's chaos scenarios C1, C2, C5 (lock rows), C6; all of them: npm run test:chaos
          include: chaos,
          globalSetup: ["./test/support/tempRoot.ts", "./test/support/buildDist.ts"],
          sequence: { groupOrder: 1 }
        }
      }
    ]
  }
})
