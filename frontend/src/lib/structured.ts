/** Text a user pastes (a grader spec, params, an item) as a value: JSON, or else YAML (a superset of JSON). The YAML
 * parser is loaded on first use, so pages that never parse YAML do not carry it. */

export class ParseError extends Error {}

/** The value `text` holds; ParseError naming the line for text that is neither JSON nor YAML. Empty text: undefined. */
export async function parseJsonOrYaml(text: string): Promise<unknown> {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // not JSON: try YAML below (its messages name the line and column)
  }
  const { parse } = await import("yaml");
  try {
    return parse(text) as unknown;
  } catch (caught) {
    const message = caught instanceof Error ? caught.message.split("\n")[0] : String(caught);
    throw new ParseError(`neither JSON nor YAML: ${message}`);
  }
}

/** Like `parseJsonOrYaml` for a value that must be an object ({} for empty text); `what` names it in the error. */
export async function parseObject(text: string, what: string): Promise<Record<string, unknown>> {
  const value = await parseJsonOrYaml(text);
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new ParseError(`${what} must be an object (key: value), got ${Array.isArray(value) ? "a list" : typeof value}`);
  }
  return value as Record<string, unknown>;
}
