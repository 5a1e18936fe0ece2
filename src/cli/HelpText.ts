/**
 * The examples `assay --help` and `assay COMMAND --help` show (the descriptions come from the
 * commands' own `@effect/cli` descriptors). Every command has at least one; the paths are the
 * repository's examples and the stores they write.
 *
 * @since 0.1.0
 */

/**
 * One example: a comment saying what it does, then the command line.
 *
 * @since 0.1.0
 * @category models
 */
export interface Example {
  readonly comment: string
  readonly command: string
}

const e = (comment: string, command: string): Example => ({ comment, command })

/**
 * The examples of each command, by command name.
 *
 * @since 0.1.0
 * @category examples
 */
export const commandExamples: Readonly<Record<string, ReadonlyArray<Example>>> = {
  "mock-llm": [
    e("Serve the mock on port 8080 (three preset endpoints under /e/NAME/v1)", "assay mock-llm --port 8080"),
    e("Slow every endpoint down and fail one request in ten", "assay mock-llm --latency-ms 200 --error-rate 0.1")
  ],
  validate: [
    e(
      "Check an experiment and print the effective one; an unset ${VAR} is an error",
      "assay validate -c examples/experiments/delay.yaml --strict-env"
    )
  ],
  run: [
    e("Run the example experiment into a store", "assay run -c examples/experiments/delay.yaml --store runs/demo.db"),
    e(
      "Eight attempts at once, only the first 100 rows, the report as JSON",
      "assay run -c examples/experiments/delay.yaml --concurrency 8 --limit 100 --summary json"
    ),
    e("Four shard processes, two at a time", "assay run -c qa.yaml --store runs/qa.db --shards 4 --jobs 2"),
    e("A suite (members side by side on shared pools), one member only", "assay run -c examples/suites/suite.yaml --experiment subject"),
    e(
      "Submit to cluster runners, at most 256 pipelines running at once",
      "assay run -c qa.yaml --engine cluster --database postgres://assay@db/qa --max-admitted 256"
    )
  ],
  runner: [
    e(
      "A cluster runner of qa.yaml, reached by the other runners on 10.0.0.1:34431",
      "assay runner -c qa.yaml --database postgres://assay@db/qa --listen 10.0.0.1:34431"
    )
  ],
  resume: [
    e(
      "Continue an interrupted run (same experiment, same store)",
      "assay resume -c examples/experiments/delay.yaml --store runs/demo.db"
    ),
    e("Resume one member of a suite; the others' databases stay untouched", "assay resume -c examples/suites/suite.yaml --experiment full")
  ],
  plugins: [
    e("List the built-in tasks and algorithms", "assay plugins"),
    e("Also load the plugins an experiment names, as JSON", "assay plugins -c vault.json --json")
  ],
  schema: [
    e("Write the JSON Schema of experiment files for an editor", "assay schema > experiment.schema.json"),
    e("The same for suite files", "assay schema --suite > suite.schema.json"),
    e("The same for study files", "assay schema --study > study.schema.json")
  ],
  report: [
    e("Report on the most recent run of a store", "assay report runs/demo.db"),
    e("Every run of two shard stores, merged, as JSON", "assay report runs/qa.shard0of2.db runs/qa.shard1of2.db --run-id all --json")
  ],
  export: [
    e("The results as CSV", "assay export runs/demo.db out.csv --rows results"),
    e(
      "For a spreadsheet: flat columns, ISO times, no formulas",
      "assay export runs/demo.db sheet.csv --rows results --flatten --time iso --csv-safe"
    ),
    e("Every attempt as JSON lines on standard output", "assay export runs/demo.db - --rows attempts --format jsonl")
  ],
  merge: [
    e("Merge four shard stores into one JSON lines file", "assay merge runs/qa.shard*of4.db -o merged.jsonl")
  ],
  serve: [
    e("Open the dashboard of a store on http://127.0.0.1:8787", "assay serve runs/demo.db"),
    e("Any free port, refreshed every 5 s", "assay serve runs/demo.db --port 0 --refresh-ms 5000")
  ],
  watch: [
    e("Follow the latest run of a store (waits for the store to appear)", "assay watch runs/demo.db"),
    e("Every run of the store, refreshed every half second", "assay watch runs/demo.db --run-id all --interval 0.5")
  ],
  migrate: [
    e("Create the assay tables of a PostgreSQL database before the first run", "assay migrate --database postgres://assay@db.internal:5432/assay")
  ],
  study: [
    e("What a study would run and the most it may cost, before anything runs", "assay study plan study.yaml"),
    e("Compare the variants once the study ran", "assay study report study.yaml")
  ],
  "study report": [
    e("The comparison: Design, Run, Compare, Evidence, Conclusion", "assay study report study.yaml"),
    e("As Markdown, with another bootstrap seed", "assay study report study.yaml --format markdown --seed 7"),
    e("The StudyComparison as JSON", "assay study report study.yaml --format json")
  ],
  "study evidence": [
    e("The trials, pipelines and worst cases behind v02's accuracy", "assay study evidence study.yaml accuracy v02 --worst 10")
  ],
  "study plan": [
    e("Print the plan of a study (exit 2 when a cap is exceeded)", "assay study plan study.yaml"),
    e("The plan and the variants as JSON", "assay study plan study.yaml --json")
  ]
}

/**
 * The examples of a command (none for an unknown name).
 *
 * @since 0.1.0
 * @category examples
 */
export const examplesOf = (name: string): ReadonlyArray<Example> => commandExamples[name] ?? []

/**
 * The examples of `assay --help`: a first session.
 *
 * @since 0.1.0
 * @category examples
 */
export const rootExamples: ReadonlyArray<Example> = [
  e("Check an experiment, run it, then see the results", "assay validate -c examples/experiments/delay.yaml"),
  e("", "assay run -c examples/experiments/delay.yaml --store runs/demo.db"),
  e("", "assay report runs/demo.db")
]
