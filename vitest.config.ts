import { defineConfig } from "vitest/config"

/**
 * Two groups, one command (`npm test` runs both; `npm run test:unit` only the first):
 * - `unit`: the domain, services, layers and tasks, in process (the fast inner loop);
 * - `integration`: everything that spawns `bin/assay`, tsx, npm or a browser (the CLI, the
 *   examples, the tutorial, the package, the user cases), after `test/support/buildDist.ts`
 *   has brought `dist/` (what `bin/assay` runs) up to date with `src/`.
 *
 * Test code imports `assay` through the `assay-source` export condition, so it runs the
 * current `src/` (no build needed), as `tsc` sees it (tsconfig.json `customConditions`).
 */
const conditions = ["assay-source", "module", "node", "development|production"]

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
  // issue 17's chaos scenarios C1, C2, C5, C6 (assay runner processes); all of them: npm run test:chaos
  "test/chaos/**/*.test.ts"
]

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    reporters: ["default", "./test/support/planReporter.ts"],
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/**/*.test.ts"],
          exclude: [...integration, "**/node_modules/**"],
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
      }
    ]
  }
})
