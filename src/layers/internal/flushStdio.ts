/**
 * Waiting for standard output and standard error to drain before the process exits.
 *
 * `process.exit` ends the process at once; on Linux a write to a pipe whose buffer is full is
 * queued in user space, and whatever is queued then is lost. Piped into a slow reader
 * (`assay study report --format json | jq`, `| less`), a command's output was cut at the pipe
 * buffer's size (64–128 KiB). Node documents the hazard under `process.exit()`.
 *
 * @internal
 */

/**
 * Calls `then` once everything already written to `process.stdout` and `process.stderr` has
 * been handed to the operating system (at once when nothing is queued). A stream whose reader
 * went away (EPIPE) counts as drained.
 *
 * @internal
 */
export const afterStdioDrained = (then: () => void): void => {
  const streams = [process.stdout, process.stderr].filter((s) => s.writableLength > 0 && !s.destroyed)
  if (streams.length === 0) return then()
  let pending = streams.length
  let called = false
  const done = () => {
    pending -= 1
    if (pending === 0 && !called) {
      called = true
      then()
    }
  }
  for (const s of streams) {
    // an empty write's callback runs after every earlier write of the stream is flushed
    s.write("", () => done())
  }
}
