/**
 * The mark of a statement to be sent as a named prepared statement by the Postgres clients
 * assay makes (`layers/internal/pg/prepared.ts`; any other client runs the text as is: the mark
 * is an SQL comment). Here, with no import, so that the services' SQL can mark its texts.
 *
 * @since 0.19.0
 */

/**
 * The mark: an SQL comment in front of the text.
 *
 * @since 0.19.0
 * @category constants
 */
export const PREPARED = "/*assay:prepared*/ "

/**
 * `text` marked as a prepared statement. Mark only texts drawn from a small fixed set (every
 * value in parameters) that return no row or only listed columns (never `SELECT *`, which a
 * column added by a migration would break: "cached plan must not change result type").
 *
 * @param text - the statement.
 * @returns the statement with {@link PREPARED} in front.
 *
 * @since 0.19.0
 * @category constructors
 */
export const prepared = (text: string): string => PREPARED + text
