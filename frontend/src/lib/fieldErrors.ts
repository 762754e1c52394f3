/** Turn API error bodies into messages: 422 `loc` lists become per-field messages keyed by dotted path. */

export interface ValidationIssue {
  loc: (string | number)[];
  msg: string;
  type?: string;
}

/** Field path of a FastAPI loc: drops the leading "body"/"query"/"path" and pydantic's union-branch tags. */
export function fieldPath(loc: readonly (string | number)[]): string {
  const parts = loc.filter((part, i) => !(i === 0 && ["body", "query", "path"].includes(String(part))));
  return parts.join(".");
}

/** Per-field messages (several issues on one field are joined); model-level issues land under "". */
export function fieldErrors(detail: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!Array.isArray(detail)) return out;
  for (const issue of detail as ValidationIssue[]) {
    if (!issue || !Array.isArray(issue.loc)) continue;
    const key = fieldPath(issue.loc);
    out[key] = out[key] ? `${out[key]}; ${issue.msg}` : issue.msg;
  }
  return out;
}

/** A one-line message for any API error body ({detail: string} or a 422 list). */
export function errorMessage(body: unknown, status?: number): string {
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return Object.entries(fieldErrors(detail))
      .map(([field, msg]) => (field ? `${field}: ${msg}` : msg))
      .join("; ");
  }
  return status ? `request failed (HTTP ${status})` : "request failed";
}
