import { describe, expect, it } from "vitest";
import { scaleMarkers } from "./markers";

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
    expect(markers.map((m) => [m.x, m.label])).toEqual([
      [1.5, "manual: target 2 -> 3"],
      [2.5, "auto: 3 -> 4: trainer idle 40%"],
    ]);
  });
});
