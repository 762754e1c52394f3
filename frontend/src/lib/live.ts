/** Pure helpers for merging live (SSE) payloads into REST snapshots. */

/** Unwrap the shapes an SSE payload may take: a list, `{data: [...]}`, `{spans: [...]}` or one object. */
export function payloadItems<T>(payload: unknown, listKey: "data" | "spans" = "data"): T[] {
  if (Array.isArray(payload)) return payload as T[];
  if (payload && typeof payload === "object") {
    const list = (payload as Record<string, unknown>)[listKey];
    if (Array.isArray(list)) return list as T[];
    return [payload as T];
  }
  return [];
}

/** Append items, replacing those with an existing key, keeping order by key and at most `max` (the latest). */
export function mergeByKey<T>(current: readonly T[], incoming: readonly T[], key: (item: T) => string | number, max: number): T[] {
  const byKey = new Map<string | number, T>();
  for (const item of current) byKey.set(key(item), item);
  for (const item of incoming) byKey.set(key(item), item);
  const merged = [...byKey.values()];
  return merged.slice(Math.max(0, merged.length - max));
}
