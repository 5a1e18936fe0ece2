/**
 * The study file: a question asked of one base experiment by running it once per variant
 * (one value of every variable) and repeat, each (variant, repeat) a trial run as one member
 * of a suite sharing the experiment's pools.
 *
 * ```yaml
 * study: { id: spam-prompts, question: "Which prompt classifies spam best per dollar?", type: compare }
 * protocol: { experiment: ./experiment.yaml }
 * output: { root: runs/spam-prompts }
 * variables:
 *   - { name: prompt, type: prompt, values: { terse: "Spam? {{text}}", detailed: "..." } }
 *   - { name: temperature, type: range, start: 0, end: 1, step: 0.5 }
 * baseline: { prompt: terse, temperature: 0 }
 * repeats: 3
 * ```
 *
 * One Schema ({@link StudyFile}) for JSON, TOML, YAML and TypeScript (`export default
 * defineStudy({...})`) files, with the experiment loader's machinery (`${VAR}` expansion, every
 * problem at once with its field path, did-you-mean). See `docs/studies.md`.
 *
 * @since 0.6.0
 */
export {
  defineStudy,
  EstimateSection,
  ProtocolSection,
  StudyFile,
  StudyOutputSection,
  StudyRunSection,
  StudySection
} from "./internal/studySchema.js"
export type { StudyInput } from "./internal/studySchema.js"
export { findRefs, VAR_KEY } from "./internal/refs.js"
export type { VariableRef } from "./internal/refs.js"
export { bind, CHAT_CODE_DIGEST, DEFAULT_TRIAL_CONCURRENCY, isStudyFile, load, planText } from "./internal/study.js"
export type { LoadedStudy, Plan, StudyLoadOptions, Trial } from "./internal/study.js"
