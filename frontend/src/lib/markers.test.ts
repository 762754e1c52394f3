import { describe, expect, it } from "vitest";
import { layoutMarkerLabels, scaleMarkers } from "./markers";

const iterations = [1, 2, 3].map((i) => ({ iteration: i, created_at: `2026-01-01T00:00:${String(i * 10).padStart(2, "0")}Z` }));

describe("scaleMarkers", () => {
  it("places target changes before the first iteration that ended after them, with their reason", () => {
    const markers = scaleMarkers(
      [
        { kind: "scale", message: "target 2 -> 3", data: { target_instances: 3 }, created_at: "2026-01-01T00:00:15Z" },
        { kind: "autoscale", message: "3 -> 4: trainer idle 40%", data: null, created_at: "2026-01-01T00:00:21Z" },
        { kind: "scale", message: "starting instance gen-3", data: { instance_id: "gen-3" }, created_at: "2026-01-01T00:00:16Z" },
        { kind: "autoscale", message: "too late", data: null, created_at: "2026-01-01T00:01:00Z" },
      ],
      iterations,
    );
    expect(markers.map((m) => [m.x, m.label, m.short])).toEqual([
      [1.5, "manual: target 2 -> 3", "manual 2→3"],
      [2.5, "auto: 3 -> 4: trainer idle 40%", "auto 3→4"],
    ]);
  });
});

describe("layoutMarkerLabels", () => {
  const measure = (text: string) => 6 * text.length; // 6 px per character
  const overlaps = (slots: ReturnType<typeof layoutMarkerLabels>) =>
    slots.some((a, i) => slots.some((b, j) => i < j && a.row === b.row && a.x + 3 + measure(a.text) + 6 > b.x + 3 && b.x + 3 + measure(b.text) + 6 > a.x + 3));

  it("never lets two labels overlap, however many scale actions there are", () => {
    // ten scale actions 20 px apart: one row would overlap (labels are ~60 px wide)
    const markers = Array.from({ length: 10 }, (_, i) => ({ px: 100 + 20 * i, short: `manual ${i}→${i + 1}`, label: `manual: ${i} -> ${i + 1}` }));
    const slots = layoutMarkerLabels(markers, measure);
    expect(overlaps(slots)).toBe(false);
    expect(new Set(slots.map((s) => s.row))).toEqual(new Set([0, 1, 2])); // staggered into the rows
    expect(slots.length).toBeLessThan(10); // what fits nowhere is left out (its line is still drawn)
  });

  it("merges markers at the same place into one label that names them all", () => {
    const slots = layoutMarkerLabels(
      [{ px: 50, short: "auto 2→3", label: "auto: 2 -> 3" }, { px: 52, short: "auto 3→4", label: "auto: 3 -> 4" }, { px: 300, short: "manual 4→2", label: "manual: 4 -> 2" }],
      measure,
    );
    expect(slots.map((s) => [s.x, s.row, s.text])).toEqual([[50, 0, "2 changes"], [300, 0, "manual 4→2"]]);
    expect(slots[0].title).toBe("auto: 2 -> 3\nauto: 3 -> 4");
  });

  it("keeps labels inside the plot", () => {
    expect(layoutMarkerLabels([{ px: 190, short: "manual 1→2", label: "x" }], measure, { rightPx: 200 })).toEqual([]);
  });
});
