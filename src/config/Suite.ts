/**
 * The suite file: several experiment files run as one suite under one runner, sharing the
 * pools they are bound to.
 *
 * ```yaml
 * suite: { id: spam-styles }
 * run: { concurrency: 8 }                 # the suite's; members' run blocks are not applied
 * output: { root: ../../runs/spam-styles, layout: byExperiment }   # relative to this file
 * pools:
 *   llm: { resources: [{ id: mock, capacity: 4, options: { baseUrl: "${URL}" } }] }
 * experiments:
 *   terse:   { config: terse.yaml,   poolBindings: { llm: llm }, label: "terse prompt" }
 *   verbose: { config: verbose.yaml, poolBindings: { llm: llm }, limit: 100 }
 * ```
 *
 * One Schema ({@link SuiteFile}) for JSON, TOML, YAML and TypeScript (`export default
 * defineSuite({...})`) files, with the experiment loader's machinery: `${VAR}` expansion,
 * every problem at once with its field path, unknown keys with a did-you-mean. {@link load}
 * then checks what the Schema cannot:
 *
 * - `suite.id` and the member ids (`SuiteIdentity.checkId`), member ids unique ignoring case;
 * - `run.store` is refused (`output.root` is the suite's one storage entry); the rest of `run`
 *   is the suite's and is checked as an experiment's `run` is;
 * - `output.root` is resolved against the suite file (the `outputRoot` option, the CLI's
 *   `--output-root`, replaces it and is relative to the working directory);
 * - each member's `config` (relative to the suite file) is loaded with the experiment loader,
 *   so its own paths keep their standalone meaning (relative to the member's file), and its
 *   problems are listed under `experiments.ID.config`; its `run` block is validated, not
 *   applied (`ignoredRunFields`);
 * - `poolBindings`: each local name must be a pool the member declares, each target a
 *   top-level pool; an unbound local pool becomes the member's private `experiment:ID:NAME`;
 * - each member's definition digest ({@link definitionDigest}).
 *
 * @since 0.5.0
 */
export { defineSuite, MemberSection, OutputSection, SuiteFile, SuiteSection } from "./internal/suiteSchema.js"
export type { SuiteInput } from "./internal/suiteSchema.js"
export {
  DEFINITION_FORMAT,
  definitionDigest,
  definitionParts,
  isSuiteFile,
  load,
  POOL_RUN_FIELDS,
  previousDefinitionDigests
} from "./internal/suite.js"
export type { LeftOutMember, LoadedMember, LoadedSuite, MemberDefinition, SuiteLoadOptions } from "./internal/suite.js"
