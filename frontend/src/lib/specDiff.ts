/** Side-by-side spec comparison: flatten nested specs to dotted paths and mark the paths whose values differ. */

export type Flat = Record<string, string>;

/** `{a: {b: 1}, c: [1, 2]}` -> `{"a.b": "1", "c": "[1,2]"}` (arrays and scalars are leaves, JSON-encoded). A
 * multi-line string (python reward code) stays as its text, so the diff shows it as a block, not one escaped line;
 * no JSON encoding holds a raw line break, so it cannot be mistaken for another value. */
export function flatten(value: unknown, prefix = "", out: Flat = {}): Flat {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0 && prefix) out[prefix] = "{}";
    for (const [key, child] of entries) flatten(child, prefix ? `${prefix}.${key}` : key, out);
    return out;
  }
  if (prefix) out[prefix] = value === undefined ? "" : typeof value === "string" && value.includes("\n") ? value : JSON.stringify(value);
  return out;
}

export interface DiffRow {
  path: string;
  values: (string | undefined)[]; // one per spec; undefined when that spec lacks the path
  differs: boolean;
}

/** Every path of any spec, sorted; `differs` when not all specs hold the same value. `ignore` skips paths (e.g. name). */
export function specDiff(specs: readonly unknown[], ignore: readonly string[] = []): DiffRow[] {
  const flats = specs.map((spec) => flatten(spec));
  const paths = [...new Set(flats.flatMap((f) => Object.keys(f)))].filter((p) => !ignore.includes(p)).sort();
  return paths.map((path) => {
    const values = flats.map((f) => f[path]);
    return { path, values, differs: values.some((v) => v !== values[0]) };
  });
}
